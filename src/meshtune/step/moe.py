"""Mixture-of-experts and MLA terms of one block's step on one chip: pure cost functions.

What a MoE or MLA block adds to the four FC layers the mesh prices (:mod:`meshtune.model.moe` for
the model arithmetic):

* **Expert weights** (Lepikhin et al., "GShard", ICLR 2021, §2.2; Megatron-Core's expert
  parallelism): the ``experts`` routed experts of a MoE block are split over the ``ep`` ranks of
  an expert-parallel group (EP divides DP: each rank is one DP replica's TP mesh), so one mesh
  holds ``experts / ep`` routed experts and every shared expert (``experts / ep +
  shared_slots`` matrices per MLP FC layer where the FC layers count one), each sharded over
  the mesh like the FC layer's weight. An expert's replicas are the ``dp / ep`` meshes that
  hold it: its gradients are reduced, and with ZeRO its optimizer state and gradients
  sharded, over those (:func:`meshtune.step.memory.memory_per_chip`), so the expert state is
  spread over EP × DP / EP = DP ranks.
* **Side GeMMs** (:func:`meshtune.model.moe.side_gemms`): the router and MLA's up projections, split
  over the TP chips, forward ``2·T·in·out / tp`` FLOPs and backward twice that, at the profile's
  GeMM rate (:func:`meshtune.cost.compute.gemm_time`); in FP8 training MLA's up projections at
  the FP8 rate, the router at the profile's (DeepSeek-V3 §3.3.1: gating stays in BF16).
* **All-to-all** (GShard §2.2, Figure 3; Megatron-Core's ``alltoall`` token dispatcher): with
  ``ep > 1`` each chip sends its share of the routed token copies, ``T · top_k ·
  capacity_factor · h · e / tp`` bytes, over the EP group before the experts (dispatch) and
  back after them (combine), and the backward pass does both again: four all-to-alls per MoE
  block and micro-batch, on the critical path (not overlapped). One all-to-all of ``B`` bytes
  per chip over ``P`` ranks takes ``t_launch + (P − 1) · (t_sync + (B / P) / bw)`` (pairwise
  exchange: P − 1 rounds, each sending one rank's share; ``bw`` is nccl-tests' bus bandwidth),
  with the parameters of the network tier the group spans (``ep · tp`` consecutive chips;
  :func:`all_to_all_link`). In FP8 training the dispatches, forward and backward, carry FP8
  with their tile scales and the combines BF16 (:func:`meshtune.step.precision.dispatch_widths`),
  ``2·(a2a(dispatch bytes) + a2a(combine bytes))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from meshtune.cost.compute import DEFAULT_PRECISION, Precision, at_precision, gemm_time
from meshtune.errors import ProfileError
from meshtune.hardware.links import LinkParams
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.model.moe import side_gemms
from meshtune.model.spec import ModelSpec
from meshtune.step.precision import dispatch_widths

MLP_LAYERS = ("mlp_up", "mlp_down")
"""The FC layers that hold a MoE block's expert GeMMs."""


def all_to_all_s(link: LinkParams, ranks: int, bytes_per_chip: float) -> float:
    """One all-to-all of ``bytes_per_chip`` over ``ranks`` chips (module docstring):
    ``t_launch + (P − 1)·(t_sync + bytes / P / bw)``; 0 when ranks = 1."""
    if ranks <= 1:
        return 0.0
    step = link.t_sync_s + bytes_per_chip / ranks / link.bw_bytes_per_s
    return link.t_launch_s + (ranks - 1) * step


def dispatch_bytes(model: ModelSpec, tokens: int, tp: int, bytes_per_element: float) -> float:
    """Bytes one chip puts into one dispatch (or combine) all-to-all for ``tokens`` tokens:
    ``tokens · top_k · capacity_factor · h · e / tp`` (capacity-padded expert buffers, GShard
    §2.2); 0 for a dense model."""
    if model.moe is None:
        return 0.0
    routed = tokens * model.moe.top_k * model.moe.capacity_factor
    return routed * model.hidden * bytes_per_element / tp


