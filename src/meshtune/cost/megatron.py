"""Megatron-LM tensor parallelism on a ring of P chips (Shoeybi et al. 2019, §3, Figure 3;
Korthikanti et al. 2022, §4.2.2, Figure 5).

Megatron pairs its FC layers: a *column-parallel* layer splits W by output columns (chip p holds
W[:, p-th block of out]) and a *row-parallel* layer that consumes its output splits W by input
rows (W[p-th block of in, :]). The layer a pair starts with takes the residual stream's input
(QKV, MLP-up: ``fed_by`` is ``None``); the one fed by another FC layer through attention or the
activation is row-parallel (attention-out, MLP-down). The knob ``parallel`` records the role
(1: column, 2: row: a layer's place in its pair); :func:`megatron_configs` derives it from
``fed_by``, never from a name. The knob ``seq_shards`` is the number of token shards the
activations between pairs are split into: P with sequence parallelism (SP), 1 (replicated)
without.

Phase 1 is forced to Table 1's Y-stationary row, untransposed: forward ``Y = X·W`` (OS),
backward data ``X' = Y'·Wᵀ`` (LS), backward weight ``W' = Xᵀ·Y'`` (RS). With T tokens, ``i`` =
in, ``o`` = out, ``e`` bytes per element and every collective on the axis-0 ring (a ring of all
chips, priced at the slower axis's link by :func:`meshtune.hardware.tiers.ring_profile`):

* column-parallel forward, local GeMM (T, o/P, i): SP all-gathers X before it;
* column-parallel backward data, (T, i, o/P): all-reduce of X' after it (SP: reduce-scatter);
* column-parallel backward weight, (i, o/P, T): SP all-gathers X again before it;
* row-parallel forward, (T, o, i/P): all-reduce of Y after it (SP: reduce-scatter);
* row-parallel backward data, (T, i/P, o): SP all-gathers Y' before it;
* row-parallel backward weight, (i/P, o, T): nothing.

Every collective moves one shard of ``T·i·e / P`` bytes per chip and step (column-parallel: X
or X') or ``T·o·e / P`` (row-parallel: Y or Y').

Without SP the conjugate operators f / g are identity / all-reduce: the activations between
pairs are replicated, so a row-parallel forward ends in an all-reduce of Y and a column-parallel
backward-data pass in an all-reduce of X' (Shoeybi §3). With SP, g / ḡ become all-gather /
reduce-scatter over the sequence (Korthikanti Figure 5): the column-parallel input X is
all-gathered from its token shards, the row-parallel output reduce-scattered to them, and the
backward mirrors both. The column-parallel weight gradient needs the gathered X again; Megatron
gathers it a second time rather than keep it, and so does this model. The row-parallel weight
gradient reuses the Y' its backward-data pass gathered. Megatron users run SP whenever TP > 1
(Megatron turns it off at TP = 1), so the search offers ``seq_shards = P`` only; ``seq_shards =
1`` (no SP) is priced and executed as well, through the library
(:func:`meshtune.algorithms.registry.megatron_without_sp`, which validation uses for runs without
SP).

An all-reduce is a reduce-scatter then an all-gather of the same shard (MeshSlice §3.2.2), each
priced ``t_launch + (P − 1)·(t_sync + shard / bw)`` with the profile's parameters
(:func:`meshtune.cost.schedule.ring_collective`). Every collective of a pass either feeds its
single GeMM or drains it, so none overlaps that GeMM whatever the profile's ``overlapped`` list
says: a pass takes ``before + GeMM + after`` (Megatron's TP collectives are on the critical path;
its asynchronous backward, which runs the all-reduce of X' beside the weight-gradient GeMM,
overlaps two passes, which meshtune prices one at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from meshtune.cost.compute import gemm_time
from meshtune.cost.config import Candidates, Config
from meshtune.cost.schedule import (
    AXES,
    Comm,
    PassCost,
    columns,
    comm_time,
    parallel_time,
    ring_collective,
)
from meshtune.cost.vector import gemm_flop_times, issue_times
from meshtune.dataflow import Dataflow, Dim, GemmOp, LayerDataflow, Pass, Stationary
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray

AG = CollectiveKind.ALL_GATHER
RDS = CollectiveKind.REDUCE_SCATTER
COLUMN, ROW = 1, 2  # values of the knob ``parallel``

# The Y-stationary row of Table 1: the dataflow of each pass.
_Y_ROW = {
    Pass.FORWARD: Dataflow.OS,
    Pass.BACKWARD_DATA: Dataflow.LS,
    Pass.BACKWARD_WEIGHT: Dataflow.RS,
}


def row_parallel(config: Config) -> bool:
    """Whether the layer is row-parallel (W split over in) rather than column-parallel."""
    role: int = config["parallel"]
    if role not in (COLUMN, ROW):
        raise ValueError(f"parallel must be {COLUMN} (column) or {ROW} (row), got {role}")
    return role == ROW


def sequence_parallel(config: Config, ring: int) -> bool:
    """Whether activations are token-sharded (``seq_shards`` = P) rather than replicated (1)."""
    shards: int = config["seq_shards"]
    if shards not in (1, ring):
        raise ValueError(f"seq_shards must be 1 or the ring size {ring}, got {shards}")
    return shards > 1


def megatron_token_shards(mesh: Mesh, config: Config) -> int:
    """The chips the residual stream is split over: ``seq_shards`` (P with sequence
    parallelism, 1 without: Korthikanti et al. 2022 §4.2.2)."""
    shards: int = config["seq_shards"]
    return shards


def split_dim(config: Config) -> Dim:
    """The dimension W is split over on the ring: ``out`` (column-parallel), ``in`` (row)."""
    return "in" if row_parallel(config) else "out"


def megatron_configs(
    layer: LayerDataflow, mesh: Mesh, block: int, *, sequence_parallel: bool = True
) -> Candidates:
    """The one configuration of ``layer``: its role from ``fed_by``, ``seq_shards`` = P (or 1
    with ``sequence_parallel=False``, the all-reduce variant published runs before 2022 used).

    Needs Table 1's Y-stationary row untransposed, and the tokens and the split dimension to
    divide over the ring (the all-gathers and reduce-scatters split X, Y and their gradients over
    tokens).
    """
    fc = layer.layer
    if layer.stationary is not Stationary.Y or layer.transposed:
        return (), f"layer {fc.name}: megatron runs Table 1's Y-stationary row untransposed"
    shards = mesh.rows if sequence_parallel else 1
    config = Config.of(parallel=ROW if fc.fed_by else COLUMN, seq_shards=shards)
    sizes: dict[Dim, int] = {"tokens": fc.tokens, "in": fc.in_features, "out": fc.out_features}
    split = split_dim(config)
    for dim in ("tokens", split) if sequence_parallel else (split,):
        if sizes[dim] % mesh.rows:
            return (), (
                f"layer {fc.name}: dimension {dim}={sizes[dim]} does not divide over the ring "
                f"of {mesh.rows} chips"
            )
    return (config,), None


def megatron_units(layer: LayerDataflow, mesh: Mesh, config: Config, block: int) -> dict[Dim, int]:
    """The ring size P on tokens and on the split dimension, 1 on the other."""
    units: dict[Dim, int] = {"tokens": mesh.rows, "in": 1, "out": 1}
    units[split_dim(config)] = mesh.rows
    return units


def describe(config: Config) -> str:
    """``column-parallel, SP over 8`` style text for reports."""
    role = "row-parallel" if row_parallel(config) else "column-parallel"
    shards = config["seq_shards"]
    return f"{role}, SP over {shards}" if shards > 1 else f"{role}, no SP"


def check_op(op: GemmOp) -> None:
    """``ValueError`` unless ``op`` is a pass of Table 1's Y-stationary row, untransposed."""
    if op.transposed or _Y_ROW[op.pass_] is not op.dataflow:
        raise ValueError(f"megatron runs Table 1's Y-stationary row untransposed, got {op}")


