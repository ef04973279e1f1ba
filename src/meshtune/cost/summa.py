"""SUMMA on a P_r × P_c mesh (MeshSlice §2.3.3, Figure 2a, Figure 3 left, §4.2; van de Geijn [30]).

SUMMA cuts the sliced extent d (k for OS, n for LS, m for RS) into L = lcm(P_r, P_c) blocks,
so that every chip owns L / P_c blocks of its row-ring operand and L / P_r of its column-ring
one, and loops over the L blocks (Figure 2a, with r × c the logical mesh of the GeMM):

* OS: ``A' = bcast_col(A block p)`` (m/r × d/L), ``B' = bcast_row(B block p)`` (d/L × n/c),
  ``C_ij += A'·B'``;
* LS: ``B' = bcast_row(B block p)`` (d/L × k/c), ``C' = A_ij·B'ᵀ``, ``reduce_col(C')`` to the
  owner of C block p (m/r × d/L);
* RS: ``A' = bcast_col(A block p)`` (k/r × d/L), ``C' = A'ᵀ·B_ij``, ``reduce_row(C')`` to the
  owner of C block p (d/L × n/c).

A ring broadcast of a block of ``b`` bytes is pipelined in D packets (the knob ``packets``): the
chip d hops after the root forwards packet q at stage q + d, so it takes ``P + D − 2``
synchronised stages of one packet each, and every link carries the whole block once:

    bcast = t_launch + (P + D − 2) · (t_sync + b / (D · bw))

The paper counts P + D − 1 stages (Figure 3); a broadcast from one root needs only the P − 1
hops after it, which is what the executor does and counts, so meshtune uses P + D − 2 (the
O(P²) synchronisation of §2.3.3 is unchanged). A reduce is the same pattern in reverse (the
chain starts one hop after the root). meshtune prices broadcasts with the axis's
``all_gather`` link parameters and reduces with its ``reduce_scatter`` ones: both move one
packet per link per synchronised step as those collectives do (an assumption; the paper's
artifact does the same). Larger D shortens the pipeline's bubbles ((P − 2)·b/(D·bw)) and adds
D · t_sync; the cost-minimising D is about √((P − 2)·b / (bw · t_sync)). The search chooses D
among powers of two up to :data:`MAX_PACKETS` that split every block into whole elements.

Loop unrolling (§4.2): the L iterations are grouped into S (the knob ``slices``, a divisor of
L) of u = L / S blocks each; an iteration issues its u broadcasts (and reduces) and one merged
GeMM ``g = gemm(local GeMM with d / S)``. As in MeshSlice: OS prologue = ``stage(0, u bcasts
per direction)`` (the directions in parallel, or in turn where they cannot overlap compute),
steady = ``stage(g, those)``, epilogue = g; LS/RS prologue = the u broadcasts, steady =
``stage(g, u bcasts ∥ u reduces)``, epilogue = ``g + u reduces``. In all, each direction does
L broadcasts or reduces of P + D − 2 synchronisations: the sync overhead grows as O(P²) on a
P × P mesh (L = P), against O(P) for Collective.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from meshtune.cost.compute import gemm_time
from meshtune.cost.config import Candidates, Config
from meshtune.cost.meshslice import layer_sizes, local_gemm, sharding_problem, sharding_units
from meshtune.cost.schedule import (
    Comm,
    CommColumns,
    PassCost,
    columns,
    comm_time,
    parallel_time,
    repeated,
    stage,
)
from meshtune.dataflow import Dataflow, Dim, GemmOp, LayerDataflow
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh, divisors
from meshtune.hardware.profile import HardwareProfile

MAX_PACKETS = 64
PACKET_COUNTS = tuple(2**i for i in range(MAX_PACKETS.bit_length()))  # 1, 2, 4, … 64


def common_multiple(mesh: Mesh) -> int:
    """L = lcm(P_r, P_c): SUMMA's iteration count before unrolling."""
    return math.lcm(mesh.rows, mesh.cols)


def summa_configs(layer: LayerDataflow, mesh: Mesh, block: int) -> Candidates:
    """``packets`` D (powers of two ≤ 64 with L·D dividing d) × ``slices`` S ∈ divisors(L)."""
    problem = sharding_problem(layer, mesh)
    if problem is not None:
        return (), problem
    big_l = common_multiple(mesh)
    extent = layer_sizes(layer)[layer.sliced_dim]
    if extent % big_l:
        return (), (
            f"layer {layer.layer.name}: sliced dimension {layer.sliced_dim}={extent} is not a "
            f"multiple of lcm({mesh.rows}, {mesh.cols}) = {big_l}"
        )
    packets = [d for d in PACKET_COUNTS if extent % (big_l * d) == 0]
    return (
        tuple(sorted(Config.of(packets=d, slices=s) for d in packets for s in divisors(big_l))),
        None,
    )


