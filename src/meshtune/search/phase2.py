"""Phase 2 of the autotuner: algorithm × mesh shape × configuration (MeshSlice §3.2.2, §4.2).

For one registered algorithm (:mod:`meshtune.algorithms.registry`) the search is exhaustive over
the mesh shapes the algorithm enumerates for the chip count (every P_r × P_c for the 2D algorithms,
or the shapes the user lists) and, for each FC layer independently, over the algorithm's legal
configurations on that mesh (MeshSlice: every valid slice count S). A layer's time is forward +
backward-data + backward-weight; a shape's time is the sum over the block's layers times the
number of blocks. Ties break towards the smaller configuration values and then fewer mesh rows,
so results are deterministic. Each algorithm is judged at its own best mesh (§4.2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import DEFAULT_ALGORITHM, REGISTRY
from meshtune.cost.config import Config
from meshtune.cost.schedule import PassCost
from meshtune.dataflow import BlockDataflow, DataflowMode, GemmOp, LayerDataflow, plan_dataflows
from meshtune.errors import InfeasibleError, MeshtuneError, ProfileError
from meshtune.hardware.mesh import MAX_CHIPS, Mesh, check_chips
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.search.arrays import BOUND_SLACK, layer_bounds

# How far `nearest_feasible` looks on each side of an infeasible chip count.
NEAREST_SCAN = 512


def flop_utilization(flops: float, seconds: float, chips: int, peak_flops_per_s: float) -> float:
    """FLOPs / (seconds · chips · peak FLOP/s): FLOP utilization as defined in §5.1.1."""
    return flops / (seconds * chips * peak_flops_per_s)


@dataclass(frozen=True)
class LayerChoice:
    """Phase-2 decision for one FC layer on one mesh."""

    dataflow: LayerDataflow
    config: Config
    candidates: tuple[Config, ...]
    passes: tuple[PassCost, PassCost, PassCost]

    @cached_property
    def time_s(self) -> float:
        """forward + backward-data + backward-weight (computed once: the search compares it
        often)."""
        return sum(p.total_s for p in self.passes)


@dataclass(frozen=True)
class MeshResult:
    """One mesh shape for one algorithm: its per-layer choices and time, or why infeasible."""

    algorithm: Algorithm
    mesh: Mesh
    layers: tuple[LayerChoice, ...]
    infeasible: str | None
    blocks: int

    @property
    def feasible(self) -> bool:
        """Whether every layer has a legal configuration on this mesh."""
        return self.infeasible is None

    @cached_property
    def time_s(self) -> float:
        """FC time of one training step: blocks × Σ layers (inf when infeasible; computed
        once)."""
        if not self.feasible:
            return math.inf
        return self.blocks * sum(c.time_s for c in self.layers)

    @property
    def flops(self) -> int:
        """FC FLOPs of one training step, all chips: blocks × Σ 3 · 2·tokens·in·out."""
        return self.blocks * sum(3 * c.dataflow.layer.flops_per_pass for c in self.layers)

    def layer_configs(self) -> dict[str, dict[str, int]]:
        """Each layer's chosen configuration on this mesh, by layer name (a plan's and a
        comparison's record of it)."""
        return {c.dataflow.layer.name: dict(c.config) for c in self.layers}

    def utilization(self, profile: HardwareProfile) -> float:
        """FLOPs / (time · chips · peak FLOP/s), as in §5.1.1 (0 when infeasible)."""
        if not self.feasible:
            return 0.0
        return flop_utilization(self.flops, self.time_s, self.mesh.chips, profile.peak_flops_per_s)


def priced(
    algorithm: Algorithm, op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config
) -> PassCost:
    """``algorithm.cost(op, mesh, profile, config)``, checked to be finite.

    Every time a plan or a study records comes through here: a time that is inf or NaN (a
    profile value or a size no validation caught) raises :class:`MeshtuneError` naming the
    inputs, rather than reaching a plan as ``null`` or a report as "nan %".
    """
    cost = algorithm.cost(op, mesh, profile, config)
    if not cost.finite:
        raise MeshtuneError(
            f"{algorithm.name} priced the {op.pass_.value} GeMM ({op.dataflow.value}, "
            f"m={op.m:,} n={op.n:,} k={op.k:,}) on {mesh.label} with {config.label} and "
            f"profile '{profile.name}' at {cost.total_s!r} s, not a finite time: check the "
            "profile's link and compute values"
        )
    return cost


