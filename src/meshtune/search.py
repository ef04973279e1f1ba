"""Phase 2 of the MeshSlice autotuner: mesh shape × slice count (§3.2.2).

Exhaustive over every factor pair P_r × P_c of the chip count (or the shapes the user lists)
and, for each FC layer independently, over every valid slice count S. A shape is legal for a
layer when every stored tensor divides evenly over the mesh (its row dimension by P_r, its
column dimension by P_c) and the sliced dimension d splits into whole blocks on both rings:
``d % (B · lcm(P_r, P_c)) == 0``; the valid S are then the divisors of ``d / (B · lcm)``
(Algorithm 2 slices a local extent of d/P into S·B-wide groups). A layer's time is
forward + backward-data + backward-weight; a shape's time is the sum over the block's layers
times the number of blocks. Ties break towards fewer slices and then fewer mesh rows, so results
are deterministic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from meshtune.cost.meshslice import MeshAxes, PassCost, meshslice_pass
from meshtune.dataflow import BlockDataflow, DataflowMode, LayerDataflow, plan_dataflows
from meshtune.errors import InfeasibleError
from meshtune.layers import FcLayer
from meshtune.specs import HardwareProfile


def divisors(n: int) -> tuple[int, ...]:
    """Positive divisors of ``n`` in ascending order."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def mesh_shapes(chips: int) -> tuple[MeshAxes, ...]:
    """Every P_r × P_c = ``chips``, fewest rows first (1 × N and N × 1 included)."""
    if chips < 1:
        raise InfeasibleError(f"chips must be a positive integer, got {chips}")
    return tuple(MeshAxes(r, chips // r) for r in divisors(chips))


def parse_shape(text: str) -> MeshAxes:
    """Parse ``"32x8"`` (or ``"32×8"``, as the report prints it) as P_r = 32, P_c = 8."""
    match = re.fullmatch(r"\s*([0-9]+)\s*[xX×]\s*([0-9]+)\s*", text)
    if match is None or int(match[1]) < 1 or int(match[2]) < 1:
        raise InfeasibleError(f"mesh shape '{text}' is not of the form ROWSxCOLS, e.g. 32x8")
    return MeshAxes(int(match[1]), int(match[2]))


def _dim_sizes(layer: FcLayer) -> dict[str, int]:
    return {"tokens": layer.tokens, "in": layer.in_features, "out": layer.out_features}


def slice_counts(
    choice: LayerDataflow, mesh: MeshAxes, block: int
) -> tuple[tuple[int, ...], str | None]:
    """Valid slice counts of a layer on ``mesh``, or ``((), reason)`` when none is."""
    sizes = _dim_sizes(choice.layer)
    name = choice.layer.name
    for tensor, (row_dim, col_dim) in choice.sharding.items():
        for dim, ways, axis in ((row_dim, mesh.rows, "P_r"), (col_dim, mesh.cols, "P_c")):
            if sizes[dim] % ways:
                return (), (
                    f"layer {name}: {tensor} dimension {dim}={sizes[dim]} does not divide over "
                    f"{axis}={ways}"
                )
    extent = sizes[choice.sliced_dim]
    unit = block * math.lcm(mesh.rows, mesh.cols)
    if extent % unit:
        return (), (
            f"layer {name}: sliced dimension {choice.sliced_dim}={extent} is not a multiple of "
            f"block {block} × lcm({mesh.rows}, {mesh.cols}) = {unit}"
        )
    return divisors(extent // unit), None


def flop_utilization(flops: float, seconds: float, chips: int, peak_flops_per_s: float) -> float:
    """FLOPs / (seconds · chips · peak FLOP/s): FLOP utilization as defined in §5.1.1."""
    return flops / (seconds * chips * peak_flops_per_s)


@dataclass(frozen=True)
class LayerChoice:
    """Phase-2 decision for one FC layer on one mesh."""

    dataflow: LayerDataflow
    slices: int
    slice_candidates: tuple[int, ...]
    passes: tuple[PassCost, PassCost, PassCost]

    @property
    def time_s(self) -> float:
        """forward + backward-data + backward-weight."""
        return sum(p.total_s for p in self.passes)


@dataclass(frozen=True)
class MeshResult:
    """One mesh shape: its per-layer choices and time, or why it is infeasible."""

    mesh: MeshAxes
    layers: tuple[LayerChoice, ...]
    infeasible: str | None
    blocks: int

    @property
    def feasible(self) -> bool:
        """Whether every layer has a valid slice count on this mesh."""
        return self.infeasible is None

    @property
    def time_s(self) -> float:
        """FC time of one training step: blocks × Σ layers (inf when infeasible)."""
        if not self.feasible:
            return math.inf
        return self.blocks * sum(c.time_s for c in self.layers)

    @property
    def flops(self) -> int:
        """FC FLOPs of one training step, all chips: blocks × Σ 3 · 2·tokens·in·out."""
        return self.blocks * sum(3 * c.dataflow.layer.flops_per_pass for c in self.layers)

    def utilization(self, profile: HardwareProfile) -> float:
        """FLOPs / (time · chips · peak FLOP/s), as in §5.1.1 (0 when infeasible)."""
        if not self.feasible:
            return 0.0
        return flop_utilization(self.flops, self.time_s, self.mesh.chips, profile.peak_flops_per_s)


def best_layer_choice(
    choice: LayerDataflow, mesh: MeshAxes, profile: HardwareProfile, candidates: Sequence[int]
) -> LayerChoice:
    """The fastest slice count among ``candidates`` (ties: fewer slices)."""
    best: LayerChoice | None = None
    for s in candidates:
        passes = tuple(meshslice_pass(op, mesh, profile, s) for op in choice.ops)
        current = LayerChoice(choice, s, tuple(candidates), (passes[0], passes[1], passes[2]))
        if best is None or (current.time_s, s) < (best.time_s, best.slices):
            best = current
    if best is None:
        raise InfeasibleError(f"layer {choice.layer.name}: no slice count to choose from")
    return best


def evaluate_mesh(
    block: BlockDataflow, mesh: MeshAxes, profile: HardwareProfile, blocks: int
) -> MeshResult:
    """Tune every layer's slice count on ``mesh``."""
    chosen = []
    for choice in block.layers:
        candidates, reason = slice_counts(choice, mesh, profile.slice_block)
        if reason is not None:
            return MeshResult(mesh, (), f"{mesh.rows}x{mesh.cols}: {reason}", blocks)
        chosen.append(best_layer_choice(choice, mesh, profile, candidates))
    return MeshResult(mesh, tuple(chosen), None, blocks)


@dataclass(frozen=True)
class SearchResult:
    """Every evaluated mesh, feasible ones ranked fastest first."""

    block: BlockDataflow
    ranked: tuple[MeshResult, ...]
    infeasible: tuple[MeshResult, ...]

    @property
    def best(self) -> MeshResult:
        """The fastest feasible mesh."""
        return self.ranked[0]


def search(
    layers: Sequence[FcLayer],
    profile: HardwareProfile,
    chips: int,
    *,
    blocks: int = 1,
    mode: DataflowMode = "auto",
    shapes: Sequence[MeshAxes] | None = None,
) -> SearchResult:
    """Phase 1 then phase 2 for one block's ``layers`` repeated ``blocks`` times.

    Raises :class:`InfeasibleError` when ``chips`` is not positive, a listed shape does not
    multiply to ``chips``, or no shape admits a valid slice count for every layer (the message
    names the first failing constraint of each shape).
    """
    all_shapes = mesh_shapes(chips)
    if shapes is not None and not shapes:
        raise InfeasibleError("no mesh shape to search: the shape list is empty")
    if shapes is not None:
        for shape in shapes:
            if shape.chips != chips:
                raise InfeasibleError(
                    f"mesh shape {shape.rows}x{shape.cols} has {shape.chips} chips, not {chips}"
                )
        all_shapes = tuple(dict.fromkeys(shapes))
    block = plan_dataflows(layers, mode)
    results = [evaluate_mesh(block, mesh, profile, blocks) for mesh in all_shapes]
    ranked = sorted((r for r in results if r.feasible), key=lambda r: (r.time_s, r.mesh.rows))
    infeasible = tuple(r for r in results if not r.feasible)
    if not ranked:
        reasons = "; ".join(r.infeasible or "" for r in infeasible)
        raise InfeasibleError(f"no feasible mesh shape for {chips} chips: {reasons}")
    return SearchResult(block, tuple(ranked), infeasible)
