"""One training step of one split, per chip: time by cause, FLOPs, memory.

:func:`price_step` composes the pure terms of :mod:`meshtune.step.work` (attention core,
memory-bound work, embedding, LM head and loss, optimizer), :mod:`meshtune.step.comms` (DP
reduction, ZeRO-3 gathers, stage sends), :mod:`meshtune.step.pipeline` (stage layout and
schedule) and :mod:`meshtune.step.memory`, around one block's FC GeMMs on the mesh
(:class:`BlockFc`, from phase 2). Per micro-batch and block on one chip:

``t_block = FC fwd + FC bwd + attention + element-wise + recompute``, where recompute is
``"full"``: the block's forward again (FC, attention, element-wise); ``"selective"``: the
attention core's forward again with plain attention (fused attention recomputes inside its
own backward kernel already); ``"none"``: nothing (Korthikanti et al. 2022 §5).

Chip i of the pipeline takes ``n_i · (t_block + t_fsdp) + [i = 0]·t_embedding +
[i = pp − 1]·(t_head + t_loss)`` per micro-batch; the slowest chip sets the pace, and with its
``2 · v · t_p2p`` of stage sends makes the slot ``t``. Under 1F1B the step is
``(m + (pp − 1)/v) · t + DP tail + optimizer``: the bubble is ``(pp − 1)/v · t`` (DualPipe's
is :func:`meshtune.step.pipeline.pipeline_time`'s, its all-to-alls and sends hidden), the DP tail
:func:`meshtune.step.comms.dp_exposed` over the pacing chip's blocks (all of their reductions
when ``grad_overlap`` is off) plus the embedding's gradient bucket (reduced last, nothing
left to hide it), and the optimizer step runs once the gradients are reduced.
:class:`StepSplit` sums to the step.

FLOP counts for MFU and HFU follow Korthikanti et al. 2022 §6 (and PaLM App. B): model FLOPs
are forward + backward of the FC layers (exact, unpadded), the attention core with the full
``s²`` (no causal halving) and the LM head, without recompute; hardware FLOPs add what
recompute runs again (full: FC and attention forward; selective with plain attention: the
attention forward) and fused attention's own recompute of QKᵀ (half an attention forward).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.model.layers import fc_layers as full_layers
from meshtune.model.moe import side_gemms
from meshtune.model.spec import ModelSpec
from meshtune.step.block import BlockFc, BlockWork, block_work
from meshtune.step.comms import (
    dp_exposed,
    dp_profiles,
    dp_reduce_block_s,
    fsdp_exposed,
    p2p_s,
    ring_s,
)
from meshtune.step.cost import StepCost, StepSplit
from meshtune.step.memory import memory_per_chip
from meshtune.step.options import DEFAULT_OPTIONS, StepOptions, Zero
from meshtune.step.pipeline import (
    StageLayout,
    end_times,
    ends_held,
    model_copies,
    pipeline_time,
    stage_layout,
)
from meshtune.step.precision import optimizer_bytes_per_param
from meshtune.step.work import (
    attention_core,
    lm_head_flops,
    optimizer_s,
)


@dataclass(frozen=True)
class StepTime:
    """The time of a step (:func:`step_time`): the split by cause, the stage layout, the DP
    reduction of one block's bucket and of the ends', the blocks of the chip that sets the
    pace, the bubble fraction, the model copies a chip holds and the block work priced."""

    split: StepSplit
    layout: StageLayout
    dp_block_s: float
    dp_end_s: float
    pace_blocks: int
    bubble_fraction: float
    copies: int
    work: BlockWork


def model_flops(model: ModelSpec, batch: int, seq_len: int, fc_layers: Sequence[FcLayer]) -> float:
    """Model FLOPs of a step, all chips: ``blocks · (Σ 3·2·T·in·out + 12·b·H·s²·d) +
    6·T·h·V`` with ``fc_layers`` the exact layers of the whole batch (module docstring), the
    side GeMMs of MoE and MLA blocks (:func:`meshtune.model.moe.side_gemms`) in the Σ."""
    side = side_gemms(model, batch * seq_len)
    fc = sum(3 * layer.flops_per_pass for layer in (*fc_layers, *side))
    attention = attention_core(model, batch, seq_len, 1, 0, kind="plain").flops
    return float(model.blocks * (fc + attention) + lm_head_flops(model, batch, seq_len, 1))


def step_flops(model: ModelSpec, batch: int, seq_len: int) -> float:
    """Exact FC FLOPs of one training step, all chips: ``blocks · Σ 3 · 2 · tokens · in ·
    out`` (the numerator of MeshSlice §5.1.1's FC utilization)."""
    layers = full_layers(model, batch, seq_len)
    return float(model.blocks * sum(3 * layer.flops_per_pass for layer in layers))


def step_time(
    model: ModelSpec,
    profile: HardwareProfile,
    fc: BlockFc,
    *,
    batch: int,
    seq_len: int,
    dp: int,
    pp: int,
    micro_batches: int,
    vpp: int = 1,
    zero: Zero = 0,
    options: StepOptions = DEFAULT_OPTIONS,
    ep: int = 1,
    cp: int = 1,
    work: BlockWork | None = None,
) -> StepTime:
    """The time part of :func:`price_step` (the same arguments): its :class:`StepTime`, with
    neither memory nor FLOPs counted (the search's lower bounds need only the time)."""
    m = micro_batches
    micro = batch // (dp * m)
    tp = fc.tp
    e = profile.bytes_per_element
    local = seq_len // cp  # tokens of a sequence on one CP rank
    rdp = dp * cp  # ranks holding the same weights
    layout = stage_layout(model.blocks, pp, vpp)
    if work is None:
        work = block_work(
            model, profile, fc, micro_batch=micro, seq_len=seq_len, cp=cp, ep=ep, options=options
        )
    attn, recompute, moe, ring = work.attention, work.recompute_s, work.moe, work.ring
    forward, backward = work.forward_s, work.backward_s
    dp_profile, pp_profile = dp_profiles(profile, tp=tp * cp, dp=dp, pp=pp)
    fsdp = zero3_exposed(
        profile, work, tp=tp, dp=dp, pp=pp, cp=cp, ep=ep, zero=zero, options=options
    )
    backward += work.accumulation_s  # 0 unless accumulated separately
    block_s = forward + backward + options.block_overhead_s
    ends = end_times(options.schedule, pp, work.embedding_s, work.head_s)
    times = [n * (block_s + fsdp) + end for n, end in zip(layout.blocks, ends, strict=True)]
    pace = times.index(max(times))  # the slowest chip, the first of equals
    n = layout.blocks[pace]
    p2p = p2p_s(pp_profile, pp, e * micro * local * model.hidden / tp)
    piped = pipeline_time(
        options.schedule,
        pp=pp,
        micro_batches=m,
        vpp=vpp,
        chip_s=times[pace],
        a2a_s=n * moe.all_to_all_s,
        sends_s=2 * vpp * p2p,
        backward_s=n * (backward - moe.all_to_all_s / 2),
        weight_s=n * fc.backward_s / 2,  # the weight-gradient GeMMs: half the FC backward
        slowdown=profile.overlap_slowdown,
    )
    reduce_block, reduce_end = _dp_reductions(
        dp_profile, work, rdp=rdp, ep=ep, zero=zero, options=options
    )
    copies = model_copies(options.schedule)
    held = copies * layout.most  # blocks whose weights a chip holds
    tail = dp_exposed(
        reduce_block,
        backward,
        held,
        overlap=options.grad_overlap,
        slowdown=profile.overlap_slowdown,
    )
    sharded = zero >= 1  # the optimizer state sharded over the ranks holding it
    shard = (held * work.block_params + ends_held(options.schedule, pp) * work.end_params) / (
        rdp if sharded else 1
    ) + held * moe.expert_params / (rdp // ep if sharded else 1)
    attn_s = attn.total_s(profile)
    split = StepSplit(
        fc_s=m * n * (fc.forward_s + fc.backward_s),
        recompute_s=m * n * recompute,
        bubble_s=piped.bubble_s,
        send_recv_s=m * piped.sends_s,
        dp_exposed_s=m * n * fsdp + tail + reduce_end,
        attention_s=m * n * attn_s,
        other_s=m * (n * (block_s - recompute - fc.forward_s - fc.backward_s - attn_s) + ends[pace])
        - m * (n * moe.all_to_all_s - piped.a2a_s),
        optimizer_s=optimizer_s(
            shard, e, profile, work.grad_bytes, optimizer_bytes_per_param(options.precision)
        ),
        tp_exposed_s=m * n * fc.exposed_s,
        ep_exposed_s=m * piped.a2a_s,
        cp_exposed_s=m * n * (ring[0] + ring[1]),
    )
    return StepTime(
        split=split,
        layout=layout,
        dp_block_s=reduce_block,
        dp_end_s=reduce_end,
        pace_blocks=n,
        bubble_fraction=piped.fraction,
        copies=copies,
        work=work,
    )


def _dp_reductions(
    dp_profile: HardwareProfile,
    work: BlockWork,
    *,
    rdp: int,
    ep: int,
    zero: Zero,
    options: StepOptions,
) -> tuple[float, float]:
    """(one block's bucket, the ends' bucket) of the DP reduction
    (:func:`~meshtune.step.comms.dp_reduce_block_s` on the DP ring's ``dp_profile``) over the
    ``rdp`` ranks holding the same weights, a MoE block's expert weights over the ``rdp / ep``
    replicas of each expert; at ZeRO stage ``zero`` 1 or 2 the updated weights are all-gathered,
    not the gradients. No block bucket at ZeRO-3 (its reduce-scatters are
    :func:`zero3_exposed`'s)."""
    weight_width = dp_profile.bytes_per_element if zero >= 1 else None

    def reduce_s(ring: int, params: float) -> float:
        """The DP reduction of ``params`` parameters per chip over ``ring`` replicas."""
        weights = None if weight_width is None else params * weight_width
        return dp_reduce_block_s(
            dp_profile, ring, params * work.grad_bytes, weights, all_reduce=options.grad_all_reduce
        )

    expert_params = work.moe.expert_params
    reduce_block = (
        0.0
        if zero == 3
        else reduce_s(rdp, work.block_params)
        + (reduce_s(rdp // ep, expert_params) if expert_params else 0.0)
    )
    return reduce_block, reduce_s(rdp, work.end_params)


def zero3_exposed(
    profile: HardwareProfile,
    work: BlockWork,
    *,
    tp: int,
    dp: int,
    pp: int,
    cp: int,
    ep: int,
    zero: Zero,
    options: StepOptions,
) -> float:
    """One block's ZeRO-3 gathers and scatters not hidden by its compute, one micro-batch, for
    a split of ``dp · pp · cp`` meshes of ``tp`` chips
    (:func:`~meshtune.step.comms.fsdp_exposed` of ``work``'s forward and backward, before a
    separate accumulation): its weights gathered and its gradients reduce-scattered over the
    ``dp · cp`` ranks holding them, a MoE block's expert weights over the ``dp · cp / ep``
    replicas of each expert, on the DP ring's profile
    (:func:`~meshtune.step.comms.dp_profiles`: the profile with its tiers' links, its element
    width and overlap slowdown); 0 below ZeRO stage 3 (``zero``). It only falls as the forward
    and backward grow, by at most what they grow (so a block's time with it only grows)."""
    if zero != 3:
        return 0.0
    dp_profile, _ = dp_profiles(profile, tp=tp * cp, dp=dp, pp=pp)
    rdp = dp * cp
    moe, e = work.moe, dp_profile.bytes_per_element
    gather, scatter = (
        ring_s(dp_profile, kind, rdp, work.block_params * width)
        + (
            ring_s(dp_profile, kind, rdp // ep, moe.expert_params * width)
            if moe.expert_params
            else 0
        )
        for kind, width in (
            (CollectiveKind.ALL_GATHER, e),
            (CollectiveKind.REDUCE_SCATTER, work.grad_bytes),
        )
    )
    regather = options.zero3_recompute_gather and options.recompute == "full"
    return fsdp_exposed(
        gather,
        scatter,
        work.forward_s,
        work.backward_s,
        backward_gathers=2 if regather else 1,
        slowdown=dp_profile.overlap_slowdown,
    )


def price_step(
    model: ModelSpec,
    profile: HardwareProfile,
    fc: BlockFc,
    *,
    batch: int,
    seq_len: int,
    dp: int,
    pp: int,
    micro_batches: int,
    vpp: int = 1,
    zero: Zero = 0,
    options: StepOptions = DEFAULT_OPTIONS,
    exact_layers: Sequence[FcLayer] = (),
    ep: int = 1,
    cp: int = 1,
    work: BlockWork | None = None,
) -> StepCost:
    """The step of the module docstring for ``batch`` sequences on ``dp · pp · fc.tp`` chips,
    at ZeRO stage ``zero`` over the DP ranks, run as ``options`` say.

    ``exact_layers``: one micro-batch's unpadded FC layers, for the model FLOPs (``fc.layers``
    when empty). ``ep``: expert-parallel ranks among the DP replicas (a MoE model's terms:
    :mod:`meshtune.step.moe`). ``cp``: context-parallel ranks, each holding ``seq_len / cp``
    tokens of every sequence (:mod:`meshtune.step.cp`: the FC layers of ``fc`` are those of the
    local tokens, the attention core is split over ``tp · cp`` chips, weight gradients are
    reduced and ZeRO-sharded over DP × CP, the K/V ring shows where attention does not hide it).
    ``work``: :func:`~meshtune.step.block.block_work` of the same inputs, when the caller has
    it (priced here otherwise). Raises :class:`~meshtune.errors.ProfileError` when the
    profile has no ``hbm_bytes_per_s`` (the memory-bound terms need it).
    """
    timed = step_time(
        model,
        profile,
        fc,
        batch=batch,
        seq_len=seq_len,
        dp=dp,
        pp=pp,
        micro_batches=micro_batches,
        vpp=vpp,
        zero=zero,
        options=options,
        ep=ep,
        cp=cp,
        work=work,
    )
    micro = batch // (dp * micro_batches)
    tp = fc.tp
    local = seq_len // cp
    work, layout = timed.work, timed.layout
    memory = memory_per_chip(
        model,
        fc.layers,
        micro_batch=micro,
        seq_len=local,
        bytes_per_element=profile.bytes_per_element,
        dp=dp * cp,
        pp=pp,
        tp=tp,
        stage_blocks=layout.most,
        micro_batches=micro_batches,
        zero=zero,
        recompute=options.recompute,
        buffers_bytes=fc.buffers_bytes,
        weight_shards=fc.weight_shards,
        vpp=vpp,
        attention=options.attention,
        ends=True,
        grad_bytes=work.grad_bytes,
        token_shards=fc.token_shards,
        side_params=work.moe.dense_params,
        expert_params=work.moe.expert_params,
        ep=ep,
        copies=timed.copies,
        precision=options.precision,
    )
    exact = (exact_layers or fc.layers) if cp == 1 else full_layers(model, micro, seq_len, ep)
    flops = model_flops(model, micro, seq_len, exact) * dp * micro_batches
    return StepCost(
        split=timed.split,
        memory=memory,
        layout=layout,
        model_flops=flops,
        hardware_flops=flops
        + recompute_flops(model, options, exact, micro, seq_len) * dp * micro_batches,
        dp_block_s=timed.dp_block_s,
        dp_end_s=timed.dp_end_s,
        pace_blocks=timed.pace_blocks,
        bubble_fraction=timed.bubble_fraction,
        copies=timed.copies,
        chips=dp * pp * tp * cp,
        tokens=batch * seq_len,
    )


def recompute_flops(
    model: ModelSpec,
    options: StepOptions,
    layers: Sequence[FcLayer],
    micro_batch: int,
    seq_len: int,
) -> float:
    """FLOPs run again per micro-batch, all chips of a replica (module docstring): blocks ·
    (full: Σ 2·T·in·out + A; selective with plain attention: A; fused attention: + A / 2),
    A = ``4·b·H·s²·d`` the attention forward in the model-FLOP convention."""
    forward = attention_core(model, micro_batch, seq_len, 1, 0, kind="plain").fwd_flops
    extra = forward / 2 if options.attention == "fused" else 0.0
    if options.recompute == "full":
        extra += forward + sum(layer.flops_per_pass for layer in layers)
    elif options.recompute == "selective" and options.attention == "plain":
        extra += forward
    return model.blocks * extra
