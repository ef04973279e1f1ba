"""meshtune.step.pipeline: the column forms are the scalar ones, float for float, and the
schedule's ends and bubble worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshtune.step.pipeline import (
    bubble_fraction,
    bubble_in_slots,
    end_times,
    ends_held,
    interleavings,
    pipeline_slots,
    schedule_bubble_fraction,
    stage_extremes,
    stage_layout,
)


@st.composite
def split_columns(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, int]]]:
    """A block count and (pp, m, v) splits of it, v from :func:`interleavings`."""
    blocks = draw(st.integers(1, 130))
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        pp = draw(st.integers(1, blocks))
        m = draw(st.integers(1, 64))
        rows.append((pp, m, draw(st.sampled_from(interleavings(blocks, pp, m)))))
    return blocks, rows


@given(split_columns())
def test_pipeline_slots_and_stage_extremes_of_columns_are_each_splits(
    case: tuple[int, list[tuple[int, int, int]]],
) -> None:
    blocks, rows = case
    pp, m, vpp = (np.array(column, dtype=np.int64) for column in zip(*rows, strict=True))
    assert pipeline_slots(pp, m, vpp).tolist() == [pipeline_slots(*row) for row in rows]
    most, fewest = stage_extremes(blocks, pp, vpp)
    layouts = [stage_layout(blocks, p, v) for p, _, v in rows]
    assert most.tolist() == [layout.most for layout in layouts]
    assert fewest.tolist() == [layout.fewest for layout in layouts]


def test_no_split_has_no_extremes() -> None:
    empty = np.zeros(0, dtype=np.int64)
    most, fewest = stage_extremes(4, empty, empty)
    assert most.tolist() == fewest.tolist() == []


def test_the_ends_of_each_schedule_by_hand() -> None:
    # 1F1B: chip 0 embeds, the last chip runs the LM head and loss; one stage does both
    assert end_times("1f1b", 3, 1.0, 4.0) == [1.0, 0.0, 4.0]
    assert end_times("1f1b", 1, 1.0, 4.0) == [5.0]
    # DualPipe: each end chip embeds half the micro-batches and ends the other half
    assert end_times("dualpipe", 4, 1.0, 4.0) == [2.5, 0.0, 0.0, 2.5]
    assert (ends_held("1f1b", 1), ends_held("1f1b", 4), ends_held("dualpipe", 4)) == (2, 1, 2)


def test_only_a_bubble_of_whole_slots_is_known_from_the_split() -> None:
    assert bubble_in_slots("1f1b") and not bubble_in_slots("dualpipe")
    assert schedule_bubble_fraction("1f1b", 4, 8, 2) == bubble_fraction(4, 8, 2)
    assert schedule_bubble_fraction("1f1b", 4, 8, 2) == pytest.approx(1.5 / 9.5)
    assert schedule_bubble_fraction("dualpipe", 4, 8) is None
