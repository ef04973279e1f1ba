"""Wang's 2D GeMM and the 1D baselines built on it (MeshSlice §2.3.4, §4.2, §4.3; Wang et al. [34]).

Wang splits the collective of one mesh direction into send-recv ring shifts overlapped with
partial GeMMs and leaves the other direction a plain all-gather / reduce-scatter that is not
overlapped (§2.3.4, Figure 4). The knob ``split`` names the mesh dimension whose collective is
split, counted from 1 like P_r × P_c: 1 is the P_r ring (physical axis 0, inter-row traffic), 2
the P_c ring (axis 1); it has ``p`` chips. The plain collective
is MeshSlice's S = 1 collective of the other direction (:func:`meshtune.cost.meshslice._moves`).

A split *all-gather* of a shard of ``b`` bytes becomes p − 1 shifts of ``b``: at step
t = 0 … p − 1 every chip multiplies the chunk it holds (its own at t = 0) and passes it on.
A split *reduce-scatter* becomes p − 1 shifts of the output shard: at step t every chip computes
the partial output block (q − t − 1) mod p, adds the running sum it received and passes it on;
after p steps chip q holds block q. Either way one step's GeMM is the local GeMM of the
Collective with the sliced extent (k for OS, n for LS, m for RS) divided by p.

Loop unrolling (§4.2): the p steps are grouped into ``S`` iterations of u = p / S steps (S a
divisor of p, the knob ``slices``); an iteration issues u shifts and one GeMM of the u merged
steps, ``g = gemm_time(local GeMM with the sliced extent / S)``. With ``sr`` one shift's time
and ``pre`` / ``post`` the plain collective when it is an all-gather / a reduce-scatter:

* split all-gather: prologue = ``stage(0, pre ∥ (u − 1)·sr)`` (in parallel, or in turn where
  they cannot overlap compute), steady = ``stage(g, u·sr)``, epilogue = ``g + post``;
* split reduce-scatter: prologue = ``pre + g``, steady = ``stage(g, u·sr)``,
  epilogue = ``(u − 1)·sr``;

and the pass takes ``prologue + (S − 1)·steady + epilogue`` (:mod:`meshtune.cost.schedule`).
A shift is a send-recv (the profile's ``send_recv`` link parameters), which the real 4×4 TPUv4
could overlap with compute (§5.3). On a ring of more than two chips it runs both ways
(:func:`meshtune.cost.schedule.shift_both_ways`): every chunk is cut in two along the sliced
extent, one part travels round the ring each way, so a step moves half a chunk per link
direction, as the artifact's 1D rings do (``LogicalRing_ISplit``: ``bytes / (2 · bw)``).
The flop-only compute model does not reward merged GeMMs, so
unrolling only lengthens the prologue/epilogue here; the knob is kept because the paper runs
Wang at MeshSlice's S and a profile with a GeMM-size-aware compute model can value it.

1D TP (sequence-parallel style) and FSDP (§4.3) are this algorithm on a ring of all chips: a
P × 1 mesh whose axis-1 ring has one chip (two links of a chip's four), with phase 1 forced to
W-stationary (1D TP) or Y-stationary (FSDP); see :mod:`meshtune.algorithms.registry`. That ring
snakes through both axes of the torus, so :meth:`meshtune.algorithms.base.Algorithm.cost` prices
its hops at the slower axis's link (:func:`meshtune.hardware.tiers.ring_profile`), as the artifact's
``LogicalRing_*Split`` do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from meshtune.cost.collectives import steps_seconds
from meshtune.cost.compute import gemm_time
from meshtune.cost.config import Candidates, Config
from meshtune.cost.meshslice import (
    _iteration_flops,
    _move_specs,
    _moves,
    local_gemm,
    sharding_problem,
    sharding_units,
)
from meshtune.cost.schedule import (
    AXES,
    Comm,
    CommColumns,
    PassCost,
    columns,
    comm_time,
    larger_part,
    parallel_time,
    repeated,
    shift_both_ways,
    stage,
)
from meshtune.cost.vector import gemm_flop_times, single_table, stage_times
from meshtune.dataflow import Dim, GemmOp, LayerDataflow
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh, check_chips, divisors
from meshtune.hardware.profile import HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray


def split_axes(mesh: Mesh) -> tuple[int, ...]:
    """Physical axes with a collective worth splitting (more than one chip); (0,) if none."""
    axes = tuple(a for a in (0, 1) if mesh.ring(a) > 1)
    return axes or (0,)


def split_axis(config: Config) -> int:
    """The physical axis of knob ``split`` (1 → axis 0, 2 → axis 1)."""
    split: int = config["split"]
    if split not in (1, 2):
        raise ValueError(f"split must be 1 (the P_r ring) or 2 (the P_c ring), got {split}")
    return split - 1


def wang_configs(layer: LayerDataflow, mesh: Mesh, block: int) -> Candidates:
    """``split`` ∈ the dimensions with more than one chip × ``slices`` ∈ divisors(ring)."""
    problem = sharding_problem(layer, mesh)
    if problem is not None:
        return (), problem
    return (
        tuple(
            sorted(
                Config.of(split=a + 1, slices=s)
                for a in split_axes(mesh)
                for s in divisors(mesh.ring(a))
            )
        ),
        None,
    )


def wang_units(layer: LayerDataflow, mesh: Mesh, config: Config, block: int) -> dict[Dim, int]:
    """Sharding units: a step's chunk is a whole shard, so nothing else must divide."""
    return sharding_units(layer, mesh)


