"""One block's work on one chip for one micro-batch, and the ends'.

The part of :func:`meshtune.step.model.price_step` that depends on the mesh level (its
:class:`~meshtune.step.block.BlockFc`), the micro-batch, CP, EP and the step options other than
the ZeRO stage, and on neither DP nor PP: the attention core, the memory-bound work, recompute,
the MoE terms, the CP ring, the embedding, the LM head and the loss (the module docstring of
:mod:`meshtune.step.model` gives the formulas). The cluster search prices many splits of one
micro-batch on one mesh level, so it prices this once (:class:`BlockWork`) and passes it to
``price_step``.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec
from meshtune.step.cp import ring_attention_s
from meshtune.step.memory import block_parameters
from meshtune.step.moe import MoeBlock, moe_block
from meshtune.step.options import StepOptions
from meshtune.step.work import (
    Work,
    attention_core,
    cross_entropy,
    elementwise,
    embedding,
    grad_accumulation_s,
    lm_head_s,
)

GRAD_FP32_BYTES = 4


@dataclass(frozen=True)
class BlockWork:
    """One block of one micro-batch on one chip, and the ends (:func:`block_work`).

    ``forward_s`` and ``backward_s``: the block's passes (FC, attention, memory-bound work,
    recompute, MoE, the CP ring), the backward before gradient accumulation, whose time is
    ``accumulation_s`` (0 when fused); ``block_params`` and ``end_params``: weight elements
    per chip of a block (dense and side GeMMs) and of the embedding (or the LM head);
    ``grad_bytes``: the width gradients are reduced at; ``embedding_s`` and ``head_s``: the
    first chip's embedding and the last chip's LM head and loss, their accumulation
    included."""

    attention: Work
    recompute_s: float
    moe: MoeBlock
    ring: tuple[float, float]
    forward_s: float
    backward_s: float
    accumulation_s: float
    block_params: float
    end_params: float
    grad_bytes: int
    embedding_s: float
    head_s: float


def block_work(
    model: ModelSpec,
    profile: HardwareProfile,
    fc: BlockFc,
    *,
    micro_batch: int,
    seq_len: int,
    cp: int,
    ep: int,
    options: StepOptions,
) -> BlockWork:
    """The :class:`BlockWork` of ``micro_batch`` sequences of ``seq_len`` tokens (``seq_len /
    cp`` on each CP rank) on ``fc``'s mesh, with ``ep`` expert-parallel ranks: the same at every
    ZeRO stage."""
    micro, tp, e = micro_batch, fc.tp, profile.bytes_per_element
    local = seq_len // cp  # tokens of a sequence on one CP rank
    attn = attention_core(
        model,
        micro,
        seq_len,
        tp * cp,
        e,
        kind=options.attention,
        dropout=options.dropout,
    )
    elem = elementwise(
        model, micro, local, tp, e, dropout=options.dropout, token_shards=fc.token_shards
    )
    recompute = recompute_s(options, fc, attn, elem, profile)
    moe = moe_block(
        model,
        profile,
        fc.layers,
        micro_batch=micro,
        seq_len=local,
        tp=tp,
        weight_shards=fc.weight_shards,
        ep=ep,
        precision=options.precision,
    )
    ring = ring_attention_s(
        model,
        profile,
        attn,
        micro_batch=micro,
        seq_len=seq_len,
        tp=tp,
        cp=cp,
        comm=options.cp_comm,
    )
    forward = fc.forward_s + attn.forward_s(profile) + elem.forward_s(profile) + moe.forward_s
    backward = (
        fc.backward_s + attn.backward_s(profile) + elem.backward_s(profile) + recompute
    ) + moe.backward_s
    block_params = block_parameters(fc.layers) / fc.weight_shards + moe.dense_params
    end_params = model.vocab * model.hidden / tp
    grad_bytes = GRAD_FP32_BYTES if options.fp32_grads else e
    accumulation = 0.0
    emb_s = embedding(model, micro, local, tp, e).total_s(profile)
    head_s = sum(lm_head_s(model, micro, local, tp, profile)) + cross_entropy(
        model, micro, local, tp, e
    ).total_s(profile)
    if options.grad_accumulation == "separate":
        accumulation = grad_accumulation_s(block_params + moe.expert_params, e, grad_bytes, profile)
        end_accumulation = grad_accumulation_s(end_params, e, grad_bytes, profile)
        emb_s, head_s = emb_s + end_accumulation, head_s + end_accumulation
    return BlockWork(
        attention=attn,
        recompute_s=recompute,
        moe=moe,
        ring=ring,
        forward_s=forward + ring[0],
        backward_s=backward + ring[1],
        accumulation_s=accumulation,
        block_params=block_params,
        end_params=end_params,
        grad_bytes=grad_bytes,
        embedding_s=emb_s,
        head_s=head_s,
    )


def recompute_s(
    options: StepOptions, fc: BlockFc, attn: Work, elem: Work, profile: HardwareProfile
) -> float:
    """One block's recompute time, one micro-batch (:mod:`meshtune.step.model`'s docstring)."""
    if options.recompute == "full":
        return fc.forward_s + attn.forward_s(profile) + elem.forward_s(profile)
    if options.recompute == "selective" and options.attention == "plain":
        return attn.forward_s(profile)
    return 0.0


@dataclass(frozen=True)
class BlockFc:
    """One block's FC GeMMs on the mesh for one micro-batch (phase 2's answer), one chip.

    ``tp``: the mesh's chips (every activation is split over them); ``forward_s`` and
    ``backward_s``: Σ over the layers of the forward / backward-data + backward-weight pass
    times; ``exposed_s``: the TP communication in them not hidden by compute; ``layers``: the
    layers as costed (padded sizes); ``weight_shards``: chips one weight is split over (TP, or
    TP / depth for 2.5D); ``buffers_bytes``: communication buffers; ``token_shards``: chips
    the residual stream between the FC pairs is split over (None: all ``tp``, as the 2D
    algorithms and Megatron with sequence parallelism keep it; 1: replicated, Megatron without
    it, so the layer norms, dropouts and residual adds run whole on every chip: Korthikanti et
    al. 2022 §4.2.2)."""

    tp: int
    forward_s: float
    backward_s: float
    exposed_s: float
    layers: tuple[FcLayer, ...]
    weight_shards: int
    buffers_bytes: float = 0.0
    token_shards: int | None = None
