"""MeshSlice and Collective 2D GeMMs on a P_r × P_c mesh (MeshSlice §2.3.4, §3.1, §3.2.2).

With ``r × c`` the logical mesh (P_r × P_c, or P_c × P_r for a transposed dataflow), P = r·c,
``e`` bytes per element and S slices, each of the S loop iterations of Figure 5 does:

* OS ``C = A·B``: AG_col of an A sub-shard (m·k / (P·S) elements, column ring) and AG_row of a
  B sub-shard (k·n / (P·S), row ring), then a local GeMM of (m/r) × (n/c) × (k/S).
  prologue = max(AG_col, AG_row) (their sum where they cannot overlap compute);
  steady = max(AG_col, AG_row, GeMM); epilogue = GeMM.
* LS ``C = A·Bᵀ``: AG_row of a B sub-shard (n·k / (P·S)), a (m/r) × (n/S) × (k/c) GeMM, then
  RdS_col to an output sub-shard (m·n / (P·S)).
  prologue = AG_row; steady = max(AG_row, GeMM, RdS_col); epilogue = GeMM + RdS_col.
* RS ``C = Aᵀ·B``: AG_col of an A sub-shard (k·m / (P·S)), a (m/S) × (n/c) × (k/r) GeMM, then
  RdS_row to an output sub-shard (m·n / (P·S)).
  prologue = AG_col; steady = max(AG_col, GeMM, RdS_row); epilogue = GeMM + RdS_row.

A collective costs ``t_launch + (P_a − 1)·(t_sync + shard_bytes / bw)`` on a ring of P_a chips.
The two directions run in parallel with each other and, through software pipelining, with the
GeMM of another iteration, so the pass takes ``prologue + (S − 1)·steady + epilogue``. When the
profile says a collective kind cannot overlap with compute (§5.3, Table 3), the steady state
runs it before the GeMM instead (:func:`meshtune.cost.schedule.stage`), one after another, and
OS's prologue runs its two gathers in turn as well (``stage(0, …)``). Row-ring operations use
the axis-0 parameters and column-ring ones axis 1; a transposed dataflow swaps both.

S = 1 is the Collective 2D GeMM (Figure 2b), registered on its own: it needs only that every
stored matrix divides over the mesh. MeshSlice's slicing (Algorithm 2) also needs the sliced
dimension d to split into whole blocks on both rings, ``d % (B · lcm(P_r, P_c)) == 0``; its
valid S are the divisors of ``d / (B · lcm(P_r, P_c))``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from meshtune.cost.compute import gemm_time
from meshtune.cost.config import Candidates, Config
from meshtune.cost.schedule import (
    Comm,
    CommColumns,
    PassCost,
    columns,
    comm_time,
    parallel_time,
    repeated,
    ring_collective,
    stage,
)
from meshtune.cost.vector import gemm_flop_times, ring_table, stage_times
from meshtune.dataflow import Dataflow, Dim, GemmOp, LayerDataflow
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh, divisors
from meshtune.hardware.profile import HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray, IntArray

AG = CollectiveKind.ALL_GATHER
RDS = CollectiveKind.REDUCE_SCATTER


def layer_sizes(layer: LayerDataflow) -> dict[Dim, int]:
    """The layer's tokens / in / out extents."""
    fc = layer.layer
    return {"tokens": fc.tokens, "in": fc.in_features, "out": fc.out_features}


def sharding_problem(layer: LayerDataflow, mesh: Mesh) -> str | None:
    """Why a stored tensor does not divide over the mesh (rows over P_r, columns over P_c)."""
    sizes = layer_sizes(layer)
    for tensor, (row_dim, col_dim) in layer.sharding.items():
        for dim, ways, axis in ((row_dim, mesh.rows, "P_r"), (col_dim, mesh.cols, "P_c")):
            if sizes[dim] % ways:
                return (
                    f"layer {layer.layer.name}: {tensor} dimension {dim}={sizes[dim]} does not "
                    f"divide over {axis}={ways}"
                )
    return None


def sharding_units(layer: LayerDataflow, mesh: Mesh) -> dict[Dim, int]:
    """Per dimension, the lcm of the mesh axes it is sharded over."""
    units: dict[Dim, int] = {"tokens": 1, "in": 1, "out": 1}
    for row_dim, col_dim in layer.sharding.values():
        units[row_dim] = math.lcm(units[row_dim], mesh.rows)
        units[col_dim] = math.lcm(units[col_dim], mesh.cols)
    return units