def all_to_all_link(profile: HardwareProfile, span: int) -> LinkParams:
    """The all-to-all parameters of a group spanning ``span`` consecutive chips: those of the
    first tier whose unit holds it, else the profile's ``all_to_all``. Raises
    :class:`ProfileError` naming the field when neither has them."""
    for tier in profile.tiers or ():
        if tier.chips is None or tier.chips >= span:
            if tier.all_to_all is not None:
                return tier.all_to_all
            break
    if profile.all_to_all is None:
        raise ProfileError(
            f"profile '{profile.name}' has no all_to_all parameters (the profile's or its "
            f"tier's all_to_all: t_launch_s, t_sync_s, bw_bytes_per_s), which expert "
            "parallelism's token dispatch needs; plan with --ep 1"
        )
    return profile.all_to_all


def has_all_to_all(profile: HardwareProfile) -> bool:
    """Whether the profile prices an all-to-all at every span (its own table or every tier)."""
    if profile.all_to_all is not None:
        return True
    return bool(profile.tiers) and all(t.all_to_all is not None for t in profile.tiers or ())


def expert_layer_params(spec: ModelSpec, layers: Sequence[FcLayer], ep: int) -> tuple[float, float]:
    """(routed, shared) expert weight elements one mesh holds per block, as multiples of the
    one matrix per MLP FC layer that ``layers`` count: routed ``experts / ep · Σ_MLP in·out``
    (their state over each expert's ``dp / ep`` replicas), shared ``(shared_slots − 1) ·
    Σ_MLP in·out`` (replicated like dense weights; the −1 takes back the FC layers' own
    matrix, counted with the routed experts). (0, 0) when dense."""
    if spec.moe is None:
        return 0.0, 0.0
    if ep < 1 or spec.moe.experts % ep:
        raise ValueError(f"ep {ep} does not divide {spec.moe.experts} experts")
    mlp = sum(layer.w_elements for layer in layers if layer.name in MLP_LAYERS)
    return spec.moe.experts / ep * mlp, (spec.moe.shared_slots - 1.0) * mlp


@dataclass(frozen=True)
class MoeBlock:
    """One block's MoE / MLA terms on one chip for one micro-batch.

    ``dense_params``: weight elements per chip to add to the FC layers' count (side GeMMs over
    TP, the shared experts, less the MLP layers' own matrices, which ``expert_params`` holds);
    ``expert_params``: the routed experts' weight elements per chip; ``forward_s`` /
    ``backward_s``: side GeMMs and all-to-alls; ``all_to_all_s`` of them (the four
    all-to-alls); ``side_flops``: the side GeMMs' model FLOPs, forward + backward, all TP chips.
    """

    dense_params: float = 0.0
    expert_params: float = 0.0
    forward_s: float = 0.0
    backward_s: float = 0.0
    all_to_all_s: float = 0.0
    side_flops: float = 0.0


NO_MOE = MoeBlock()


def moe_block(
    model: ModelSpec,
    profile: HardwareProfile,
    layers: Sequence[FcLayer],
    *,
    micro_batch: int,
    seq_len: int,
    tp: int,
    weight_shards: int,
    ep: int = 1,
    precision: Precision = DEFAULT_PRECISION,
) -> MoeBlock:
    """The terms of the module docstring; :data:`NO_MOE` for a dense model without MLA.

    Raises :class:`ProfileError` when ``ep > 1`` and the profile has no all-to-all parameters.
    """
    tokens = micro_batch * seq_len
    side = side_gemms(model, tokens)
    if not side:
        return NO_MOE
    linear = at_precision(profile, precision)
    forward = sum(
        gemm_time(
            profile if g.name == "router" else linear, g.tokens / tp, g.out_features, g.in_features
        )
        for g in side
    )
    a2a = 0.0
    if ep > 1:
        link = all_to_all_link(profile, ep * tp)
        a2a = 2 * sum(
            all_to_all_s(link, ep, dispatch_bytes(model, tokens, tp, width))
            for width in dispatch_widths(precision, profile.bytes_per_element)
        )
    routed, shared = expert_layer_params(model, layers, ep)
    return MoeBlock(
        dense_params=sum(g.w_elements for g in side) / tp + shared / weight_shards,
        expert_params=routed / weight_shards,
        forward_s=forward + a2a / 2,
        backward_s=2 * forward + a2a / 2,
        all_to_all_s=a2a,
        side_flops=3.0 * sum(g.flops_per_pass for g in side),
    )
