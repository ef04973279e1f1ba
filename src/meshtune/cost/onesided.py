"""Cost of the universal one-sided GeMM (Brock & Golin, "Slicing Is All You Need", §4.2–4.3).

A configuration names the tile-grid kind of A, B and C (knobs ``A``, ``B``, ``C``: 1-based
positions in :data:`meshtune.partition.layout.KINDS`, 1 = rows … 5 = full), the replication factor
``replicas`` (c ≤ 4, dividing p) and the ``stationary`` matrix (1 = A, 2 = B, 3 = C).
The pass's GeMM is taken in its logical form ``C(m×n) = A(m×k)·B(k×n)``: an LS or RS operand
is the transpose of the stored one, whose tiles are the transposes of the logical tiles, so
reading it costs no communication. A layer's configuration lays out each of its three passes'
own A, B and C; a layout's continuity from one pass to the next is not modelled.

:func:`meshtune.cost.onesided_loads.loads` computes every process's gets, accumulates and
multiplies by overlap arithmetic, once per layout and process count for every size that is a
multiple of ``2p`` (:func:`meshtune.cost.onesided_loads.reduced` scales it exactly: the layers,
passes and micro-batch sizes a search tries share it). Gets and accumulates are one-sided
transfers priced with the profile's ``send_recv`` link parameters of every axis they cross.
The cost model follows the paper's roofline-and-overlap estimate (§4.3) for the *busiest*
process:

* ``compute_s`` = max over processes of ``Σ gemm_time(m_s, n_s, k_s)`` over its stationary
  tiles, where ``(m_s, n_s, k_s)`` is the part of the multiply a tile's local multiplies
  make up together (stationary C: its rows × columns × the replica's k; A: rows × n × its k;
  B: m × columns × its k) — the panel shapes the paper names as the reason a layout's local
  GeMMs are efficient or not (§5.2.1);
* the busiest process (most elements moved, ties to the lowest) issues its gets and
  accumulates beside its multiplies (prefetch and asynchronous accumulates, §4.2). Each group
  of operations (gets, accumulates, reduction accumulates) on one axis is one :class:`Comm`
  with one launch and one step per operation: ``t_launch + ops · t_sync + bytes / bw``;
* the first get must land before the first multiply and the last accumulate leaves after the
  last one: ``prologue = t_sync + first get's bytes / bw``, ``steady = stage(compute_s, the
  other gets and accumulates)`` (:func:`meshtune.cost.schedule.stage`: overlapped when the
  profile overlaps ``send_recv``), ``epilogue = last accumulate + Σ reduction accumulates``
  (``reduce_replicas`` runs after the last multiply);
* two iterations in :class:`PassCost`'s terms: ``total = prologue + steady + epilogue``.

The pass's traffic is that busiest process's transfers (:func:`onesided_comms`), which the
executor counts from the arrays it moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from meshtune.cost.collectives import CommTime
from meshtune.cost.compute import gemm_time
from meshtune.cost.config import Candidates, Config
from meshtune.cost.onesided_loads import loads, matrix_scales, reduced
from meshtune.cost.schedule import (
    KINDS as COMM_KINDS,
)
from meshtune.cost.schedule import (
    Comm,
    CommColumns,
    PassCost,
    comm_time,
    parallel_time,
    stage,
)
from meshtune.dataflow import Dim, GemmOp, LayerDataflow
from meshtune.errors import InfeasibleError
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh, check_chips
from meshtune.hardware.profile import HardwareProfile
from meshtune.partition.layout import KINDS, MATRICES, Matrix, process_grid
from meshtune.partition.partitioning import (
    MAX_REPLICAS,
    Partitioning,
    explored_partitionings,
    parse_partition,
    partition_problem,
)
from meshtune.partition.transfers import GROUPS
from meshtune.partition.work import Problem

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

ONE_SIDED = CollectiveKind.SEND_RECV


def config_of(part: Partitioning, stationary: str, replicas: int) -> Config:
    """The :class:`Config` of a partitioning, stationary matrix (``A``/``B``/``C``) and c."""
    return Config.of(
        A=KINDS.index(part.a) + 1,
        B=KINDS.index(part.b) + 1,
        C=KINDS.index(part.c) + 1,
        replicas=replicas,
        stationary="ABC".index(stationary) + 1,
    )


def partitioning_of(config: Config) -> Partitioning:
    """The partitioning a configuration names."""
    return Partitioning(KINDS[config["A"] - 1], KINDS[config["B"] - 1], KINDS[config["C"] - 1])


def describe(config: Config) -> str:
    """``fsdp c=2 S-C`` (layout name, replication factor, stationary matrix as the paper
    writes it)."""
    part = partitioning_of(config)
    return f"{part.name} c={config['replicas']} S-{MATRICES[config['stationary'] - 1]}"


def problem_of(op: GemmOp, mesh: Mesh, config: Config) -> Problem:
    """The logical problem of one pass under ``config`` on every chip of ``mesh``."""
    return Problem(
        op.m,
        op.n,
        op.k,
        partitioning_of(config),
        MATRICES[config["stationary"] - 1],
        config["replicas"],
        mesh.chips,
    )


@dataclass(frozen=True)
class _Summary:
    """What the cost needs from a problem: the busiest process's groups of operations
    ``(get | accumulate | reduce, axis, operations, elements)``; the distinct multiply shapes
    of the stationary tiles and how many of each every process that multiplies has (a row
    each)."""

    groups: tuple[tuple[str, int, int, int], ...]
    shapes: tuple[tuple[int, int, int], ...]
    counts: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class _Shared:
    """What problems whose sizes are multiples of one another share
    (:func:`~meshtune.cost.onesided_loads.reduced`), from the smallest one's
    :func:`~meshtune.cost.onesided_loads.loads`: elements moved per process and matrix
    (``(p, 3)``), operations per group of :data:`~meshtune.partition.transfers.GROUPS`, process
    and axis (``(3, p, 2)``) and elements per group, process, axis and matrix
    (``(3, p, 2, 3)``); the distinct multiply shapes in lexicographic order (``(shapes, 3)``) and
    how many of each every process that multiplies has."""

    moved_by: NDArray[np.int64]
    ops: NDArray[np.int64]
    elements: NDArray[np.int64]
    shapes: NDArray[np.int64]
    counts: tuple[tuple[int, ...], ...]


@lru_cache(maxsize=4096)
def _shared(
    sizes: tuple[int, int, int],
    part: Partitioning,
    stationary: Matrix,
    replicas: int,
    procs: int,
    cols: int,
) -> _Shared:
    import numpy as np  # not at module import: the CLI starts without NumPy

    found = loads(Problem(*sizes, part, stationary, replicas, procs), cols)
    # Distinct tile shapes (ragged tiles give few), in lexicographic order, and how many of
    # each every process has (np.unique(axis=0)'s answer, from one lexsort: several times
    # faster).
    owners = np.unique(found.shapes[:, 0])
    rows = found.shapes[:, 1:]
    order = np.lexsort(rows.T[::-1])
    ranked = rows[order]
    first = np.ones(len(ranked), dtype=bool)
    first[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
    index = np.empty(len(rows), dtype=np.intp)
    index[order] = np.cumsum(first) - 1
    counts = np.zeros((len(owners), int(first.sum())), dtype=np.int64)
    np.add.at(counts, (np.searchsorted(owners, found.shapes[:, 0]), index), 1)
    return _Shared(
        found.moved_by,
        np.stack(found.ops),
        np.stack(found.elements),
        ranked[first],
        tuple(tuple(x) for x in counts.tolist()),
    )


_GROUPS = tuple(kind if phase == "main" else phase for phase, kind in GROUPS)
"""``get``, ``accumulate``, ``reduce``: the names of
:data:`~meshtune.partition.transfers.GROUPS`."""


@lru_cache(maxsize=8192)
def _summary(problem: Problem, cols: int) -> _Summary:
    """The problem's :class:`_Summary`, scaled from what it shares with every multiple of its
    smallest form (:func:`~meshtune.cost.onesided_loads.reduced`: exact, in integers). The busiest
    process is :func:`~meshtune.partition.transfers.busiest`'s: most elements, ties to the lowest
    (``argmax``), none when nothing moves."""
    import numpy as np

    sizes, scales = reduced(problem)
    shared = _shared(sizes, problem.part, problem.stationary, problem.replicas, problem.procs, cols)
    weights = np.asarray(matrix_scales(scales), dtype=np.int64)
    moved = shared.moved_by @ weights
    top = int(moved.argmax())
    groups = []
    if moved[top]:
        ops = shared.ops[:, top].tolist()
        elements = (shared.elements[:, top] @ weights).tolist()
        groups = [
            (name, axis, ops[g][axis], elements[g][axis])
            for g, name in enumerate(_GROUPS)
            for axis in (0, 1)
            if ops[g][axis]
        ]
    shapes = shared.shapes * np.asarray(scales, dtype=np.int64)  # order and distinctness kept
    return _Summary(
        tuple(groups),
        tuple(tuple(x) for x in shapes.tolist()),
        shared.counts,
    )


def _comms(summary: _Summary, group: str, mesh: Mesh, bytes_per_element: int) -> list[Comm]:
    return [
        Comm(
            ONE_SIDED,
            axis,
            mesh.ring(axis),
            ops,
            elements * bytes_per_element / ops,
            elements * bytes_per_element,
        )
        for where, axis, ops, elements in summary.groups
        if where == group
    ]


def onesided_comms(op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int) -> list[Comm]:
    """The busiest process's gets, accumulates and replica-reduction accumulates: one
    :class:`Comm` per group and axis crossed, one step per operation."""
    summary = _summary(problem_of(op, mesh, config), mesh.cols)
    return [c for group in _GROUPS for c in _comms(summary, group, mesh, bytes_per_element)]


def onesided_columns(
    ops: Sequence[GemmOp], mesh: Mesh, configs: Sequence[Config], bytes_per_element: int
) -> list[CommColumns]:
    """:func:`onesided_comms` of every configuration and pass as columns
    (:data:`meshtune.cost.config.ColumnsBuilder`), straight from each problem's groups of
    operations, in the lists' order, without building the :class:`Comm` lists."""
    import numpy as np

    width, kind = len(ops), COMM_KINDS.index(ONE_SIDED)
    rows, axes, steps, elements = [], [], [], []
    for i, config in enumerate(configs):
        for j, op in enumerate(ops):
            for _, axis, n, moved in _summary(problem_of(op, mesh, config), mesh.cols).groups:
                rows.append(i * width + j)
                axes.append(axis)
                steps.append(n)
                elements.append(moved)
    count = len(rows)
    step = np.asarray(elements, dtype=np.float64) * bytes_per_element
    return [
        CommColumns(
            row=np.asarray(rows, dtype=np.intp),
            kind=np.full(count, kind, dtype=np.intp),
            axis=np.asarray(axes, dtype=np.intp),
            steps=np.asarray(steps, dtype=np.float64),
            step_bytes=step / np.asarray(steps, dtype=np.float64) if count else step,
            issues=np.ones(count, dtype=np.float64),
            both_ways=np.zeros(count, dtype=np.bool_),
        )
    ]