def _parts(
    op: GemmOp, mesh: Mesh, config: Config, e: int
) -> tuple[list[Comm], list[Comm], int, CollectiveKind]:
    """(plain collective, one shift of the split direction, ring size p of the split axis, the
    kind of the collective that was split)."""
    split, slices = split_axis(config), config["slices"]
    p = mesh.ring(split)
    if slices < 1 or p % slices:
        raise ValueError(f"invalid Wang configuration {config.label} on {mesh.label}")
    first, second = _moves(op, mesh, 1, e)
    moves = first + second
    plain = [c for c in moves if c.axis != split]
    split_comm = [c for c in moves if c.axis == split]
    if not split_comm:  # a ring of one chip: nothing to split
        return plain, [], p, CollectiveKind.ALL_GATHER
    one = shift_both_ways(split, p, split_comm[0].step_bytes, op.sliced_extent / p)
    return plain, one, p, split_comm[0].kind


def wang_comms(op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int) -> list[Comm]:
    """The plain collective and the p − 1 shifts of the split direction."""
    plain, one, p, _ = _parts(op, mesh, config, bytes_per_element)
    return plain + repeated(one, p - 1)


def wang_columns(
    ops: Sequence[GemmOp], mesh: Mesh, configs: Sequence[Config], bytes_per_element: int
) -> list[CommColumns]:
    """:func:`wang_comms` of every configuration and pass as columns
    (:data:`meshtune.cost.config.ColumnsBuilder`). A pass's list does not depend on ``slices``
    (unrolling regroups the same p − 1 shifts), so each split's lists are built once, one
    block per split."""
    rows: dict[int, list[int]] = {}
    for index, config in enumerate(configs):
        rows.setdefault(config["split"], []).append(index)
    return [
        columns(
            [wang_comms(op, mesh, configs[at[0]], bytes_per_element) for op in ops]
        ).for_configs(at, len(ops))
        for at in rows.values()
    ]