def meshslice_configs(layer: LayerDataflow, mesh: Mesh, block: int) -> Candidates:
    """One :class:`Config` per valid slice count S, or the first constraint that fails."""
    problem = sharding_problem(layer, mesh)
    if problem is not None:
        return (), problem
    extent = layer_sizes(layer)[layer.sliced_dim]
    unit = block * math.lcm(mesh.rows, mesh.cols)
    if extent % unit:
        return (), (
            f"layer {layer.layer.name}: sliced dimension {layer.sliced_dim}={extent} is not a "
            f"multiple of block {block} × lcm({mesh.rows}, {mesh.cols}) = {unit}"
        )
    return _slice_configs(extent // unit), None


_SLICE_CONFIGS: dict[int, tuple[Config, ...]] = {}
""":func:`_slice_configs`' answers, keyed by the number whose divisors are the valid S (the
search asks for the same few hundred thousands of times)."""


def _slice_configs(units: int) -> tuple[Config, ...]:
    """One :class:`Config` per divisor S of ``units`` (the sliced extent in slicing units),
    ascending (cached: configurations are frozen)."""
    found = _SLICE_CONFIGS.get(units)
    if found is None:
        found = _SLICE_CONFIGS[units] = tuple(Config.of(slices=s) for s in divisors(units))
    return found


def collective_configs(layer: LayerDataflow, mesh: Mesh, block: int) -> Candidates:
    """The single configuration S = 1, when every stored matrix divides over the mesh."""
    problem = sharding_problem(layer, mesh)
    return ((), problem) if problem is not None else ((Config.of(slices=1),), None)


def meshslice_units(layer: LayerDataflow, mesh: Mesh, config: Config, block: int) -> dict[Dim, int]:
    """Sharding units, and ``B · lcm(P_r, P_c) · S`` on the sliced dimension when S > 1."""
    units = sharding_units(layer, mesh)
    sliced = layer.sliced_dim
    units[sliced] = math.lcm(
        units[sliced], block * math.lcm(mesh.rows, mesh.cols) * config["slices"]
    )
    return units


def collective_units(
    layer: LayerDataflow, mesh: Mesh, config: Config, block: int
) -> dict[Dim, int]:
    """Sharding units only: Collective does not slice."""
    return sharding_units(layer, mesh)


Move = tuple[CollectiveKind, int, int, float]
"""One ring collective of an iteration: (kind, physical axis, ring size, shard bytes), the
arguments of :func:`~meshtune.cost.schedule.ring_collective`."""


def _move_specs(op: GemmOp, mesh: Mesh, slices: int, e: int) -> tuple[Move, Move]:
    """(first, second) collective of one iteration: OS (AG_col A, AG_row B), LS (AG_row B,
    RdS_col C), RS (AG_col A, RdS_row C)."""
    (kind1, axis1, ring1), (kind2, axis2, ring2) = move_rings(op.dataflow, op.transposed, mesh)
    per = mesh.rows * mesh.cols * slices
    elements1, elements2 = move_elements(op)
    return (kind1, axis1, ring1, elements1 / per * e), (kind2, axis2, ring2, elements2 / per * e)


def move_rings(
    dataflow: Dataflow, transposed: bool, mesh: Mesh
) -> tuple[tuple[CollectiveKind, int, int], tuple[CollectiveKind, int, int]]:
    """(kind, physical axis, ring size) of the two collectives of :func:`_move_specs`."""
    (r, row_axis), (c, col_axis) = mesh.logical(transposed)
    if dataflow is Dataflow.OS:
        return (AG, col_axis, c), (AG, row_axis, r)
    if dataflow is Dataflow.LS:
        return (AG, row_axis, r), (RDS, col_axis, c)
    return (AG, col_axis, c), (RDS, row_axis, r)


def move_elements(op: GemmOp) -> tuple[int, int]:
    """Elements of the two matrices :func:`_move_specs` moves (1 / (P·S) of them per chip):
    OS (m·k, k·n), LS (n·k, m·n), RS (k·m, m·n)."""
    m, n, k = op.m, op.n, op.k
    if op.dataflow is Dataflow.OS:
        return m * k, k * n
    if op.dataflow is Dataflow.LS:
        return n * k, m * n
    return k * m, m * n


_MOVED: dict[Dataflow, tuple[int, int, int]] = {
    Dataflow.OS: (3, 4, 2),
    Dataflow.LS: (4, 5, 1),
    Dataflow.RS: (3, 5, 0),
}
"""Per dataflow, the rows of ``(m, n, k, m·k, n·k, m·n)`` that hold :func:`move_elements`'
two counts and ``GemmOp.sliced_extent`` (:func:`move_columns`)."""


def move_columns(
    ops: Sequence[GemmOp], rows: dict[tuple[bool, Dataflow], int]
) -> tuple[FloatArray, IntArray]:
    """``ops`` as float64 arrays for the family floors (every op in one NumPy evaluation):
    rows ``m, n, k``, :func:`move_elements`' two counts and ``sliced_extent``, a
    column per op, and each op's index in ``rows``, which maps each (transposition, dataflow)
    to its index (one not there yet is added with the next). A count is the float64 product
    of its two sizes: ``float(m * k)`` below :data:`~meshtune.cost.vector.EXACT_INTEGER`,
    and at or past it exactly when the integer product is."""
    import numpy as np

    index = rows.setdefault
    listed = np.array(
        [(op.m, op.n, op.k, index((op.transposed, op.dataflow), len(rows))) for op in ops],
        dtype=np.float64,
    ).reshape(len(ops), 4)
    m, n, k, at = listed.T
    which = at.astype(np.intp)
    sizes = np.stack([m, n, k, m * k, n * k, m * n])
    picks = np.array([_MOVED[dataflow] for _, dataflow in rows], dtype=np.intp)[which].T
    moved: FloatArray = np.concatenate([sizes[:3], sizes[picks, np.arange(len(ops))]])
    return moved, which


def _moves(op: GemmOp, mesh: Mesh, slices: int, e: int) -> tuple[list[Comm], list[Comm]]:
    """The two collectives of :func:`_move_specs` as communication lists."""
    first, second = _move_specs(op, mesh, slices, e)
    return ring_collective(*first), ring_collective(*second)


def meshslice_comms(op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int) -> list[Comm]:
    """Every collective of the pass: S iterations of the two of :func:`_moves`."""
    slices = config["slices"]
    if slices < 1:
        raise ValueError(f"slices must be >= 1, got {slices}")
    first, second = _moves(op, mesh, slices, bytes_per_element)
    return repeated(first + second, slices)


def meshslice_columns(
    ops: Sequence[GemmOp], mesh: Mesh, configs: Sequence[Config], bytes_per_element: int
) -> list[CommColumns]:
    """:func:`meshslice_comms` of every configuration and pass as columns
    (:data:`meshtune.cost.config.ColumnsBuilder`): the two collectives of S = 1 (:func:`_moves`),
    issued S times with 1 / S of their bytes, for every S at once."""
    import numpy as np

    once = _iteration_columns(ops, mesh, bytes_per_element)
    slices = np.array([[config["slices"]] for config in configs], dtype=np.float64)
    laid = once.for_configs(range(len(configs)), len(ops))
    return [laid._replace(issues=slices * once.issues, step_bytes=once.step_bytes / slices)]


def _iteration_columns(ops: Sequence[GemmOp], mesh: Mesh, bytes_per_element: int) -> CommColumns:
    """The two collectives of S = 1 of every op (:func:`_moves`) as columns, row = op index:
    at S slices each is issued S times with 1 / S of its bytes."""
    return columns([[*a, *b] for a, b in (_moves(op, mesh, 1, bytes_per_element) for op in ops)])


def local_gemm(op: GemmOp, mesh: Mesh, slices: int) -> tuple[float, float, float]:
    """(m, n, k) of one iteration's local GeMM (see the module docstring)."""
    (r, _), (c, _) = mesh.logical(op.transposed)
    if op.dataflow is Dataflow.OS:
        return op.m / r, op.n / c, op.k / slices
    if op.dataflow is Dataflow.LS:
        return op.m / r, op.n / slices, op.k / c
    return op.m / slices, op.n / c, op.k / r


def meshslice_cost(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
    """Cost of ``op`` with ``config["slices"]`` slices on ``mesh`` (see the module docstring)."""
    s = config["slices"]
    if s < 1:
        raise ValueError(f"slices must be >= 1, got {s}")
    first, second = _moves(op, mesh, s, profile.bytes_per_element)
    gemm = gemm_time(profile, *local_gemm(op, mesh, s))
    both = first + second
    comm = comm_time(both, profile).scaled(s)
    if op.dataflow is Dataflow.OS:
        gathers = parallel_time(both, profile)
        return PassCost(
            iterations=s,
            prologue_s=stage(0.0, both, profile),
            steady_s=stage(gemm, both, profile),
            epilogue_s=gemm,
            compute_s=s * gemm,
            comm=comm,
            comm_wall_s=s * gathers,
        )
    g = parallel_time(first, profile)
    d = parallel_time(second, profile)
    return PassCost(
        iterations=s,
        prologue_s=g,
        steady_s=stage(gemm, both, profile),
        epilogue_s=gemm + d,
        compute_s=s * gemm,
        comm=comm,
        comm_wall_s=g + d + (s - 1) * max(g, d),
    )


def meshslice_times(
    ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile, configs: Sequence[Config]
) -> FloatArray:
    """:func:`meshslice_cost` ``.total_s`` of every configuration (rows) and op (columns) as
    arrays (:data:`meshtune.cost.config.TimesBuilder`), from the two collectives of one S = 1
    iteration of each op (:func:`_move_specs`, the collectives of :func:`_moves` that
    :func:`meshslice_comms` and :func:`meshslice_columns` issue S times with 1 / S of their
    bytes), priced one iteration at a time (:func:`meshtune.cost.vector.ring_table`).

    The two run on different axes, so their parallel time is the larger. With ``g`` an
    iteration's GeMM (its FLOPs 1 / S of the S = 1 one's) and ``stage(x) =
    max(parallel(the overlapped ones), Σ the blocking ones + x)``, a pass takes ``ends + g +
    (S − 1)·stage(g)``, ``ends`` being OS ``stage(0)``, LS / RS ``AG + RdS`` (the prologue
    and the epilogue less its GeMM; the module docstring)."""
    import numpy as np

    counts = [config["slices"] for config in configs]
    if min(counts, default=1) < 1:
        raise ValueError(f"slices must be >= 1, got {min(counts)}")
    slices = np.array(counts, dtype=np.float64)[:, None]
    whole, output = np.array([_iteration_flops(op, mesh) for op in ops], dtype=np.float64).T
    gemm = gemm_flop_times(profile, whole / slices)
    table = _iteration_table(ops, mesh, profile)
    return _schedule(table, gemm, slices, output, profile.overlap_slowdown)


def _iteration_table(ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile) -> FloatArray:
    """The two collectives of each op's S = 1 iteration (:func:`_move_specs`) priced by
    :func:`meshtune.cost.vector.ring_table`, as 8 rows of one column per op: fixed and moving
    seconds, hidden, blocking, of the first collective, then of the second."""
    e = profile.bytes_per_element
    moves = [move for op in ops for move in _move_specs(op, mesh, 1, e)]
    table: FloatArray = ring_table(moves, profile).reshape(len(ops), 8).T
    return table


def _schedule(
    table: FloatArray | Sequence[FloatArray],
    gemm: FloatArray,
    slices: FloatArray,
    output: FloatArray,
    slowdown: float = 0.0,
) -> FloatArray:
    """The pass time of :func:`meshslice_times`' docstring, ``ends + g + (S − 1)·stage(g)``,
    from ``table``'s rows (fixed and moving seconds of one S = 1 issue, hidden, blocking: of
    the first collective, then of the second, :func:`meshtune.cost.vector.ring_table`), the
    GeMM time ``gemm`` of one iteration at ``slices`` and whether each pass is OS
    (``output``), all broadcast together; a steady stage's compute slowed by ``slowdown``
    beside its overlapped collectives (:func:`meshtune.cost.vector.stage_times`; the
    floors price without it, which only lowers them)."""
    import numpy as np

    fixed1, moving1, hidden1, blocking1, fixed2, moving2, hidden2, blocking2 = table
    # One iteration's two collectives at every S.
    first, second = fixed1 + moving1 / slices, fixed2 + moving2 / slices
    overlapping = np.maximum(first * hidden1, second * hidden2)
    waiting = first * blocking1 + second * blocking2
    ends = np.where(output, np.maximum(overlapping, waiting), first + second)
    steady = stage_times(overlapping, waiting, gemm, slowdown)
    times: FloatArray = ends + gemm + (slices - 1) * steady
    return times


def _iteration_flops(op: GemmOp, mesh: Mesh) -> tuple[float, bool]:
    """FLOPs of :func:`local_gemm` at S = 1 (S slices do 1 / S of them per iteration), and
    whether ``op`` is OS."""
    return 2.0 * math.prod(local_gemm(op, mesh, 1)), op.dataflow is Dataflow.OS


FLOOR_SLICES = 2
"""The slice counts 1 … FLOOR_SLICES at which :func:`meshslice_floors` evaluates a pass's
schedule; above them it takes a bound of its own (with the visit's block floors,
Llama 3.1 405B at 55,440 chips searched in about 1.6–1.7 s at 2 or 3, 1.85 s at 8, whose
grid costs more than it prunes)."""


def meshslice_floors(ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile) -> list[float]:
    """A lower bound of :func:`meshslice_cost` ``.total_s`` of each op at *every* S ≥ 1
    (:data:`meshtune.cost.config.FloorBuilder`), from the S = 1 iteration alone
    (:func:`schedule_floors` of its two collectives, :func:`_move_specs`, and its GeMM's
    ``2·m·n·k / (P·F)``). No configuration object is built: the search checks it before
    pricing a layer."""
    import numpy as np

    rate = profile.effective_flops_per_s * mesh.rows * mesh.cols
    table = _iteration_table(ops, mesh, profile)
    compute = np.array([2.0 * op.m * op.n * op.k / rate for op in ops], dtype=np.float64)
    output = np.array([op.dataflow is Dataflow.OS for op in ops])
    floors: list[float] = schedule_floors(table, compute, output).tolist()
    return floors


def schedule_floors(
    table: FloatArray | Sequence[FloatArray], compute: FloatArray, output: FloatArray
) -> FloatArray:
    """The least over every S ≥ 1 of a lower bound of :func:`_schedule`'s pass time, per entry:
    ``table`` as :func:`_schedule` takes it, ``compute`` the S = 1 GeMM's FLOPs at the chip's
    rate ``c = 2·m·n·k / (P·F)``, ``output`` whether the pass is OS (all broadcast together;
    :func:`meshslice_floors` gives one pass per entry, the family floors one (pass, mesh),
    :mod:`meshtune.cost.meshslice_family`, with the same operations: equal to the bit).

    Why it bounds: with the GeMM of an iteration at ``c / S`` (no chip computes faster than
    F: a profile's efficiency is at most 1 and its overhead at least 0), :func:`_schedule`
    grows with the sizes, so a padded layer's time is at least its exact layer's at the same
    S; at S = 1 … :data:`FLOOR_SLICES` the bound is that time. Above, with ``τᵢ = fᵢ + mᵢ / S``
    a collective's issue (fixed and moving seconds), every one of the S iterations (the ends
    and the S − 1 stages) waits for each collective, so a pass takes at least ``S·fᵢ + mᵢ >
    (FLOOR_SLICES + 1)·fᵢ + mᵢ``; and its S GeMMs take ``c`` beside the ends, at least
    ``max(f₁, f₂)`` (OS) or ``f₁ + f₂`` (LS, RS)."""
    import numpy as np

    shape = (FLOOR_SLICES,) + (1,) * compute.ndim
    slices = np.arange(1, FLOOR_SLICES + 1, dtype=np.float64).reshape(shape)
    least = _schedule(table, compute / slices, slices, output).min(axis=0)
    fixed1, moving1, _, _, fixed2, moving2, _, _ = table
    after = FLOOR_SLICES + 1.0
    ends = np.where(output, np.maximum(fixed1, fixed2), fixed1 + fixed2)
    beyond = np.maximum(after * fixed1 + moving1, after * fixed2 + moving2)
    floors: FloatArray = np.minimum(least, np.maximum(beyond, compute + ends))
    return floors