def _one_op(comm: Comm, profile: HardwareProfile) -> tuple[CommTime, list[Comm]]:
    """Split one operation off a group: its time without the group's launch
    (``t_sync + step_bytes / bw``), and the rest of the group (launch included)."""
    link = profile.link(comm.kind, comm.axis)
    rest = Comm(
        comm.kind,
        comm.axis,
        comm.ring,
        comm.steps - 1,
        comm.step_bytes,
        comm.link_bytes - comm.step_bytes,
    )
    return CommTime(sync_s=link.t_sync_s, transfer_s=comm.step_bytes / link.bw_bytes_per_s), [rest]


@dataclass(frozen=True)
class Phases:
    """One pass of the busiest process in the order it runs (module docstring): the first get
    (``first``, on axis ``first_axis``; none when nothing is fetched), the multiplies
    (``compute_s``) beside the other gets and accumulates (``overlapped``), the last accumulate
    (``last`` on ``last_axis``) and the replica-reduction accumulates (``reduce``), one after
    another. The cost model and the timeline both read a pass from here."""

    compute_s: float
    overlapped: list[Comm]
    reduce: list[Comm]
    first: CommTime | None
    first_axis: int
    last: CommTime | None
    last_axis: int


def onesided_phases(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> Phases:
    """The busiest process's pass as :class:`Phases`: ``compute_s`` is the most any process
    spends in its stationary tiles' multiplies, ``max_g Σ_shapes n_g · gemm_time(shape)``."""
    summary = _summary(problem_of(op, mesh, config), mesh.cols)
    e = profile.bytes_per_element
    gets, accs = _comms(summary, "get", mesh, e), _comms(summary, "accumulate", mesh, e)
    times = [gemm_time(profile, *shape) for shape in summary.shapes]
    compute_s = max(
        (sum(n * t for n, t in zip(row, times, strict=True)) for row in summary.counts),
        default=0.0,
    )
    first = last = None
    first_axis = gets[0].axis if gets else 0
    last_axis = accs[-1].axis if accs else 0
    if gets:
        first, rest = _one_op(gets[0], profile)
        gets = rest + gets[1:]
    if accs:
        last, rest = _one_op(accs[-1], profile)
        accs = accs[:-1] + rest
    return Phases(
        compute_s,
        gets + accs,
        _comms(summary, "reduce", mesh, e),
        first,
        first_axis,
        last,
        last_axis,
    )


def onesided_cost(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
    """``first get + stage(max compute, other transfers) + last accumulate + reduction``
    (module docstring)."""
    phases = onesided_phases(op, mesh, profile, config)
    first, last = phases.first or CommTime(), phases.last or CommTime()
    overlapped, reduce = phases.overlapped, phases.reduce
    tail = comm_time(reduce, profile).total_s
    exposed = first.total_s + last.total_s + tail
    return PassCost(
        iterations=2,
        prologue_s=first.total_s,
        steady_s=stage(phases.compute_s, overlapped, profile),
        epilogue_s=last.total_s + tail,
        compute_s=phases.compute_s,
        comm=comm_time(overlapped + reduce, profile) + first + last,
        comm_wall_s=parallel_time(overlapped, profile) + exposed,
    )


def onesided_configs(layer: LayerDataflow, mesh: Mesh, block: int) -> Candidates:
    """Every explored partitioning × stationary matrix × replication factor c ≤ 4 dividing
    the chips, in :class:`Config` order, for any Table 1 row (the algorithm places its own
    layouts, so a transposed row runs the same multiplies)."""
    found = [
        config_of(part, stationary, c)
        for part in explored_partitionings()
        for stationary in MATRICES
        for c in range(1, MAX_REPLICAS + 1)
        if partition_problem(part, stationary, c, mesh.chips) is None
    ]
    return tuple(sorted(found)), None


def onesided_units(layer: LayerDataflow, mesh: Mesh, config: Config, block: int) -> dict[Dim, int]:
    """Any sizes: tiles are ragged, so every dimension has unit 1."""
    return {"tokens": 1, "in": 1, "out": 1}


MAX_PROCESSES = 64
"""The most processes the layouts are explored for: the per-process overlap arithmetic grows as
p · tiles, and the paper evaluates one node (6–12 GPUs, §5.2)."""


def onesided_problem(mesh: Mesh) -> str | None:
    """A 2D mesh of at most :data:`MAX_PROCESSES` chips."""
    if mesh.depth != 1:
        return f"{mesh.label}: the one-sided GeMM runs on a 2D mesh (depth 1)"
    if mesh.chips > MAX_PROCESSES:
        return (
            f"{mesh.label}: the one-sided GeMM explores layouts for at most {MAX_PROCESSES} "
            f"processes, not {mesh.chips}"
        )
    return None


def onesided_meshes(chips: int) -> tuple[Mesh, ...]:
    """One mesh: the most square ``P_r × P_c`` (the process placement, not a search knob)."""
    check_chips(chips)
    return (Mesh(*process_grid(chips)),)


def layout_configs(
    partition: str, replicas: int, stationary: str | None, chips: int
) -> tuple[Config, ...]:
    """The configurations of one layout: ``partition`` (a name of
    :data:`meshtune.partition.partitioning.NAMED` or ``A=rows,B=cols,C=cols``) with ``replicas``
    replicas on ``chips`` processes, ``stationary`` (``A``, ``B`` or ``C``) or, when ``None``,
    each matrix that may stay stationary. :class:`InfeasibleError` names the problem otherwise."""
    part = parse_partition(partition)
    if not 1 <= replicas <= MAX_REPLICAS:
        raise InfeasibleError(
            f"replication factor {replicas} is out of range; choose 1 to {MAX_REPLICAS}"
        )
    if stationary is not None and stationary.upper() not in MATRICES:
        raise InfeasibleError(
            f"stationary matrix '{stationary}' is unknown; choose {', '.join(MATRICES)}"
        )
    choices = (
        MATRICES if stationary is None else tuple(m for m in MATRICES if m == stationary.upper())
    )
    found, problems = [], []
    for matrix in choices:
        problem = partition_problem(part, matrix, replicas, chips)
        if problem is None:
            found.append(config_of(part, matrix, replicas))
        else:
            problems.append(problem)
    if not found:
        raise InfeasibleError(f"{part.name}: {problems[0]}")
    return tuple(found)