def layer_choice(
    algorithm: Algorithm,
    choice: LayerDataflow,
    mesh: Mesh,
    profile: HardwareProfile,
    config: Config,
    candidates: Sequence[Config] = (),
) -> LayerChoice:
    """The three passes of ``choice`` priced with ``config`` (:func:`priced`)."""
    p = tuple(priced(algorithm, op, mesh, profile, config) for op in choice.ops)
    return LayerChoice(choice, config, tuple(candidates) or (config,), (p[0], p[1], p[2]))


def config_bounds(
    algorithm: Algorithm,
    choice: LayerDataflow,
    mesh: Mesh,
    profile: HardwareProfile,
    candidates: Sequence[Config],
) -> list[float] | None:
    """The array-priced lower bound of each candidate's layer time
    (:func:`meshtune.search.arrays.layer_bounds`), scaled by :data:`BOUND_SLACK`; ``None`` when
    a bound is not finite or a communication has no link parameters of its own in ``profile``
    (a cost model may price it on another axis, e.g. Tesseract's depth ring on a profile
    without axis 2): then no bound may be trusted."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    try:
        with np.errstate(all="ignore"):  # a value that is not finite gives no bound, below
            bounds = layer_bounds(algorithm, choice, mesh, profile, candidates)
    except ProfileError:
        return None
    if not np.isfinite(bounds).all():
        return None
    scaled: list[float] = (bounds * BOUND_SLACK).tolist()
    return scaled


def layer_floor(
    algorithm: Algorithm, choice: LayerDataflow, mesh: Mesh, profile: HardwareProfile
) -> float:
    """:meth:`Algorithm.layer_floor` of ``choice`` (a lower bound of its layer time under every
    configuration, without listing them), scaled by :data:`BOUND_SLACK`; 0.0 when it is not
    finite or a communication has no link parameters in ``profile`` (no bound to trust)."""
    try:
        floor = algorithm.layer_floor(choice.ops, mesh, profile)
    except ProfileError:
        return 0.0
    return slack_floor(floor)


def slack_floor(floor: float) -> float:
    """``floor`` scaled by :data:`BOUND_SLACK`, 0.0 when it is not finite (no bound to trust):
    what :func:`layer_floor` makes of :meth:`Algorithm.layer_floor`."""
    return floor * BOUND_SLACK if math.isfinite(floor) else 0.0


def best_layer_choice(
    algorithm: Algorithm,
    choice: LayerDataflow,
    mesh: Mesh,
    profile: HardwareProfile,
    candidates: Sequence[Config],
    bounds: Sequence[float] | None = None,
) -> LayerChoice:
    """The fastest configuration among ``candidates`` (ties: smaller knob values).

    With several candidates they are priced in the order of their lower bounds
    (:func:`config_bounds`, or ``bounds`` when the caller has them) until a bound passes the
    best time found: the same choice as pricing every one. Every one is priced when there is no
    bound to trust.
    """
    order: list[tuple[float, Config]] = [(-math.inf, c) for c in candidates]
    if len(candidates) > 1:
        if bounds is None:
            bounds = config_bounds(algorithm, choice, mesh, profile, candidates)
        if bounds is not None:
            order = sorted(
                zip(bounds, candidates, strict=True),
                key=lambda item: (item[0], item[1].sort_key()),
            )
    best: LayerChoice | None = None
    for bound, config in order:
        if best is not None and bound > best.time_s:
            break
        current = layer_choice(algorithm, choice, mesh, profile, config, candidates)
        key = (current.time_s, config.sort_key())
        if best is None or key < (best.time_s, best.config.sort_key()):
            best = current
    if best is None:
        raise InfeasibleError(f"layer {choice.layer.name}: no configuration to choose from")
    return best


def mesh_problem(
    algorithm: Algorithm, block: BlockDataflow, mesh: Mesh, slice_block: int
) -> str | None:
    """The first reason ``mesh`` cannot run ``block`` with ``algorithm``, or ``None``."""
    problem = algorithm.mesh_problem(mesh)
    if problem is not None:
        return problem
    for choice in block.layers:
        _, reason = algorithm.configs(choice, mesh, slice_block)
        if reason is not None:
            return f"{mesh.label}: {reason}"
    return None


def evaluate_mesh(
    algorithm: Algorithm,
    block: BlockDataflow,
    mesh: Mesh,
    profile: HardwareProfile,
    blocks: int,
) -> MeshResult:
    """Tune every layer's configuration on ``mesh``."""
    problem = algorithm.mesh_problem(mesh)
    if problem is not None:
        return MeshResult(algorithm, mesh, (), problem, blocks)
    chosen = []
    for choice in block.layers:
        candidates, reason = algorithm.configs(choice, mesh, profile.slice_block)
        if reason is not None:
            return MeshResult(algorithm, mesh, (), f"{mesh.label}: {reason}", blocks)
        chosen.append(best_layer_choice(algorithm, choice, mesh, profile, candidates))
    return MeshResult(algorithm, mesh, tuple(chosen), None, blocks)


