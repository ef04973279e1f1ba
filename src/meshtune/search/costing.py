"""The mesh level shared by every split of the cluster search: one (algorithm, mesh,
micro-batch, EP) costed once (phase 2 on padded layers, :mod:`meshtune.search.padding`), tuned
layer by layer largest first so that a split whose lower bound is already beaten stops early.
The EP degree sets how many experts a mesh's grouped MLP layers run (:mod:`meshtune.model.moe`); a
dense model has only EP 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from meshtune.algorithms.base import Algorithm
from meshtune.cost.config import Candidates
from meshtune.dataflow import BlockDataflow, DataflowMode, LayerDataflow, plan_dataflows
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import mesh_profile
from meshtune.model.layers import fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.search.padding import padded_layer
from meshtune.search.phase2 import (
    LayerChoice,
    MeshResult,
    best_layer_choice,
    config_bounds,
    layer_floor,
)
from meshtune.step import BlockFc
from meshtune.step.memory import comm_buffer_bytes


@dataclass(frozen=True)
class MeshLevel:
    """One costed mesh and what the step model needs of it (:class:`~meshtune.step.BlockFc`)."""

    result: MeshResult
    fc: BlockFc

    @classmethod
    def of(cls, result: MeshResult, bytes_per_element: int) -> MeshLevel:
        """Σ forward, Σ backward (data + weight), Σ exposed TP communication and the buffers of
        ``result``'s layers, one block of one micro-batch; the token shards of the residual
        stream (:attr:`~meshtune.algorithms.base.Algorithm.token_shards`, the fewest of the
        layers')."""
        layers = result.layers
        return cls(
            result=result,
            fc=BlockFc(
                tp=result.mesh.chips,
                forward_s=sum(c.passes[0].total_s for c in layers),
                backward_s=sum(c.passes[1].total_s + c.passes[2].total_s for c in layers),
                exposed_s=sum(p.exposed_s for c in layers for p in c.passes),
                layers=tuple(c.dataflow.layer for c in layers),
                weight_shards=result.mesh.chips // result.mesh.depth,
                buffers_bytes=comm_buffer_bytes(
                    result.algorithm.comms(op, result.mesh, c.config, bytes_per_element)
                    for c in layers
                    for op in c.dataflow.ops
                ),
                token_shards=min(
                    result.algorithm.token_shards(result.mesh, c.config) for c in layers
                ),
            ),
        )


class Partial:
    """A mesh level being tuned layer by layer: chosen (padded) layers, and lower bounds of the
    others: the compute time of the exact layer, raised to the algorithm's floor of the exact
    layer (:func:`~meshtune.search.phase2.layer_floor`, at most the padded layer's time) before
    it is padded, then to the least array-priced bound of its padded configurations
    (:func:`~meshtune.search.phase2.config_bounds`) once they are known."""

    def __init__(self, block: BlockDataflow, compute: ComputeFloors) -> None:
        self.block = block
        self.floor = list(compute.floors)
        self.order = compute.order
        self.chosen: dict[int, LayerChoice] = {}
        self.padded: dict[int, tuple[LayerDataflow, Candidates]] = {}
        self.bounds: dict[int, list[float] | None] = {}
        self.floored: set[int] = set()
        self._bound: float | None = None

    def bound(self) -> float:
        """Σ tuned layer times + Σ floors of the others: a lower bound of the block (kept until
        a layer is tuned or a floor raised; a tuned layer's floor is its time)."""
        if self._bound is None:
            self._bound = sum(self.floor)
        return self._bound

    def raise_floor(self, index: int, floor: float) -> None:
        """Raise layer ``index``'s floor to ``floor`` (a lower bound of its time)."""
        self.floored.add(index)
        if floor > self.floor[index]:
            self.floor[index] = floor
            self._bound = None

    def bound_configs(self, index: int, bounds: list[float] | None) -> None:
        """Record layer ``index``'s configuration bounds and raise its floor to their least."""
        self.bounds[index] = bounds
        if bounds:
            self.floor[index] = max(self.floor[index], min(bounds))
            self._bound = None

    def choose(self, index: int, choice: LayerChoice) -> None:
        """Record layer ``index``'s tuned choice (its time becomes its floor)."""
        self.chosen[index] = choice
        self.floor[index] = choice.time_s
        self._bound = None


@dataclass(frozen=True)
class ComputeFloors:
    """The compute time of each layer of a block on ``chips`` chips, ``3 · FLOPs per pass /
    (chips · F)`` (no chip computes faster than F), and the layers' indices largest first."""

    floors: tuple[float, ...]
    order: tuple[int, ...]

    @classmethod
    def of(cls, block: BlockDataflow, chips: int, profile: HardwareProfile) -> ComputeFloors:
        """The floors of ``block``'s layers on ``chips`` chips of ``profile``."""
        floors = compute_times(block, chips, profile)
        return cls(floors, tuple(sorted(range(len(floors)), key=lambda i: -floors[i])))


def compute_times(block: BlockDataflow, chips: int, profile: HardwareProfile) -> tuple[float, ...]:
    """:class:`ComputeFloors`' floors, ``3 · FLOPs per pass / (chips · F)`` of each layer of
    ``block``, not ordered (:meth:`Costing.block_compute_floor` sums them)."""
    rate = chips * profile.effective_flops_per_s
    return tuple(3 * choice.layer.flops_per_pass / rate for choice in block.layers)


Key = tuple[str, Mesh, int, int]
"""(algorithm name, mesh, micro-batch, EP)."""


@dataclass
class Costing:
    """Shared cache of the mesh level: (algorithm, mesh, micro-batch, EP) → padded MeshResult."""

    model: ModelSpec
    profile: HardwareProfile
    seq_len: int
    mode: DataflowMode
    results: dict[Key, MeshResult] = field(default_factory=dict)
    levels: dict[Key, MeshLevel] = field(default_factory=dict)
    blocks: dict[tuple[DataflowMode, int, int], BlockDataflow] = field(default_factory=dict)
    partial: dict[Key, Partial] = field(default_factory=dict)
    profiles: dict[Mesh, HardwareProfile] = field(default_factory=dict)
    compute: dict[tuple[DataflowMode, int, int, int], ComputeFloors] = field(default_factory=dict)
    """(dataflow mode, micro-batch, EP, chips) → the block's :class:`ComputeFloors` (the
    meshes of a chip count share them)."""

    def block(self, algorithm: Algorithm, micro_batch: int, ep: int = 1) -> BlockDataflow:
        """Phase 1 of one micro-batch's block in ``algorithm``'s dataflow mode, a MoE
        model's experts grouped ``experts / ep`` to a mesh (cached)."""
        mode = algorithm.mode(self.mode)
        key = (mode, micro_batch, ep)
        if key not in self.blocks:
            self.blocks[key] = plan_dataflows(
                fc_layers(self.model, micro_batch, self.seq_len, ep), mode
            )
        return self.blocks[key]

    def evaluate(
        self,
        algorithm: Algorithm,
        mesh: Mesh,
        micro_batch: int,
        budget: float = math.inf,
        ep: int = 1,
    ) -> MeshResult | None:
        """The padded mesh result, or ``None`` once the block time is known to be at least
        ``budget``: layers are tuned largest first (``best_layer_choice``)
        and the rest counted at their compute time, a lower bound; tuned layers are kept, so
        a later call with a larger budget resumes."""
        key = (algorithm.name, mesh, micro_batch, ep)
        partial = self._started(key, algorithm, mesh, micro_batch, ep)
        if partial is None:
            return self.results[key]
        costed: HardwareProfile | None = None  # looked up once a layer is priced
        for index in partial.order:
            if partial.bound() >= budget:
                return None
            if index in partial.chosen:
                continue
            if costed is None:
                costed = self.mesh_profile(mesh)
            if index not in partial.floored:
                exact = partial.block.layers[index]
                partial.raise_floor(index, layer_floor(algorithm, exact, mesh, costed))
                if partial.bound() >= budget:
                    return None
            if index not in partial.padded:
                partial.padded[index] = padded_layer(
                    partial.block.layers[index], mesh, algorithm, self.profile.slice_block
                )
            choice, (candidates, reason) = partial.padded[index]
            if reason is not None:
                self.results[key] = MeshResult(
                    algorithm, mesh, (), f"{mesh.label}: {reason}", self.model.blocks
                )
                return self.results[key]
            if len(candidates) > 1 and index not in partial.bounds:
                partial.bound_configs(
                    index, config_bounds(algorithm, choice, mesh, costed, candidates)
                )
                if partial.bound() >= budget:
                    return None
            partial.choose(
                index,
                best_layer_choice(
                    algorithm, choice, mesh, costed, candidates, bounds=partial.bounds.get(index)
                ),
            )
        layers = tuple(partial.chosen[i] for i in range(len(partial.block.layers)))
        self.results[key] = MeshResult(algorithm, mesh, layers, None, self.model.blocks)
        del self.partial[key]
        return self.results[key]

    def _started(
        self, key: Key, algorithm: Algorithm, mesh: Mesh, micro_batch: int, ep: int
    ) -> Partial | None:
        """The level of ``key`` being tuned, started if it was not; ``None`` when it has a
        result (a mesh the algorithm does not allow gets its infeasible result here)."""
        if key in self.results:
            return None
        partial = self.partial.get(key)
        if partial is None:
            problem = algorithm.mesh_problem(mesh)
            if problem is not None:
                self.results[key] = MeshResult(algorithm, mesh, (), problem, self.model.blocks)
                return None
            block = self.block(algorithm, micro_batch, ep)
            partial = self.partial[key] = Partial(
                block, self.compute_floors(algorithm, block, micro_batch, ep, mesh.chips)
            )
            largest = partial.order[0]
            exact = block.layers[largest]
            partial.raise_floor(
                largest, layer_floor(algorithm, exact, mesh, self.mesh_profile(mesh))
            )
        return partial

    def compute_floors(
        self, algorithm: Algorithm, block: BlockDataflow, micro_batch: int, ep: int, chips: int
    ) -> ComputeFloors:
        """The :class:`ComputeFloors` of ``block`` (``algorithm``'s) on ``chips`` (cached)."""
        floors_key = (algorithm.mode(self.mode), micro_batch, ep, chips)
        compute = self.compute.get(floors_key)
        if compute is None:
            compute = self.compute[floors_key] = ComputeFloors.of(block, chips, self.profile)
        return compute

    def block_compute_floor(self, block: BlockDataflow, chips: int) -> float:
        """Σ the :class:`ComputeFloors` floors of ``block`` on ``chips``, in layer order, built
        without keeping them (the search's block floors ask it of every family,
        :class:`~meshtune.search.visit.BlockFloors`)."""
        return sum(compute_times(block, chips, self.profile))

    def floors(
        self, algorithm: Algorithm, meshes: Sequence[Mesh], micro_batch: int, ep: int = 1
    ) -> list[float]:
        """:meth:`floor` of each of ``meshes`` (the search's floors of an algorithm with no
        family floor: :class:`~meshtune.search.visit.BlockFloors` gives the others, every
        layer of a block at once)."""
        return [self.floor(algorithm, mesh, micro_batch, ep) for mesh in meshes]

    def floor(self, algorithm: Algorithm, mesh: Mesh, micro_batch: int, ep: int = 1) -> float:
        """What is known of the block FC time of (algorithm, mesh, micro-batch, EP) without
        pricing a configuration: a costed level's block time (Σ layers), ``inf`` when
        infeasible, else the lower bound the level being tuned has reached (a level not
        started is started: its compute floors, its largest layer's raised to
        :func:`~meshtune.search.phase2.layer_floor`). :meth:`evaluate` with a ``budget`` at
        most this answers None, a level whose block time is at least ``budget``, or the
        infeasible level."""
        key = (algorithm.name, mesh, micro_batch, ep)
        partial = self._started(key, algorithm, mesh, micro_batch, ep)
        if partial is not None:
            return partial.bound()
        result = self.results[key]
        return sum(c.time_s for c in result.layers) if result.feasible else math.inf

    def mesh_profile(self, mesh: Mesh) -> HardwareProfile:
        """The profile ``mesh`` is costed with (:func:`meshtune.hardware.tiers.mesh_profile`)."""
        if mesh not in self.profiles:
            self.profiles[mesh] = mesh_profile(self.profile, mesh)
        return self.profiles[mesh]

    def level(self, result: MeshResult, micro_batch: int, ep: int = 1) -> MeshLevel:
        """The :class:`MeshLevel` of ``result``, costed at ``ep`` (cached)."""
        key = (result.algorithm.name, result.mesh, micro_batch, ep)
        if key not in self.levels:
            self.levels[key] = MeshLevel.of(result, self.profile.bytes_per_element)
        return self.levels[key]
