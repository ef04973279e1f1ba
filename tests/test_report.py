"""Terminal rendering of a plan (meshtune.report.plan)."""

from __future__ import annotations

import io
import re
import sys
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from meshtune.catalog import load_model, load_profile
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan
from meshtune.planner.make import make_plan
from meshtune.report.console import can_encode, make_console
from meshtune.report.plan import fmt_time, render_plan


def render(plan: Plan, width: int = 120) -> str:
    console = Console(record=True, width=width, color_system=None, file=_Null())
    console.print(render_plan(plan))
    return console.export_text()


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


@pytest.fixture(scope="module")
def gpt3_plan() -> Plan:
    return make_plan(load_model("gpt3"), load_profile("tpuv4"), 256, top=5)


def test_render_gpt3(gpt3_plan: Plan) -> None:
    text = render(gpt3_plan)
    lines = text.splitlines()
    # summary
    assert lines[0].startswith(
        "GPT-3 175B on 256 chips (tpuv4): meshslice on mesh 32x8, FC FLOP utilization "
    )
    assert f"{gpt3_plan.utilization:.1%}" in lines[0]
    assert (
        "batch 128 × seq 2048 = 262144 tokens, 96 blocks, dataflow auto, algorithm meshslice"
        in text
    )
    # phase 1 table: every layer with its shape, stationary matrix, dataflows and sharding
    assert "Phase 1: dataflow and sharding  (tensor[dim over rows|dim over cols])" in text
    for layer in gpt3_plan.layers:
        row = next(line for line in lines if line.startswith(f"│ {layer.name} ") and "→" in line)
        assert f"{layer.in_features}→{layer.out_features}" in row
        assert f"{layer.stationary}-stn" in row
        flows = " / ".join(layer.dataflows[p.name] for p in layer.passes)
        assert flows in row
    assert "X[tokens|in]" in text
    assert "W[out|in]" in text  # mlp_down stores Wᵀ
    # phase 2 table: S per layer
    for layer in gpt3_plan.layers:
        row = next(line for line in lines if re.match(rf"│ {layer.name}\s+│ +S=\d+ +│", line))
        assert re.match(rf"│ {layer.name}\s+│ +S={layer.config['slices']} +│", row)
        assert f"{layer.utilization:.1%}" in row
    # top-K table
    assert "Top 5 mesh shapes (meshslice)" in text
    top = [line for line in lines if re.match(r"│ [1-5] │", line)]
    assert len(top) == 5
    assert "32x8 ←" in top[0]
    for rank, (cand, row) in enumerate(zip(gpt3_plan.candidates, top, strict=True), start=1):
        assert row.startswith(f"│ {rank} │ {cand.rows}x{cand.cols}")
        assert " ".join(f"S={c['slices']}" for c in cand.configs.values()) in row
        assert f"{cand.utilization:.1%}" in row
    assert "note:" not in text  # nothing infeasible, no transposes


def test_no_markup_leaks(gpt3_plan: Plan) -> None:
    text = render(gpt3_plan)
    for layer in gpt3_plan.layers:
        for tensor, (rows, cols) in layer.sharding.items():
            assert f"{tensor}[{rows}|{cols}]" in text
    assert "\\[" not in text
    assert "[bold" not in text and "[/" not in text


def test_notes_render_transposes_and_infeasible_shapes(gpt3_plan: Plan) -> None:
    plan = gpt3_plan.model_copy(
        update={
            "transposes": ["transpose qkv output before the residual add"],
            "infeasible_shapes": ["1x256: layer qkv: X[odd] reason"],
        }
    )
    text = render(plan)
    assert "note: transpose qkv output before the residual add" in text
    assert "note: 1 shape(s) infeasible: 1x256: layer qkv: X[odd] reason" in text


def test_display_name_with_brackets_is_literal(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    spec = gpt3.model_copy(update={"display_name": "GPT-3 [draft] [/x]"})
    text = render(make_plan(spec, tpuv4, 256, top=1))
    assert text.startswith("GPT-3 [draft] [/x] on 256 chips")


def test_transposed_layer_is_marked(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    # batch 1 × 2048 tokens: every layer is W-stationary, qkv and mlp_up transposed
    text = render(make_plan(gpt3, tpuv4, 8, batch=1))
    assert text.count("W-stn (transposed)") == 2
    assert "X[tokens|in]" in text and "Y[out|tokens]" in text


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (6.534, "6.53 s"),
        (1.0, "1 s"),
        (0.0117, "11.7 ms"),
        (2.08e-3, "2.08 ms"),
        (5e-6, "5 µs"),
        (0.9996, "1 s"),  # regression: a DualPipe bubble read "1e+03 ms"
        (0.00099951, "1 ms"),
        (1234.4, "1,234 s"),
    ],
)
def test_fmt_time(seconds: float, expected: str) -> None:
    assert fmt_time(seconds) == expected


@given(st.floats(min_value=1e-9, max_value=1e9))
def test_fmt_time_never_writes_an_exponent(seconds: float) -> None:
    text = fmt_time(seconds)
    value, unit = text.split(" ")
    assert (
        "e" not in value and unit in ("s", "ms", "µs", "ns") and float(value.replace(",", "")) > 0
    )


def test_narrow_console_still_renders(gpt3_plan: Plan) -> None:
    text = render(gpt3_plan, width=80)
    assert "mesh 32x8" in text
    for layer in gpt3_plan.layers:
        assert layer.name in text


@pytest.mark.parametrize("width", [40, 60, 80])
def test_narrow_console_hides_nothing_behind_an_ellipsis(gpt3: ModelSpec, width: int) -> None:
    # a long layer name and wide numbers: folded onto more lines, never cut with "…"
    plan = make_plan(gpt3, load_profile("tpuv4"), 256, top=5)
    long_name = plan.layers[0].model_copy(update={"name": "a_very_long_layer_name_indeed"})
    text = render(plan.model_copy(update={"layers": [long_name, *plan.layers[1:]]}), width=width)
    assert "…" not in text
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if "│" in line)
    assert "a_very_long_layer_name_indeed" in first_column
    for cand in plan.candidates:
        assert f"{cand.utilization:.1%}" in text


class _AsciiStream(io.StringIO):
    encoding = "ascii"


def test_ascii_console_spells_symbols_and_keeps_columns_aligned(gpt3_plan: Plan) -> None:
    stream = _AsciiStream()
    with patch.object(sys, "stdout", stream):
        console = make_console()
        console.width = 100
        console.print(render_plan(gpt3_plan))
    text = stream.getvalue()
    assert text.isascii()
    assert "mesh 32x8" in text and "12288->36864" in text and "32x8 <-" in text
    table_lines = [line for line in text.splitlines() if line.startswith(("|", "+"))]
    phase1 = table_lines[: table_lines.index(next(x for x in table_lines if "mlp_down" in x)) + 3]
    assert len({len(line) for line in phase1}) == 1, phase1


def test_utf8_stream_gets_a_plain_console() -> None:
    assert can_encode(io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    assert not can_encode(_AsciiStream())


def test_emoji_codes_in_cells_print_verbatim() -> None:
    # the reports never mean an emoji: a ":code:" in a table cell (a profile's description in
    # `meshtune profiles`, a path) stays as written
    table = Table()
    table.add_column("description")
    table.add_row("links :rocket: fast, C:\\x:smile:")
    stream = io.StringIO()
    with patch.object(sys, "stdout", stream):
        make_console().print(table)
    assert "links :rocket: fast, C:\\x:smile:" in stream.getvalue()