def phases(
    op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int
) -> tuple[list[Comm], list[Comm]]:
    """(collectives before the GeMM, collectives after it) of one pass (the module's list)."""
    check_op(op)
    p, row = mesh.rows, row_parallel(config)
    sp = sequence_parallel(config, p)
    e = bytes_per_element
    # T·(the feature dimension W is not split over)·e / P: X (T × in) for column-parallel
    # layers, Y (T × out) for row-parallel ones; in each pass's (m, n, k) that is:
    if op.pass_ is Pass.FORWARD:
        shard = op.m * (op.n if row else op.k) * e / p
    elif op.pass_ is Pass.BACKWARD_DATA:
        shard = op.m * (op.k if row else op.n) * e / p
    else:
        shard = op.k * op.m * e / p
    gather = ring_collective(AG, 0, p, shard)
    scatter = ring_collective(RDS, 0, p, shard)
    reduce = scatter if sp else scatter + gather  # ḡ with SP, else the all-reduce g
    if op.pass_ is Pass.FORWARD:
        return ([], reduce) if row else (gather if sp else [], [])
    if op.pass_ is Pass.BACKWARD_DATA:
        return (gather if sp else [], []) if row else ([], reduce)
    return ([], []) if row else (gather if sp else [], [])


def local_gemm(op: GemmOp, mesh: Mesh, config: Config) -> tuple[float, float, float]:
    """(m, n, k) of a chip's GeMM: the split dimension (out or in) divided by P."""
    check_op(op)
    p, m, n, k = mesh.rows, op.m, op.n, op.k
    if row_parallel(config):  # in is k, n and m of the three passes
        return {
            Pass.FORWARD: (m, n, k / p),
            Pass.BACKWARD_DATA: (m, n / p, k),
            Pass.BACKWARD_WEIGHT: (m / p, n, k),
        }[op.pass_]
    return {  # out is n, k and n
        Pass.FORWARD: (m, n / p, k),
        Pass.BACKWARD_DATA: (m, n, k / p),
        Pass.BACKWARD_WEIGHT: (m, n / p, k),
    }[op.pass_]