@dataclass(frozen=True)
class SearchResult:
    """Every evaluated mesh of one algorithm, feasible ones ranked fastest first."""

    algorithm: Algorithm
    block: BlockDataflow
    ranked: tuple[MeshResult, ...]
    infeasible: tuple[MeshResult, ...]

    @property
    def best(self) -> MeshResult:
        """The fastest feasible mesh."""
        return self.ranked[0]


def nearest_feasible(
    algorithm: Algorithm, block: BlockDataflow, chips: int, slice_block: int
) -> tuple[int | None, int | None]:
    """The nearest chip counts below and above ``chips`` with a feasible mesh (or ``None``).

    Looks at most :data:`NEAREST_SCAN` counts to each side; only constraints are checked, no
    cost is computed.
    """

    def feasible(n: int) -> bool:
        return any(
            mesh_problem(algorithm, block, mesh, slice_block) is None
            for mesh in algorithm.meshes(n)
        )

    below = next(
        (n for n in range(chips - 1, max(0, chips - NEAREST_SCAN), -1) if feasible(n)), None
    )
    top = min(MAX_CHIPS, chips + NEAREST_SCAN)
    above = next((n for n in range(chips + 1, top + 1) if feasible(n)), None)
    return below, above


def _infeasible_message(
    algorithm: Algorithm,
    block: BlockDataflow,
    chips: int,
    results: Sequence[MeshResult],
    slice_block: int,
    listed: bool,
) -> str:
    """One short line: how many shapes failed, a few reasons, the nearest feasible counts."""
    reasons = [r.infeasible or "" for r in results]
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    message = (
        f"no feasible mesh shape for {chips} chips with {algorithm.name} "
        f"({len(reasons)} tried): {shown}"
        if reasons
        else f"{algorithm.name} has no mesh shape of {chips} chips"
    )
    if listed:
        return message
    below, above = nearest_feasible(algorithm, block, chips, slice_block)
    near = [f"{n} (fewer)" for n in (below,) if n] + [f"{n} (more)" for n in (above,) if n]
    return message + (f"; nearest feasible chip counts: {', '.join(near)}" if near else "")


def search(
    layers: Sequence[FcLayer],
    profile: HardwareProfile,
    chips: int,
    algorithm: Algorithm | None = None,
    *,
    blocks: int = 1,
    mode: DataflowMode = "auto",
    shapes: Sequence[Mesh] | None = None,
) -> SearchResult:
    """Phase 1 then phase 2 with ``algorithm`` (default MeshSlice) for ``layers`` repeated
    ``blocks`` times.

    Raises :class:`InfeasibleError` when ``chips`` is out of range, a listed shape does not
    multiply to ``chips``, or no shape admits a legal configuration for every layer (the
    message gives a few reasons and the nearest feasible chip counts).
    """
    check_chips(chips)
    algorithm = algorithm or REGISTRY[DEFAULT_ALGORITHM]
    if shapes is not None and not shapes:
        raise InfeasibleError("no mesh shape to search: the shape list is empty")
    if shapes is not None:
        for shape in shapes:
            if shape.chips != chips:
                raise InfeasibleError(
                    f"mesh shape {shape.label} has {shape.chips} chips, not {chips}"
                )
        candidates = tuple(dict.fromkeys(shapes))
    else:
        candidates = algorithm.meshes(chips)
    block = plan_dataflows(layers, algorithm.mode(mode))
    results = [evaluate_mesh(algorithm, block, mesh, profile, blocks) for mesh in candidates]
    ranked = sorted(
        (r for r in results if r.feasible), key=lambda r: (r.time_s, r.mesh.rows, r.mesh.depth)
    )
    infeasible = tuple(r for r in results if not r.feasible)
    if not ranked:
        raise InfeasibleError(
            _infeasible_message(
                algorithm, block, chips, infeasible, profile.slice_block, shapes is not None
            )
        )
    return SearchResult(algorithm, block, tuple(ranked), infeasible)
