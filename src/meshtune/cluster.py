"""The whole cluster: data and pipeline parallelism around the 2D tensor-parallel mesh.

MeshSlice §2.2 and §7 place 2D TP inside data parallelism (MeshSlice + DP); Llama 3 trained
with TP × PP × DP (Llama Team 2024, §3.3.2). Here ``chips = DP · PP · P_r · P_c`` and the
search is exhaustive over every factorization (divisors, never a filter over all integers):

* **DP** replicas split the batch: each gets ``batch / DP`` sequences (DP must divide it), cut
  into ``micro_batches`` micro-batches of ``micro_batch`` sequences (the micro-batch count is a
  divisor of the replica's batch, searched too).
* **PP** stages hold contiguous blocks, ``stage_blocks = ⌈blocks / PP⌉`` each (the slowest
  stage sets the pace). With the 1F1B schedule (Narayanan et al., SC'21, §2.2) a step takes
  ``(m + PP − 1) · (stage_blocks · t_block + 2 · t_p2p)``: m micro-batches plus a bubble of
  ``PP − 1`` slots, the fraction ``(PP − 1) / (m + PP − 1)`` of the pipeline time. ``t_block``
  is one block's FC time (forward + backward-data + backward-weight) for one micro-batch on the
  mesh (phase 2, :func:`meshtune.search.evaluate_mesh`); ``t_p2p`` is one send-recv of a
  micro-batch's activation shard, ``bytes · tokens · hidden / TP``, to the next stage (forward)
  and of its gradient back (backward), on the critical path.
* The **DP gradient reduction** (reduce-scatter then all-gather of each chip's gradient shard
  over the DP ring; the same traffic as an all-reduce, or as ZeRO-1's reduce-scatter of
  gradients and all-gather of updated weights) is issued block by block as the last
  micro-batch's backward pass finishes each block. With ``t_r`` one block's reduction and
  ``t_b`` one block's backward time, the reductions finish
  ``exposed = max(t_r, L · t_r − (L − 1) · t_b)`` after the backward pass (L = stage_blocks):
  only this tail is added to the step.
* **Memory** per chip (:mod:`meshtune.memory`) is checked against the profile's
  ``memory_bytes`` before anything is costed (model state and activations) and again with the
  chosen configuration's communication buffers; a candidate over capacity is rejected with the
  reason naming its biggest term.
* **Uneven sizes** are padded as GSPMD does (Xu et al., 2021, §3.5): a layer dimension that does
  not divide over the mesh axes it is sharded on is rounded up to the next multiple, and if the
  algorithm still has no legal configuration, the sliced dimension is rounded up to a multiple
  of Algorithm 2's slicing unit ``B · lcm(P_r, P_c)`` (MeshSlice §3.1.2). The padded sizes are
  what is costed and what the plan records; the padding waste is ``1 − exact / padded`` FC FLOPs.

**Tiered networks**: a profile with ``tiers`` (e.g. NVLink inside 8-GPU nodes, then the
network) gives each ring the parameters of the tier it spans (:func:`tier_profile`): mesh
axis 1 innermost, then axis 0, then PP, then DP, so the factorization decides which level
stays inside a node. Without tiers, DP and PP traffic uses the profile's axis-2 parameters
when it has them, else those of its slowest mesh axis (a stand-in for the network between
replicas), and the mesh uses the axis tables.

Search speed: candidates whose model state and activations exceed capacity are dropped before
costing; the rest are visited in order of a lower bound on their step time, the pipeline's
compute alone, ``(m + PP − 1) · stage_blocks · FC FLOPs of a block / (TP · F)``, and the visit
stops once the bound passes the ``top``-th best step; each (algorithm, mesh, micro-batch) is
costed once and shared by every factorization with that TP mesh and micro-batch.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from meshtune.algorithm import Algorithm, Candidates
from meshtune.algorithms import REGISTRY
from meshtune.cost.meshslice import sharding_units
from meshtune.cost.schedule import comm_time, ring_collective, shift
from meshtune.dataflow import BlockDataflow, DataflowMode, Dim, LayerDataflow, plan_dataflows
from meshtune.dataflow import layer_dataflow as build_layer_dataflow
from meshtune.errors import InfeasibleError
from meshtune.layers import FcLayer, fc_layers
from meshtune.memory import (
    RECOMPUTE_MODES,
    MemoryBreakdown,
    Recompute,
    block_parameters,
    comm_buffer_bytes,
    memory_per_chip,
)
from meshtune.mesh import Mesh, check_chips, divisors
from meshtune.search import LayerChoice, MeshResult, best_layer_choice, flop_utilization
from meshtune.specs import AxisTable, CollectiveKind, HardwareProfile, LinkParams, ModelSpec

# Visit order of the search (see _visit_order); it changes the speed, never the result.
VISIT_TP_WEIGHT = 0.05
# How many memory rejections a result keeps as examples.
REJECTION_EXAMPLES = 3


@dataclass(frozen=True)
class ClusterOptions:
    """The levels the user pinned (``None``: searched) and the memory policy."""

    dp: int | None = None
    pp: int | None = None
    micro_batches: int | None = None
    zero1: bool = False
    recompute: Recompute = "selective"

    def __post_init__(self) -> None:
        for name in ("dp", "pp", "micro_batches"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InfeasibleError(f"{name} must be a whole number, got {value!r}")
            if value is not None and value < 1:
                raise InfeasibleError(f"{name} must be at least 1, got {value}")
        if self.recompute not in RECOMPUTE_MODES:
            raise InfeasibleError(
                f"recompute '{self.recompute}' is not one of {', '.join(RECOMPUTE_MODES)}"
            )


# --------------------------------------------------------------------------- pure formulas


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """1F1B pipeline bubble as a fraction of the pipeline time: (PP − 1) / (m + PP − 1)."""
    return (pp - 1) / (micro_batches + pp - 1)


def dp_exposed(reduce_block_s: float, backward_block_s: float, stage_blocks: int) -> float:
    """Tail of the per-block DP reductions after the backward pass:
    ``max(t_r, L · t_r − (L − 1) · t_b)`` (module docstring); 0 when nothing is reduced."""
    if reduce_block_s == 0.0:
        return 0.0
    return max(
        reduce_block_s, stage_blocks * reduce_block_s - (stage_blocks - 1) * backward_block_s
    )


def tier_profile(profile: HardwareProfile, spans: dict[int, int]) -> HardwareProfile:
    """``profile`` with the parameters of each axis in ``spans`` taken from the tier its ring
    spans (``{axis: consecutive chips the ring covers}``); ``profile`` itself without tiers.

    Chips are numbered with mesh axis 1 innermost, then axis 0, then the pipeline stages, then
    the DP replicas (the order Llama 3 nests TP, PP and DP, §3.3.2): a ring of ``size`` chips
    ``stride`` apart covers ``stride · size`` chips, and it uses the first tier whose unit
    holds that many (a ring that leaves a unit crosses the next tier's links).
    """
    if profile.tiers is None:
        return profile
    update: dict[str, AxisTable] = {}
    for kind in CollectiveKind:
        table: dict[str, LinkParams] = dict(getattr(profile, kind.value))
        for axis, span in spans.items():
            tier = next(t for t in profile.tiers if t.chips is None or t.chips >= span)
            table[f"axis{axis}"] = getattr(tier, kind.value)
        update[kind.value] = AxisTable.model_validate(table)
    return profile.model_copy(update=update)


def mesh_profile(profile: HardwareProfile, mesh: Mesh) -> HardwareProfile:
    """The profile a mesh is costed with: axis 1 spans P_c chips, axis 0 P_r · P_c."""
    return tier_profile(profile, {1: mesh.cols, 0: mesh.rows * mesh.cols})


def level_axis(profile: HardwareProfile, kind: CollectiveKind) -> int:
    """The profile axis whose ``kind`` parameters DP and PP traffic uses: 2 when the profile
    has it, else the mesh axis of lowest bandwidth (ties: the lower axis)."""
    axes = profile.axes(kind)
    if 2 in axes:
        return 2
    return min(axes, key=lambda a: (profile.link(kind, a).bw_bytes_per_s, a))


def dp_reduce_block_s(profile: HardwareProfile, dp: int, grad_bytes_per_chip: float) -> float:
    """Reduce-scatter + all-gather of ``grad_bytes_per_chip`` over a ring of ``dp`` replicas:
    two collectives of ``grad_bytes / dp`` shards (``t_launch + (dp − 1)(t_sync + shard/bw)``
    each, §3.2.2); 0 when dp = 1."""
    shard = grad_bytes_per_chip / dp
    comms = [
        *ring_collective(
            CollectiveKind.REDUCE_SCATTER,
            level_axis(profile, CollectiveKind.REDUCE_SCATTER),
            dp,
            shard,
        ),
        *ring_collective(
            CollectiveKind.ALL_GATHER, level_axis(profile, CollectiveKind.ALL_GATHER), dp, shard
        ),
    ]
    return comm_time(comms, profile).total_s


def p2p_s(profile: HardwareProfile, pp: int, activation_bytes_per_chip: float) -> float:
    """One send-recv of a micro-batch's activation shard to the next stage; 0 when PP = 1."""
    axis = level_axis(profile, CollectiveKind.SEND_RECV)
    return comm_time(shift(axis, pp, activation_bytes_per_chip), profile).total_s


def level_times(
    profile: HardwareProfile,
    *,
    tp: int,
    dp: int,
    pp: int,
    grad_bytes: float,
    activation_bytes: float,
) -> tuple[float, float]:
    """(one block's DP reduction, one stage-to-stage send-recv), each on the tier its ring
    spans: the DP ring covers all ``dp · pp · tp`` chips, a PP hop ``pp · tp``."""
    dp_profile = tier_profile(profile, {2: dp * pp * tp})
    pp_profile = tier_profile(profile, {2: pp * tp})
    return dp_reduce_block_s(dp_profile, dp, grad_bytes), p2p_s(pp_profile, pp, activation_bytes)


@dataclass(frozen=True)
class StepSplit:
    """One training step's time by cause (seconds); ``step_s`` is their sum.

    fc = m · stage_blocks · t_block; recompute = m · stage_blocks · t_fwd (full recompute runs
    each block's forward pass again during the backward pass, Korthikanti et al. §5; 0
    otherwise); bubble = (PP − 1) · (stage_blocks · (t_block + t_fwd) + 2 · t_p2p);
    send_recv = m · 2 · t_p2p; dp_exposed from :func:`dp_exposed`.
    """

    fc_s: float
    recompute_s: float
    bubble_s: float
    send_recv_s: float
    dp_exposed_s: float

    @property
    def step_s(self) -> float:
        """fc + recompute + bubble + send_recv + dp_exposed."""
        return self.fc_s + self.recompute_s + self.bubble_s + self.send_recv_s + self.dp_exposed_s


def step_split(
    *,
    micro_batches: int,
    pp: int,
    stage_blocks: int,
    block_s: float,
    p2p_one_s: float,
    dp_exposed_s: float,
    recompute_block_s: float = 0.0,
) -> StepSplit:
    """The :class:`StepSplit` of a 1F1B step (formulas in its docstring)."""
    return StepSplit(
        fc_s=(micro_batches * stage_blocks) * block_s,
        recompute_s=(micro_batches * stage_blocks) * recompute_block_s,
        bubble_s=(pp - 1) * (stage_blocks * (block_s + recompute_block_s) + 2 * p2p_one_s),
        send_recv_s=micro_batches * 2 * p2p_one_s,
        dp_exposed_s=dp_exposed_s,
    )


# --------------------------------------------------------------------------- padding


def padded_layer(
    choice: LayerDataflow, mesh: Mesh, algorithm: Algorithm, slice_block: int
) -> tuple[LayerDataflow, Candidates]:
    """``choice`` with its sizes rounded up as in the module docstring, with the algorithm's
    legal configurations there (or the reason even padded sizes have none). Sizes that divide
    are left as they are."""
    fc = choice.layer
    units = sharding_units(choice, mesh)
    sizes: dict[Dim, int] = {"tokens": fc.tokens, "in": fc.in_features, "out": fc.out_features}

    def rebuilt(unit: dict[Dim, int]) -> LayerDataflow:
        size = {d: -(-sizes[d] // unit[d]) * unit[d] for d in sizes}
        if size == sizes:
            return choice
        layer = FcLayer(fc.name, size["tokens"], size["in"], size["out"], fc.fed_by)
        return build_layer_dataflow(layer, choice.stationary, choice.transposed)

    padded = rebuilt(dict(units))
    found = algorithm.configs(padded, mesh, slice_block)
    if found[1] is None:
        return padded, found
    sliced = choice.sliced_dim
    units[sliced] = math.lcm(units[sliced], slice_block * math.lcm(mesh.rows, mesh.cols))
    padded = rebuilt(dict(units))
    return padded, algorithm.configs(padded, mesh, slice_block)


def padded_block(
    block: BlockDataflow, mesh: Mesh, algorithm: Algorithm, slice_block: int
) -> tuple[BlockDataflow, str | None]:
    """Every layer of ``block`` padded on ``mesh`` (:func:`padded_layer`); the first reason a
    layer cannot run even padded, or ``None``."""
    layers = []
    for choice in block.layers:
        padded, (_, reason) = padded_layer(choice, mesh, algorithm, slice_block)
        if reason is not None:
            return block, f"{mesh.label}: {reason}"
        layers.append(padded)
    return BlockDataflow(tuple(layers), block.transposes), None


def padding_waste(exact: Sequence[FcLayer], padded: Sequence[FcLayer]) -> float:
    """1 − exact FLOPs / padded FLOPs of one block (0 when nothing is padded)."""
    want = sum(layer.flops_per_pass for layer in exact)
    got = sum(layer.flops_per_pass for layer in padded)
    return 1.0 - want / got


# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class ClusterCandidate:
    """One costed DP × PP × mesh × micro-batch configuration."""

    dp: int
    pp: int
    micro_batches: int
    micro_batch: int
    stage_blocks: int
    result: MeshResult
    step: StepSplit
    memory: MemoryBreakdown
    flops: float
    dp_reduction_s: float
    padding_waste: float

    @property
    def mesh(self) -> Mesh:
        """The tensor-parallel mesh."""
        return self.result.mesh

    @property
    def chips(self) -> int:
        """DP · PP · P_r · P_c."""
        return self.dp * self.pp * self.mesh.chips

    def utilization(self, profile: HardwareProfile) -> float:
        """Exact FC FLOPs of the step / (step time · chips · peak), as in §5.1.1."""
        return flop_utilization(self.flops, self.step.step_s, self.chips, profile.peak_flops_per_s)

    @property
    def label(self) -> str:
        """``DP 4 × PP 2 × 32x8, 8 micro-batches``."""
        return (
            f"DP {self.dp} × PP {self.pp} × {self.mesh.label}, "
            f"{self.micro_batches} micro-batch{'es' if self.micro_batches > 1 else ''}"
        )


def step_flops(model: ModelSpec, batch: int, seq_len: int) -> float:
    """Exact FC FLOPs of one training step, all chips: blocks · Σ 3 · 2 · tokens · in · out."""
    layers = fc_layers(model, batch, seq_len)
    return float(model.blocks * sum(3 * layer.flops_per_pass for layer in layers))


@dataclass(frozen=True)
class MeshLevel:
    """What a cluster candidate needs from one costed mesh: block times, buffers, layers."""

    result: MeshResult
    block_s: float
    forward_s: float
    backward_s: float
    buffers_bytes: float

    @classmethod
    def of(cls, result: MeshResult, bytes_per_element: int) -> MeshLevel:
        """Σ layer time, Σ forward, Σ backward (data + weight) time, buffers of ``result``."""
        return cls(
            result=result,
            block_s=sum(choice.time_s for choice in result.layers),
            forward_s=sum(choice.passes[0].total_s for choice in result.layers),
            backward_s=sum(
                choice.passes[1].total_s + choice.passes[2].total_s for choice in result.layers
            ),
            buffers_bytes=comm_buffer_bytes(
                result.algorithm.comms(op, result.mesh, choice.config, bytes_per_element)
                for choice in result.layers
                for op in choice.dataflow.ops
            ),
        )


def cluster_candidate(
    model: ModelSpec,
    profile: HardwareProfile,
    level: MeshLevel,
    *,
    batch: int,
    seq_len: int,
    dp: int,
    pp: int,
    micro_batches: int,
    options: ClusterOptions,
) -> ClusterCandidate:
    """Cost one factorization from its mesh level (feasible, costed at ``micro_batch =
    batch / (dp · micro_batches)`` sequences, padded): step split, memory, waste."""
    result = level.result
    micro_batch = batch // (dp * micro_batches)
    tp = result.mesh.chips
    stage_blocks = -(-model.blocks // pp)
    padded = [choice.dataflow.layer for choice in result.layers]
    e = profile.bytes_per_element
    reduce_s, p2p = level_times(
        profile,
        tp=tp,
        dp=dp,
        pp=pp,
        grad_bytes=block_parameters(padded) / (tp // result.mesh.depth) * e,
        activation_bytes=e * micro_batch * seq_len * model.hidden / tp,
    )
    recompute = level.forward_s if options.recompute == "full" else 0.0
    split = step_split(
        micro_batches=micro_batches,
        pp=pp,
        stage_blocks=stage_blocks,
        block_s=level.block_s,
        p2p_one_s=p2p,
        dp_exposed_s=dp_exposed(reduce_s, level.backward_s + recompute, stage_blocks),
        recompute_block_s=recompute,
    )
    memory = memory_per_chip(
        model,
        padded,
        micro_batch=micro_batch,
        seq_len=seq_len,
        bytes_per_element=e,
        dp=dp,
        pp=pp,
        tp=tp,
        stage_blocks=stage_blocks,
        micro_batches=micro_batches,
        zero1=options.zero1,
        recompute=options.recompute,
        buffers_bytes=level.buffers_bytes,
        weight_shards=tp // result.mesh.depth,  # a depth replicates the weights (2.5D)
    )
    exact = fc_layers(model, micro_batch, seq_len)
    return ClusterCandidate(
        dp=dp,
        pp=pp,
        micro_batches=micro_batches,
        micro_batch=micro_batch,
        stage_blocks=stage_blocks,
        result=result,
        step=split,
        memory=memory,
        flops=step_flops(model, batch, seq_len),
        dp_reduction_s=stage_blocks * reduce_s,
        padding_waste=padding_waste(exact, padded),
    )


def over_capacity(memory: MemoryBreakdown, capacity: float | None) -> str | None:
    """Why ``memory`` does not fit in ``capacity`` bytes (naming the biggest term), or None."""
    if capacity is None or memory.total_bytes <= capacity:
        return None
    name, size = memory.biggest()
    return (
        f"needs {memory.total_bytes / 2**30:.1f} GiB per chip, over the "
        f"{capacity / 2**30:.1f} GiB capacity; biggest term {name} {size / 2**30:.1f} GiB"
    )


# --------------------------------------------------------------------------- search


@dataclass(frozen=True)
class ClusterResult:
    """The search's answer: costed candidates fastest first, the chosen mesh level, rejections.

    ``level`` holds every mesh of the chosen TP size costed at the chosen micro-batch with the
    chosen algorithm, feasible ones fastest first (the plan's 2D candidate list).
    """

    ranked: tuple[ClusterCandidate, ...]
    level: tuple[MeshResult, ...]
    others: tuple[MeshResult, ...]
    block: BlockDataflow
    rejected: int
    rejections: tuple[str, ...]
    searched: int

    @property
    def best(self) -> ClusterCandidate:
        """The fastest candidate within capacity."""
        return self.ranked[0]


class _Partial:
    """A mesh level being tuned layer by layer: chosen (padded) layers, and the compute time of
    the exact layers as lower bounds of the others."""

    def __init__(self, block: BlockDataflow, mesh: Mesh, profile: HardwareProfile) -> None:
        self.block = block
        self.compute = [
            3 * choice.layer.flops_per_pass / (mesh.chips * profile.effective_flops_per_s)
            for choice in block.layers
        ]
        self.order = sorted(range(len(self.compute)), key=lambda i: -self.compute[i])
        self.chosen: dict[int, LayerChoice] = {}

    def bound(self) -> float:
        """Σ tuned layer times + Σ compute times of the others: a lower bound of the block."""
        return sum(
            self.chosen[i].time_s if i in self.chosen else c for i, c in enumerate(self.compute)
        )


@dataclass
class _Costing:
    """Shared cache of the mesh level: (algorithm, mesh, micro-batch) → padded MeshResult."""

    model: ModelSpec
    profile: HardwareProfile
    seq_len: int
    mode: DataflowMode
    results: dict[tuple[str, Mesh, int], MeshResult] = field(default_factory=dict)
    levels: dict[tuple[str, Mesh, int], MeshLevel] = field(default_factory=dict)
    blocks: dict[tuple[DataflowMode, int], BlockDataflow] = field(default_factory=dict)
    partial: dict[tuple[str, Mesh, int], _Partial] = field(default_factory=dict)
    profiles: dict[Mesh, HardwareProfile] = field(default_factory=dict)

    def block(self, algorithm: Algorithm, micro_batch: int) -> BlockDataflow:
        mode = algorithm.mode(self.mode)
        key = (mode, micro_batch)
        if key not in self.blocks:
            self.blocks[key] = plan_dataflows(
                fc_layers(self.model, micro_batch, self.seq_len), mode
            )
        return self.blocks[key]

    def evaluate(
        self, algorithm: Algorithm, mesh: Mesh, micro_batch: int, budget: float = math.inf
    ) -> MeshResult | None:
        """The padded mesh result, or ``None`` once the block time is known to be at least
        ``budget``: layers are tuned largest first (:func:`meshtune.search.best_layer_choice`)
        and the rest counted at their compute time, a lower bound; tuned layers are kept, so
        a later call with a larger budget resumes."""
        key = (algorithm.name, mesh, micro_batch)
        if key in self.results:
            return self.results[key]
        if key not in self.partial:
            problem = algorithm.mesh_problem(mesh)
            if problem is not None:
                self.results[key] = MeshResult(algorithm, mesh, (), problem, self.model.blocks)
                return self.results[key]
            self.partial[key] = _Partial(self.block(algorithm, micro_batch), mesh, self.profile)
        costed = self.mesh_profile(mesh)
        partial = self.partial[key]
        for index in partial.order:
            if partial.bound() >= budget:
                return None
            if index in partial.chosen:
                continue
            choice, (candidates, reason) = padded_layer(
                partial.block.layers[index], mesh, algorithm, self.profile.slice_block
            )
            if reason is not None:
                self.results[key] = MeshResult(
                    algorithm, mesh, (), f"{mesh.label}: {reason}", self.model.blocks
                )
                return self.results[key]
            partial.chosen[index] = best_layer_choice(algorithm, choice, mesh, costed, candidates)
        layers = tuple(partial.chosen[i] for i in range(len(partial.block.layers)))
        self.results[key] = MeshResult(algorithm, mesh, layers, None, self.model.blocks)
        del self.partial[key]
        return self.results[key]

    def mesh_profile(self, mesh: Mesh) -> HardwareProfile:
        if mesh not in self.profiles:
            self.profiles[mesh] = mesh_profile(self.profile, mesh)
        return self.profiles[mesh]

    def level(self, result: MeshResult, micro_batch: int) -> MeshLevel:
        key = (result.algorithm.name, result.mesh, micro_batch)
        if key not in self.levels:
            self.levels[key] = MeshLevel.of(result, self.profile.bytes_per_element)
        return self.levels[key]


def _levels(
    model: ModelSpec, chips: int, batch: int, options: ClusterOptions
) -> list[tuple[int, int, int]]:
    """Every (dp, pp, micro_batches) allowed by the pins, the chip count and the batch: DP a
    divisor of gcd(chips, batch), PP of the chips left (at most one block per stage), the
    micro-batch count of the replica's batch. A pin that breaks a rule gives nothing."""
    out: list[tuple[int, int, int]] = []
    for dp in (options.dp,) if options.dp is not None else divisors(math.gcd(chips, batch)):
        if chips % dp or batch % dp:
            continue
        for pp in (options.pp,) if options.pp is not None else divisors(chips // dp):
            if (chips // dp) % pp or pp > model.blocks:
                continue
            replica = batch // dp
            counts = (
                (options.micro_batches,) if options.micro_batches is not None else divisors(replica)
            )
            out.extend((dp, pp, m) for m in counts if replica % m == 0)
    return out


def _no_level_message(model: ModelSpec, chips: int, batch: int, options: ClusterOptions) -> str:
    pins = ", ".join(
        f"{name} {getattr(options, name)}"
        for name in ("dp", "pp", "micro_batches")
        if getattr(options, name) is not None
    )
    return (
        f"no DP × PP × micro-batch split of {chips} chips and batch {batch} fits the pins "
        f"({pins or 'none'}): DP must divide the chips and the batch, PP the remaining chips "
        f"and at most {model.blocks} blocks, micro-batches the replica's batch"
    )


def search_cluster(
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    *,
    batch: int,
    seq_len: int,
    algorithms: Sequence[Algorithm] | None = None,
    mode: DataflowMode = "auto",
    options: ClusterOptions | None = None,
    meshes: Sequence[Mesh] | None = None,
    top: int = 5,
) -> ClusterResult:
    """The DP × PP × P_r × P_c × micro-batch search of the module docstring.

    ``algorithms`` defaults to MeshSlice; with several, each mesh takes the fastest. ``meshes``
    restricts the TP meshes (their chip counts must divide ``chips``). Raises
    :class:`InfeasibleError` when no factorization is allowed, none has a feasible mesh, or
    none fits in memory (the message gives the closest one's biggest term).
    """
    check_chips(chips)
    options = options or ClusterOptions()
    algorithms = list(algorithms) if algorithms else [REGISTRY["meshslice"]]
    if meshes is not None:
        for mesh in meshes:
            if chips % mesh.chips:
                raise InfeasibleError(
                    f"mesh shape {mesh.label} has {mesh.chips} chips, which does not divide {chips}"
                )
    levels = _levels(model, chips, batch, options)
    if not levels:
        raise InfeasibleError(_no_level_message(model, chips, batch, options))
    costing = _Costing(model, profile, seq_len, mode)
    capacity = profile.memory_bytes
    e = profile.bytes_per_element
    flops_per_block: dict[int, int] = {}
    compute_of: dict[tuple[int, int, int], float] = {}
    shapes_cache: dict[int, tuple[Mesh, ...]] = {}
    queue: list[tuple[float, int, int, int, Mesh]] = []
    rejected: list[tuple[float, str]] = []
    for dp, pp, m in levels:
        tp = chips // (dp * pp)
        micro = batch // (dp * m)
        stage_blocks = -(-model.blocks // pp)
        exact = fc_layers(model, micro, seq_len)
        memory = memory_per_chip(
            model,
            exact,
            micro_batch=micro,
            seq_len=seq_len,
            bytes_per_element=e,
            dp=dp,
            pp=pp,
            tp=tp,
            stage_blocks=stage_blocks,
            micro_batches=m,
            zero1=options.zero1,
            recompute=options.recompute,
        )
        reason = over_capacity(memory, capacity)
        if reason is not None:
            rejected.append(
                (memory.total_bytes, f"DP {dp} × PP {pp} × TP {tp}, {m} micro-batches: {reason}")
            )
            continue
        if tp not in shapes_cache:
            if meshes is not None:
                shapes_cache[tp] = tuple(dict.fromkeys(s for s in meshes if s.chips == tp))
            else:
                shapes_cache[tp] = tuple(dict.fromkeys(s for a in algorithms for s in a.meshes(tp)))
        if micro not in flops_per_block:
            flops_per_block[micro] = 3 * sum(layer.flops_per_pass for layer in exact)
        compute = stage_blocks * flops_per_block[micro] / (tp * profile.effective_flops_per_s)
        reduce_s, p2p = level_times(
            profile,
            tp=tp,
            dp=dp,
            pp=pp,
            grad_bytes=block_parameters(exact) / tp * e,
            activation_bytes=e * micro * seq_len * model.hidden / tp,
        )
        bound = (m + pp - 1) * (compute + 2 * p2p) + reduce_s
        compute_of[(dp, pp, m)] = compute
        queue.extend((bound, dp, pp, m, mesh) for mesh in shapes_cache[tp])
    if not queue:
        if rejected:
            closest = min(rejected)[1]
            raise InfeasibleError(
                f"no DP × PP × mesh split of {chips} chips fits in memory ({len(rejected)} "
                f"tried); the closest, {closest}"
            )
        raise InfeasibleError(
            f"no mesh shape of the listed ones divides the chips left after DP × PP for {chips} "
            "chips"
        )
    queue.sort(key=_visit_order)
    ranked: list[ClusterCandidate] = []
    infeasible: list[str] = []
    for bound, dp, pp, m, mesh in queue:
        if len(ranked) >= top and bound >= ranked[top - 1].step.step_s:
            continue
        micro = batch // (dp * m)
        budget = math.inf
        if len(ranked) >= top:
            slots = m + pp - 1
            stage_blocks = -(-model.blocks // pp)
            budget = (ranked[top - 1].step.step_s - (bound - slots * compute_of[(dp, pp, m)])) / (
                slots * stage_blocks
            )
        evaluated = [costing.evaluate(a, mesh, micro, budget) for a in algorithms]
        results = [r for r in evaluated if r is not None]
        feasible = [r for r in results if r.feasible]
        if not feasible:
            if results and len(results) == len(evaluated):
                infeasible.append(results[0].infeasible or "")
            continue
        result = min(feasible, key=lambda r: r.time_s)
        candidate = cluster_candidate(
            model,
            profile,
            costing.level(result, micro),
            batch=batch,
            seq_len=seq_len,
            dp=dp,
            pp=pp,
            micro_batches=m,
            options=options,
        )
        reason = over_capacity(candidate.memory, capacity)
        if reason is not None:
            rejected.append((candidate.memory.total_bytes, f"{candidate.label}: {reason}"))
            continue
        bisect.insort(ranked, candidate, key=_rank_key)
        del ranked[top:]
    if not ranked:
        if rejected:
            raise InfeasibleError(
                f"no DP × PP × mesh split of {chips} chips fits in memory; the closest, "
                f"{min(rejected)[1]}"
            )
        raise InfeasibleError(
            f"no feasible mesh for {chips} chips even with padding: " + "; ".join(infeasible[:3])
        )
    best = ranked[0]
    level, others = _level(costing, algorithms, best, shapes_cache[best.mesh.chips])
    return ClusterResult(
        ranked=tuple(ranked[:top]),
        level=level,
        others=others,
        block=costing.block(best.result.algorithm, best.micro_batch),
        rejected=len(rejected),
        rejections=tuple(reason for _, reason in sorted(rejected)[:REJECTION_EXAMPLES]),
        searched=len(levels),
    )


def _visit_order(item: tuple[float, int, int, int, Mesh]) -> tuple[float, int, int, int, int]:
    """Likely-fast candidates first, so the bound prunes early: the lower bound, raised by
    VISIT_TP_WEIGHT per doubling of the TP size (bigger meshes communicate more). Only the
    order of the visit depends on it; every candidate is still skipped by its true bound."""
    bound, dp, pp, m, mesh = item
    return (bound * (1 + VISIT_TP_WEIGHT * math.log2(mesh.chips)), dp, pp, mesh.rows, m)


def _rank_key(c: ClusterCandidate) -> tuple[float, int, int, int, int]:
    return (c.step.step_s, c.dp, c.pp, c.mesh.rows, c.micro_batches)


def _level(
    costing: _Costing,
    algorithms: Sequence[Algorithm],
    best: ClusterCandidate,
    shapes: Sequence[Mesh],
) -> tuple[tuple[MeshResult, ...], tuple[MeshResult, ...]]:
    """Every searched mesh of the chosen TP size at the chosen micro-batch with the chosen
    algorithm (fastest first, then infeasible ones), and the other algorithms' best there."""
    chosen = best.result.algorithm
    results = [
        r for mesh in shapes if (r := costing.evaluate(chosen, mesh, best.micro_batch)) is not None
    ]
    feasible = sorted(
        (r for r in results if r.feasible), key=lambda r: (r.time_s, r.mesh.rows, r.mesh.depth)
    )
    others = []
    for algorithm in algorithms:
        if algorithm.name == chosen.name:
            continue
        found = [
            r
            for mesh in shapes
            if (r := costing.evaluate(algorithm, mesh, best.micro_batch)) is not None
        ]
        fastest = sorted(
            (r for r in found if r.feasible), key=lambda r: (r.time_s, r.mesh.rows, r.mesh.depth)
        )
        others.extend(fastest[:1])
    others.sort(key=lambda r: r.time_s)
    return tuple(feasible) + tuple(r for r in results if not r.feasible), tuple(others)