def megatron_comms(op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int) -> list[Comm]:
    """Every collective of the pass, in the order it runs."""
    before, after = phases(op, mesh, config, bytes_per_element)
    return before + after


def megatron_cost(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
    """``before + GeMM + after`` in one iteration (see the module docstring)."""
    before, after = phases(op, mesh, config, profile.bytes_per_element)
    g = gemm_time(profile, *local_gemm(op, mesh, config))
    head, tail = parallel_time(before, profile), parallel_time(after, profile)
    return PassCost(
        iterations=1,
        prologue_s=head,
        steady_s=0.0,  # one iteration: no steady state
        epilogue_s=g + tail,
        compute_s=g,
        comm=comm_time(before + after, profile),
        comm_wall_s=head + tail,
    )


def megatron_times(
    ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile, configs: Sequence[Config]
) -> FloatArray:
    """:func:`megatron_cost` ``.total_s`` of every configuration (rows) and op (columns) as
    arrays (:data:`meshtune.cost.config.TimesBuilder`): ``parallel(before) + GeMM +
    parallel(after)``, the lists of :func:`phases` priced as columns
    (:mod:`meshtune.cost.vector`)."""
    import numpy as np

    e = profile.bytes_per_element
    lists = [part for c in configs for op in ops for part in phases(op, mesh, c, e)]
    cols = columns(lists)
    spent = cols.issues * issue_times(cols, profile)
    per_axis = np.bincount(cols.row * AXES + cols.axis, weights=spent, minlength=len(lists) * AXES)
    walls = per_axis.reshape(len(configs), len(ops), 2, AXES).max(axis=3)
    dims = np.array([local_gemm(op, mesh, c) for c in configs for op in ops], dtype=np.float64)
    flops = (2.0 * dims[:, 0] * dims[:, 1] * dims[:, 2]).reshape(len(configs), len(ops))
    times: FloatArray = walls[..., 0] + (gemm_flop_times(profile, flops) + walls[..., 1])
    return times
