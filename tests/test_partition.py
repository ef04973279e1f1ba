"""Layouts and the slicing arithmetic of the one-sided GeMM (Brock & Golin §3, §4.1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.cost.onesided_loads import loads, matrix_scales, reduced
from meshtune.errors import InfeasibleError
from meshtune.partition.layout import KINDS, MATRICES, Layout, Matrix, area, process_grid, split
from meshtune.partition.partitioning import (
    NAMED,
    Partitioning,
    explored_partitionings,
    parse_partition,
)
from meshtune.partition.transfers import busiest, transfer_axes
from meshtune.partition.work import Problem


def test_split_is_balanced_and_ragged() -> None:
    assert split(10, 4) == (0, 2, 5, 7, 10)
    assert split(3, 4) == (0, 0, 1, 2, 3)  # more parts than rows: empty tiles
    assert process_grid(12) == (3, 4) and process_grid(7) == (1, 7) and process_grid(16) == (4, 4)


def test_layout_grids_owners_and_overlaps() -> None:
    blocks = Layout("blocks", 10, 9, 6)  # 2 x 3 process grid
    assert blocks.grid == (2, 3)
    assert blocks.bounds((1, 2)) == (5, 10, 6, 9)
    assert blocks.owners((1, 2)) == (5,)
    cyclic = Layout("cyclic", 8, 8, 4)  # 4 x 4 tiles over a 2 x 2 grid
    assert cyclic.owned(3) == [(1, 1), (1, 3), (3, 1), (3, 3)]
    assert Layout("full", 4, 4, 3).owners((0, 0)) == (0, 1, 2)
    # A misaligned slice: rows 3..7 of 3 row blocks of 10 (0-3, 3-6, 6-10).
    rows = Layout("rows", 10, 4, 3)
    assert rows.overlapping((3, 7, 1, 3)) == [((1, 0), (3, 6, 1, 3)), ((2, 0), (6, 7, 1, 3))]
    assert rows.overlapping((3, 3, 0, 4)) == []


def test_named_layouts_and_parsing() -> None:
    assert parse_partition("1d_tp_column") == Partitioning("rows", "cols", "cols")
    assert parse_partition(" a=Cols, B=rows ,C=rows") == NAMED["1d_tp_row"]
    assert NAMED["fsdp"].name == "fsdp"
    assert Partitioning("rows", "blocks", "cols").name == "A=rows,B=blocks,C=cols"
    with pytest.raises(InfeasibleError, match="unknown kind 'diag' for B; known: rows, cols"):
        parse_partition("A=rows,B=diag,C=cols")
    with pytest.raises(InfeasibleError, match="no kind for C"):
        parse_partition("A=rows,B=cols")
    with pytest.raises(InfeasibleError, match="expected A=KIND,B=KIND,C=KIND or one of"):
        parse_partition("megatron")


def test_problem_constraints() -> None:
    with pytest.raises(InfeasibleError, match="replication factor 3 does not divide 8"):
        Problem(8, 8, 8, NAMED["fsdp"], "C", 3, 8)
    with pytest.raises(InfeasibleError, match="stationary B is replicated on every process"):
        Problem(8, 8, 8, NAMED["sequence_parallel"], "B", 1, 8)
    explored = explored_partitionings()
    assert len(explored) == 28 and len(set(explored)) == 28
    assert NAMED["2d_blocks"] in explored and NAMED["sequence_parallel"] not in explored


def test_transfer_axes_follow_the_mesh() -> None:
    # 2 x 3 mesh: processes 0 1 2 / 3 4 5.
    assert transfer_axes(0, 2, 3) == (1,)
    assert transfer_axes(1, 4, 3) == (0,)
    assert transfer_axes(0, 5, 3) == (0, 1)
    assert busiest({0: 4, 1: 6, 2: 6}) == 1 and busiest({0: 0}) is None and busiest({}) is None


def test_column_blocks_stationary_c_gets_only_a_with_staggered_first_reads() -> None:
    # 1D TP column-parallel: C and B split over columns, A (token rows) gathered with gets.
    problem = Problem(8, 8, 4, NAMED["1d_tp_column"], "C", 1, 4)
    works = problem.work()
    for work in works:
        gets = [p for p in work.pieces if p.source is not None]
        assert {p.matrix for p in gets} == {"A"}
        assert sum(area(p.rect) for p in gets) == 3 * 2 * 4  # three remote row blocks of A
        assert len(work.multiplies) == 4
    # The iteration offset: every process reads a different owner first (§4.2).
    first = [next(p.source for p in w.pieces if p.source is not None) for w in works]
    assert sorted(first) == [0, 1, 2, 3]


def test_outer_product_stationary_a_accumulates_c_and_replicas_reduce() -> None:
    # Megatron row-parallel: A split over k, B over k (aligned: no gets), partial C rows
    # accumulated into their owners (a reduce-scatter by remote accumulates).
    works = Problem(6, 6, 8, NAMED["1d_tp_row"], "A", 1, 4).work()
    c_rows = split(6, 4)
    for work in works:
        assert not [p for p in work.pieces if p.source is not None]
        sent = [p for p in work.pieces if p.matrix == "C" and p.targets]
        own = c_rows[work.process + 1] - c_rows[work.process]
        assert sum(area(p.rect) for p in sent) == (6 - own) * 6
    # Two replicas of two processes: replica 1 multiplies k in [4, 8) and reduces into 0.
    problem = Problem(6, 6, 8, NAMED["1d_tp_row"], "A", 2, 4)
    assert problem.k_slice(0) == (0, 4) and problem.k_slice(1) == (4, 8)
    works = problem.work()
    assert [len(w.reductions) for w in works] == [0, 0, 1, 1]
    assert works[2].reductions[0].targets == (0,) and works[3].reductions[0].targets == (1,)
    # Only the process whose k tile meets its replica's slice has work (the imbalance the
    # cost model charges through the busiest process).
    assert [bool(w.multiplies) for w in works] == [True, False, False, True]


def _moved_by_work(problem: Problem) -> dict[int, int]:
    moved = {}
    for work in problem.work():
        total = sum(area(p.rect) for p in work.pieces if p.source is not None)
        total += sum(area(p.rect) * len(p.targets) for p in work.pieces)
        total += sum(area(r.rect) * len(r.targets) for r in work.reductions)
        moved[work.process] = total
    return moved


Choice = tuple[Partitioning, Matrix, int, tuple[int, int]]


@st.composite
def _layouts(draw: st.DrawFn) -> Choice:
    """A feasible (partitioning, stationary matrix, replicas, mesh) on a small mesh."""
    stationary = draw(st.sampled_from(MATRICES))
    moving = st.sampled_from(KINDS)
    stays = st.sampled_from([kind for kind in KINDS if kind != "full"])
    part = Partitioning(*(draw(stays if m == stationary else moving) for m in MATRICES))
    rows, cols = draw(st.sampled_from([(1, 4), (2, 2), (2, 4), (4, 2), (2, 3), (3, 4)]))
    replicas = draw(st.sampled_from([c for c in (1, 2, 3, 4) if rows * cols % c == 0]))
    return part, stationary, replicas, (rows, cols)


@settings(max_examples=60, deadline=None)
@given(sizes=st.tuples(*[st.integers(1, 13)] * 3), layout=_layouts())
def test_loads_agree_with_the_listed_work_and_cover_the_product(
    sizes: tuple[int, int, int], layout: Choice
) -> None:
    part, stationary, replicas, (rows, cols) = layout
    m, n, k = sizes
    problem = Problem(m, n, k, part, stationary, replicas, rows * cols)
    # Every (i, j, l) of the product is multiplied exactly once over all processes.
    volume = sum(
        (x.m[1] - x.m[0]) * (x.n[1] - x.n[0]) * (x.k[1] - x.k[0])
        for w in problem.work()
        for x in w.multiplies
    )
    assert volume == m * n * k
    # The vectorized arithmetic the cost uses moves what the listed pieces move.
    assert loads(problem, cols).moved == _moved_by_work(problem)


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.tuples(*[st.integers(1, 13)] * 3),
    scales=st.tuples(*[st.sampled_from([1, 2, 3, 7])] * 3),
    divisible=st.tuples(*[st.booleans()] * 3),
    layout=_layouts(),
)
def test_a_multiple_of_a_problem_scales_its_loads_exactly(
    sizes: tuple[int, int, int],
    scales: tuple[int, int, int],
    divisible: tuple[bool, bool, bool],
    layout: Choice,
) -> None:
    part, stationary, replicas, (rows, cols) = layout
    procs = rows * cols
    unit = 2 * procs
    # Each size a multiple of 2p (shared) or any size (kept whole, scale 1).
    m, n, k = (s * unit * f if d else s for s, f, d in zip(sizes, scales, divisible, strict=True))
    problem = Problem(m, n, k, part, stationary, replicas, procs)
    kept, found = reduced(problem)
    for size, size0, scale in zip((m, n, k), kept, found, strict=True):
        assert (size0, scale) == ((unit, size // unit) if size % unit == 0 else (size, 1))
    # Exactly the loads of the problem itself: counts equal, elements and shapes scaled.
    direct = loads(problem, cols)
    shared = loads(Problem(*kept, part, stationary, replicas, procs), cols)
    weights = np.asarray(matrix_scales(found))
    np.testing.assert_array_equal(direct.moved_by, shared.moved_by * weights)
    for group in range(len(direct.ops)):
        np.testing.assert_array_equal(direct.ops[group], shared.ops[group])
        np.testing.assert_array_equal(direct.elements[group], shared.elements[group] * weights)
    np.testing.assert_array_equal(direct.shapes, shared.shapes * np.asarray((1, *found)))