def wang_cost(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
    """Cost of ``op`` with Wang's method (see the module docstring for the formulas)."""
    plain, one, p, kind = _parts(op, mesh, config, profile.bytes_per_element)
    s = config["slices"]
    u = p // s
    g = gemm_time(profile, *local_gemm(op, mesh, s))
    pre = [c for c in plain if c.kind is CollectiveKind.ALL_GATHER]
    post = [c for c in plain if c.kind is CollectiveKind.REDUCE_SCATTER]
    # The shifts all run on the split axis and the plain collective on the other, so u shifts
    # take u·sr and the axes overlap: the formulas stay O(1) however long the ring is.
    sr = parallel_time(one, profile)
    steady_comm = u * sr
    if kind is CollectiveKind.ALL_GATHER:
        head = max(parallel_time(pre, profile), (u - 1) * sr)
        tail = parallel_time(post, profile)
        prologue, epilogue = stage(0.0, pre + repeated(one, u - 1), profile), g + tail
    else:
        head = parallel_time(pre, profile)
        tail = (u - 1) * sr
        prologue, epilogue = head + g, tail
    return PassCost(
        iterations=s,
        prologue_s=prologue,
        steady_s=stage(g, one, profile, times=u),
        epilogue_s=epilogue,
        compute_s=s * g,
        comm=comm_time(plain, profile) + comm_time(one, profile).scaled(p - 1),
        comm_wall_s=head + (s - 1) * steady_comm + tail,
    )


def wang_times(
    ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile, configs: Sequence[Config]
) -> FloatArray:
    """:func:`wang_cost` ``.total_s`` of every configuration (rows) and op (columns) as arrays
    (:data:`meshtune.cost.config.TimesBuilder`). The communications of a split do not depend on
    ``slices`` (:func:`wang_columns`): the plain collective and one shift of each (split, op)
    (:func:`_parts`, at most one communication each) are priced once
    (:func:`meshtune.cost.vector.single_table`), then the module docstring's formulas run over
    every ``S`` with ``u = p / S``, ``sr`` one shift, ``pre`` / ``post`` the plain collective
    when it is an all-gather / a reduce-scatter:

    * split all-gather: ``stage(0, pre ∥ (u − 1)·sr) + (S − 1)·stage(g, u·sr) + g + post``;
    * split reduce-scatter: ``pre + g + (S − 1)·stage(g, u·sr) + (u − 1)·sr``.
    """
    import numpy as np

    e = profile.bytes_per_element
    splits = sorted({config["split"] for config in configs})
    parts = [
        _parts(op, mesh, Config.of(split=split, slices=1), e) for split in splits for op in ops
    ]
    # (column, split, op, plain / shift): fixed and moving seconds, hidden, blocking.
    table = single_table([listed for plain, one, _, _ in parts for listed in (plain, one)], profile)
    fixed, moving, hidden, blocking = table.T.reshape(4, len(splits), len(ops), 2)
    once = fixed + moving
    facts = np.array(
        [
            (
                bool(plain) and plain[0].kind is CollectiveKind.ALL_GATHER,
                kind is CollectiveKind.REDUCE_SCATTER,
                ring,
            )
            for plain, _, ring, kind in parts
        ],
        dtype=np.float64,
    ).T.reshape(3, len(splits), len(ops))
    # Every array below: (configs, ops), the configuration's split picked.
    at = [splits.index(config["split"]) for config in configs]
    plain, sr = once[at, :, 0], once[at, :, 1]
    gathers, scatters, ring = facts[:, at]
    slices = np.array([config["slices"] for config in configs], dtype=np.float64)[:, None]
    if (slices < 1).any() or (ring % slices).any():
        raise ValueError(f"invalid Wang configuration among {len(configs)} on {mesh.label}")
    pre, post = plain * gathers, plain * (1.0 - gathers)
    (pre_hidden, sr_hidden), (pre_blocking, sr_blocking) = (
        np.moveaxis(x[at], 2, 0) for x in (hidden, blocking)
    )
    u = ring // slices
    whole = np.array([_iteration_flops(op, mesh)[0] for op in ops], dtype=np.float64)
    g = gemm_flop_times(profile, whole / slices)
    shifts, head = u * sr, (u - 1) * sr
    steady = stage_times(shifts * sr_hidden, shifts * sr_blocking, g, profile.overlap_slowdown)
    overlapping = np.maximum(pre * pre_hidden, head * sr_hidden)
    prologue = np.maximum(overlapping, pre * pre_blocking + head * sr_blocking)
    gathered = prologue + (slices - 1) * steady + (g + post)
    scattered = (pre + g) + (slices - 1) * steady + head
    times: FloatArray = np.where(scatters == 1.0, scattered, gathered)
    return times


def wang_floors(ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile) -> list[float]:
    """A lower bound of :func:`wang_cost` ``.total_s`` of each op under every configuration
    (:data:`meshtune.cost.config.FloorBuilder`): the least over the split axes of ``max(plain,
    (p − 1)·sr)``, and at least ``2·m·n·k / (P·F)``.

    Why (the module docstring's formulas): whatever S, a pass waits for its plain collective
    once (in the prologue or the epilogue) and for its p − 1 shifts (``(u − 1)·sr`` at one end,
    ``u·sr`` in each of the S − 1 steady stages), and runs S GeMMs of 1 / S of the FLOPs,
    none faster than F. Every time grows with the sizes, so a padded layer's time is at least
    its exact layer's floor.

    ``plain`` and ``sr`` are :func:`_parts`' lists at S = 1 through
    :func:`~meshtune.cost.schedule.parallel_time`, priced here from their (kind, axis, steps,
    bytes) without building the lists (:func:`_seconds`, the same floats: the search asks this
    of every mesh of a family)."""
    rate = profile.effective_flops_per_s * mesh.rows * mesh.cols
    e = profile.bytes_per_element
    axes = split_axes(mesh)
    floors = []
    for op in ops:
        # _parts' collectives: the two of MeshSlice's S = 1 iteration, those of a ring > 1
        moves = [move for move in _move_specs(op, mesh, 1, e) if move[2] > 1]
        least = math.inf
        for axis in axes:
            per_axis = [0.0] * AXES  # the plain collective's, as parallel_time sums them
            split: float | None = None  # the first collective on the split axis: its bytes
            for kind, on, ring, shard_bytes in moves:
                if on != axis:
                    per_axis[on] += _seconds(profile, kind, on, ring - 1, shard_bytes)
                elif split is None:
                    split = shard_bytes
            p = mesh.ring(axis)
            sr = 0.0 if split is None else _shift_seconds(profile, axis, p, split, op)
            least = min(least, max(max(per_axis), (p - 1) * sr))
        floors.append(max(least, 2.0 * op.m * op.n * op.k / rate))
    return floors


def _seconds(
    profile: HardwareProfile,
    kind: CollectiveKind,
    axis: int,
    steps: int,
    step_bytes: float,
    both_ways: bool = False,
) -> float:
    """``Comm(kind, axis, ., steps, step_bytes, ., both_ways=both_ways).time(profile)
    .total_s``, the same floats (:func:`~meshtune.cost.collectives.steps_seconds` of the bytes
    the busiest direction carries, :meth:`~meshtune.cost.schedule.Comm.wire_bytes`)."""
    wire = step_bytes * (2 if both_ways and not profile.full_duplex else 1)
    return steps_seconds(profile.link(kind, axis), steps, wire)


def _shift_seconds(
    profile: HardwareProfile, axis: int, p: int, shard_bytes: float, op: GemmOp
) -> float:
    """The time of :func:`~meshtune.cost.schedule.shift_both_ways` of ``shard_bytes`` on the
    ``p``-chip ring of ``axis`` (``p`` > 1), the shift of :func:`_parts`."""
    if p <= 2:
        return _seconds(profile, CollectiveKind.SEND_RECV, axis, 1, shard_bytes)
    part = larger_part(op.sliced_extent / p)
    return _seconds(profile, CollectiveKind.SEND_RECV, axis, 1, shard_bytes * part, True)


def ring_meshes(chips: int) -> tuple[Mesh, ...]:
    """The one mesh of a 1D algorithm (§4.3): every chip on the axis-0 ring, ``chips × 1``."""
    check_chips(chips)
    return (Mesh(chips, 1),)


def ring_problem(mesh: Mesh) -> str | None:
    """A 1D algorithm runs on one ring of all chips (P × 1), nothing else (§4.3)."""
    if mesh.cols != 1 or mesh.depth != 1:
        return f"a 1D algorithm runs on one ring of all chips ({mesh.chips}x1), got {mesh.label}"
    return None