def summa_units(layer: LayerDataflow, mesh: Mesh, config: Config, block: int) -> dict[Dim, int]:
    """Sharding units, and L · D on the sliced dimension (whole packets of whole blocks)."""
    units = sharding_units(layer, mesh)
    sliced = layer.sliced_dim
    units[sliced] = math.lcm(units[sliced], common_multiple(mesh) * config["packets"])
    return units


def pipelined(
    kind: CollectiveKind, axis: int, ring: int, block_bytes: float, packets: int
) -> list[Comm]:
    """A ring broadcast or reduce of ``block_bytes`` in D packets: P + D − 2 stages."""
    if ring == 1:
        return []
    return [Comm(kind, axis, ring, ring + packets - 2, block_bytes / packets, block_bytes)]


def _block(op: GemmOp, mesh: Mesh, config: Config, e: int) -> tuple[list[Comm], list[Comm]]:
    """(first, second) operation of one of the L iterations: OS (bcast_col A, bcast_row B),
    LS (bcast_row B, reduce_col C), RS (bcast_col A, reduce_row C)."""
    d = config["packets"]
    if d < 1 or config["slices"] < 1:
        raise ValueError(f"invalid SUMMA configuration {config.label}")
    (r, row_axis), (c, col_axis) = mesh.logical(op.transposed)
    big_l = common_multiple(mesh)
    m, n, k = op.m, op.n, op.k
    ag, rds = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
    if op.dataflow is Dataflow.OS:
        return (
            pipelined(ag, col_axis, c, m / r * k / big_l * e, d),
            pipelined(ag, row_axis, r, k / big_l * n / c * e, d),
        )
    if op.dataflow is Dataflow.LS:
        return (
            pipelined(ag, row_axis, r, n / big_l * k / c * e, d),
            pipelined(rds, col_axis, c, m / r * n / big_l * e, d),
        )
    return (
        pipelined(ag, col_axis, c, k / r * m / big_l * e, d),
        pipelined(rds, row_axis, r, m / big_l * n / c * e, d),
    )


def summa_comms(op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int) -> list[Comm]:
    """Every broadcast and reduce of the pass: L iterations of :func:`_block`'s two."""
    first, second = _block(op, mesh, config, bytes_per_element)
    return repeated(first + second, common_multiple(mesh))


def summa_columns(
    ops: Sequence[GemmOp], mesh: Mesh, configs: Sequence[Config], bytes_per_element: int
) -> list[CommColumns]:
    """:func:`summa_comms` of every configuration and pass as columns
    (:data:`meshtune.cost.config.ColumnsBuilder`): each pass's two operations of one block in one
    packet (``P − 1`` steps of ``b`` bytes), at D packets ``P + D − 2`` steps of ``b / D``, for
    every D at once, each issued L times (slices do not change the traffic)."""
    import numpy as np

    unit = Config.of(packets=1, slices=1)
    once = columns([[*a, *b] for a, b in (_block(op, mesh, unit, bytes_per_element) for op in ops)])
    packets = np.array([[config["packets"]] for config in configs], dtype=np.float64)
    laid = once.for_configs(range(len(configs)), len(ops))
    return [
        laid._replace(
            issues=laid.issues * common_multiple(mesh),
            steps=once.steps + (packets - 1),
            step_bytes=once.step_bytes / packets,
        )
    ]


def summa_cost(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
    """Cost of ``op`` with SUMMA (see the module docstring for the formulas)."""
    s = config["slices"]
    big_l = common_multiple(mesh)
    if big_l % s:
        raise ValueError(f"slices {s} does not divide lcm({mesh.rows}, {mesh.cols}) = {big_l}")
    u = big_l // s
    first, second = _block(op, mesh, config, profile.bytes_per_element)
    g = gemm_time(profile, *local_gemm(op, mesh, s))
    both = first + second  # issued u times per iteration
    comm = comm_time(both, profile).scaled(big_l)
    if op.dataflow is Dataflow.OS:
        wall = parallel_time(both, profile, times=u)
        return PassCost(
            iterations=s,
            prologue_s=stage(0.0, both, profile, times=u),
            steady_s=stage(g, both, profile, times=u),
            epilogue_s=g,
            compute_s=s * g,
            comm=comm,
            comm_wall_s=s * wall,
        )
    head = parallel_time(first, profile, times=u)
    tail = parallel_time(second, profile, times=u)
    return PassCost(
        iterations=s,
        prologue_s=head,
        steady_s=stage(g, both, profile, times=u),
        epilogue_s=g + tail,
        compute_s=s * g,
        comm=comm,
        comm_wall_s=head + tail + (s - 1) * max(head, tail),
    )
