"""Memory per chip of one training step: model state, activations, communication buffers.

Pure functions (numbers in, numbers out). A chip of a cluster of DP replicas × PP pipeline
stages × a P_r × P_c tensor-parallel mesh (TP = P_r · P_c chips) holds, for the
``stage_blocks`` transformer blocks of its pipeline stage:

* **Model state** (Rajbhandari et al., "ZeRO", SC'20, §3.1): mixed-precision Adam keeps
  bf16/fp16 weights (2 bytes per parameter), their gradients (2 bytes) and fp32 optimizer state
  (master weights, momentum, variance: K = 12 bytes), 16 bytes per parameter in all. 2D TP
  shards every weight matrix over all TP chips (MeshSlice §2.3, W over mesh rows and columns),
  so a chip holds ``stage parameters / TP`` of each. ZeRO stage 1 (P_os, ZeRO §5.1) also shards
  the optimizer state over the DP replicas, stage 2 (P_os+g) the gradients too, stage 3
  (P_os+g+p, FSDP) the weights too; stage 3 then holds one block's weights gathered at a time,
  double-buffered for the prefetch (counted with the buffers). Weight and gradient bytes are
  the profile's operand width (``bytes_per_element``). The first stage holds the embedding
  (V·h over TP), the last the LM head (V·h over TP, untied), with their state.
* **Activations kept for the backward pass** (Korthikanti et al., "Reducing Activation
  Recomputation in Large Transformer Models", MLSys 2023, §4.1 eq. 1): per transformer layer
  ``s·b·h·(34 + 5·a·s/h)`` bytes for a GPT block (2-byte values, 1-byte dropout masks). The 34
  is, with T = s·b tokens, ``11·T·h`` for attention (the QKV input 2h, Q, K, V 6h, the
  attention output 2h, a dropout mask h), ``19·T·h`` for the MLP (its input 2h, the activation's
  input 8h and output 8h, a dropout mask h) and ``4·T·h`` for the two layer-norm inputs; the
  5·a·s²·b is the attention scores (softmax output 2, dropout mask 1, dropout output 2 bytes).
  :func:`block_activation_bytes` writes the same terms with the model's own widths (GQA's
  narrower K and V, SwiGLU's gate), so a GPT block gives exactly eq. 1. Tensor plus sequence
  parallelism divides everything by t (§4.2.2, eq. 4); 2D TP shards every stored activation
  over all TP chips, so it divides by TP. Recompute modes (§5): ``"none"`` keeps all of
  eq. 1 (fused attention never stores the scores, so it keeps the selective amount);
  ``"selective"`` recomputes the attention core and keeps ``34·s·b·h/t`` (the default);
  ``"full"`` keeps only each block's input (``2·s·b·h/t``) and rebuilds one block's
  activations at a time during the backward pass. Under the 1F1B pipeline schedule
  (Narayanan et al., SC'21, §2.2) the first stage holds ``min(micro-batches, PP)`` micro-batches
  in flight; the interleaved schedule with v virtual stages multiplies that by
  ``1 + (PP − 1) / (PP · v)`` (Korthikanti et al. §4.2.3). The last stage keeps one
  micro-batch's fp32 logits, ``4·T·V / TP`` bytes.
* **Communication buffers**: each pass receives gathered sub-shards (MeshSlice §3.1, Figure 5:
  an all-gather fills ``ring · shard`` bytes, a reduce-scatter reduces from as many) while the
  previous iteration computes, so the largest buffer per mesh axis is double-buffered.

The memory of a split is that of its fuller end stage: the first (embedding, the most
activations) or the last (LM head, logits), each counted with the most blocks any stage holds.
A plan keeps a headroom (default 10 % of capacity) free for allocator fragmentation and
framework workspaces (:func:`meshtune.step.memory.usable_bytes`).

FP8 training (``precision="fp8"``) keeps 8 bytes of optimizer state per parameter and caches
the linear layers' inputs narrower (:mod:`meshtune.step.precision`, DeepSeek-V3 §3.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Literal

from meshtune.cost.compute import DEFAULT_PRECISION, Precision
from meshtune.cost.schedule import AXES, Comm
from meshtune.hardware.links import CollectiveKind
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec
from meshtune.step.precision import activation_widths, optimizer_bytes_per_param
from meshtune.step.work import LOGIT_BYTES, MASK_BYTES, AttentionKind

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_MODES: tuple[Recompute, ...] = ("none", "selective", "full")

OPTIMIZER_BYTES_PER_PARAM = 12  # ZeRO §3.1: fp32 master weights, momentum, variance (K = 12)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one chip holds during a training step, by term."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float
    logits_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        """The sum of the terms."""
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.buffers_bytes
            + self.logits_bytes
        )

    def terms(self) -> dict[str, float]:
        """{term name: bytes}, names without the ``_bytes`` suffix, in field order."""
        return {f.name.removesuffix("_bytes"): getattr(self, f.name) for f in fields(self)}

    def biggest(self) -> tuple[str, float]:
        """The largest term (name, bytes); ties go to the earlier term."""
        terms = self.terms()
        name = max(terms, key=lambda k: terms[k])
        return name, terms[name]


def block_parameters(layers: Sequence[FcLayer]) -> int:
    """Parameters of one block's FC layers: Σ in · out."""
    return sum(layer.w_elements for layer in layers)


def state_bytes(
    params_per_chip: float,
    bytes_per_element: int,
    dp: int,
    zero: int,
    grad_bytes: int | None = None,
    optimizer_bytes: int = OPTIMIZER_BYTES_PER_PARAM,
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes of ``params_per_chip`` parameters.

    weights = params · bytes_per_element, gradients = params · ``grad_bytes`` (4 when they are
    accumulated in fp32, as Megatron-LM's main_grad buffer does under bf16; None: the operand
    width), optimizer = params · ``optimizer_bytes`` (12; 8 in FP8 training); ZeRO stage
    ``zero`` ≥ 1 divides the optimizer by ``dp``, ≥ 2 the gradients, 3 the weights (ZeRO §3.1,
    §5).
    """
    weights = params_per_chip * bytes_per_element
    gradients = params_per_chip * (bytes_per_element if grad_bytes is None else grad_bytes)
    optimizer = params_per_chip * optimizer_bytes
    return (
        weights / (dp if zero >= 3 else 1),
        gradients / (dp if zero >= 2 else 1),
        optimizer / (dp if zero >= 1 else 1),
    )


def usable_bytes(capacity: float, headroom: float) -> float:
    """The part of ``capacity`` a plan may fill: ``capacity · (1 − headroom)``."""
    return capacity * (1.0 - headroom)


def interleave_factor(pp: int, vpp: int) -> float:
    """Extra activations of the first stage under the interleaved schedule:
    ``1 + (pp − 1) / (pp · v)`` for v > 1, else 1 (Korthikanti et al. §4.2.3)."""
    return 1.0 + (pp - 1) / (pp * vpp) if vpp > 1 else 1.0


def in_flight(micro_batches: int, pp: int, vpp: int = 1, copies: int = 1) -> float:
    """Micro-batches whose activations the first stage holds: ``min(m, pp) ·
    interleave_factor(pp, vpp)``, or ``pp + 1`` under DualPipe (``copies = 2``)."""
    return min(micro_batches, pp) * interleave_factor(pp, vpp) if copies == 1 else pp + 1


def block_activation_bytes(
    model: ModelSpec,
    micro_batch: int,
    seq_len: int,
    bytes_per_element: int,
    recompute: Recompute,
    attention: AttentionKind = "plain",
    precision: Precision = DEFAULT_PRECISION,
) -> float:
    """Bytes one block keeps for the backward pass of one micro-batch, before any sharding.

    With T = micro_batch · seq_len tokens, e = ``bytes_per_element``, widths from ``model``
    (qkv = (heads + 2·kv_heads)·head_dim, attn = heads·head_dim, up = ffn or 2·ffn for SwiGLU):

    * ``"selective"``: T·(e·h + e·qkv + e·attn + h)  [attention]
      + T·(e·h + e·up + e·ffn + h)  [MLP] + 2·e·T·h  [layer norms]; 34·T·h for GPT-3;
    * ``"none"``: that plus (2·e + 1)·heads·seq_len·T  [attention scores]: eq. 1's 5·a·s²·b,
      with ``attention="plain"`` only (fused attention never stores the scores);
    * ``"full"``: e·T·h, the block's input.

    The h-wide terms (the e·h inputs of QKV and of the MLP, the two 1-byte dropout masks, the
    layer norms) are :func:`residual_activation_bytes`; the rest is added here. In FP8
    training the e of ``attn``, ``up`` and ``ffn`` are those of
    :func:`meshtune.step.precision.activation_widths` (1.5, 1 + 4/128 and 0 bytes).
    """
    e = bytes_per_element
    tokens = micro_batch * seq_len
    kept = residual_activation_bytes(model, micro_batch, seq_len, e, recompute, precision)
    if recompute == "full":
        return kept
    w = activation_widths(precision, e)
    qkv = (model.heads + 2 * model.kv_heads) * model.head_dim
    attn = model.heads * model.head_dim
    up = model.ffn_hidden * (2 if model.mlp == "swiglu" else 1)
    kept += tokens * (
        e * qkv
        + w.attention_output * attn
        + w.activation_input * up
        + w.activation_output * model.ffn_hidden
    )
    if recompute == "none" and attention == "plain":
        kept += (2 * e + MASK_BYTES) * model.heads * seq_len * tokens
    return float(kept)


def residual_activation_bytes(
    model: ModelSpec,
    micro_batch: int,
    seq_len: int,
    bytes_per_element: int,
    recompute: Recompute,
    precision: Precision = DEFAULT_PRECISION,
) -> float:
    """The part of :func:`block_activation_bytes` that lives on the residual stream (h wide):
    the two layer-norm inputs and outputs and the two dropout masks, ``T·h·(4·e + 2)`` (10·T·h
    for bf16, the replicated term of Korthikanti et al. eq. 2), or the block input ``e·T·h``
    under ``"full"`` recompute. Without sequence parallelism every TP chip keeps it whole. In
    FP8 training the two layer-norm outputs (the QKV and MLP inputs) are cached in FP8:
    ``T·h·(2·(1 + 4/128) + 2·e + 2)`` (:mod:`meshtune.step.precision`)."""
    tokens_h = micro_batch * seq_len * model.hidden
    if recompute == "full":
        return float(bytes_per_element * tokens_h)
    fc_input = activation_widths(precision, bytes_per_element).fc_input
    return float(tokens_h * (2 * fc_input + 2 * bytes_per_element + 2 * MASK_BYTES))


def activation_bytes(
    model: ModelSpec,
    micro_batch: int,
    seq_len: int,
    bytes_per_element: int,
    recompute: Recompute,
    *,
    stage_blocks: int,
    in_flight: float,
    tp: int,
    attention: AttentionKind = "plain",
    token_shards: int | None = None,
    precision: Precision = DEFAULT_PRECISION,
) -> float:
    """Activation bytes per chip: blocks × micro-batches in flight × one block's, over TP.

    ``stage_blocks · in_flight · block(recompute) / tp``; with ``"full"`` recompute, plus one
    block's selective working set ``block("selective") / tp`` rebuilt during the backward pass.
    With ``token_shards`` (Megatron without sequence parallelism: 1) the residual-stream part
    (:func:`residual_activation_bytes`) is divided by it instead of ``tp``: eq. 2's
    ``s·b·h·(10 + 24/t + 5·a·s/(h·t))`` rather than eq. 4's ``s·b·h·(34 + 5·a·s/h)/t``.
    """
    per_block = _block_bytes(
        model, micro_batch, seq_len, bytes_per_element, recompute, attention, precision
    )
    shards = tp if token_shards is None else token_shards
    return _spread(per_block, stage_blocks * in_flight, tp, shards)


def _spread(
    per_block: tuple[float, float, float, float], blocks: float, tp: int, shards: int
) -> float:
    """:func:`activation_bytes` from :func:`_block_bytes` and blocks × micro-batches in
    flight."""
    kept, residual, rebuilt, rebuilt_residual = per_block
    total = blocks * kept + rebuilt
    whole = blocks * residual + rebuilt_residual
    return (total - whole) / tp + whole / shards


@lru_cache(maxsize=4096)
def _block_bytes(
    model: ModelSpec,
    micro_batch: int,
    seq_len: int,
    bytes_per_element: int,
    recompute: Recompute,
    attention: AttentionKind,
    precision: Precision,
) -> tuple[float, float, float, float]:
    """One block's kept bytes and their residual-stream part for one micro-batch
    (:func:`block_activation_bytes`, :func:`residual_activation_bytes`), then those of the
    selective working set that ``"full"`` recompute rebuilds (0 otherwise). Cached: the
    cluster search asks for the same micro-batches for many splits."""
    e = bytes_per_element
    kept = block_activation_bytes(model, micro_batch, seq_len, e, recompute, attention, precision)
    residual = residual_activation_bytes(model, micro_batch, seq_len, e, recompute, precision)
    if recompute != "full":
        return kept, residual, 0.0, 0.0
    return (
        kept,
        residual,
        block_activation_bytes(model, micro_batch, seq_len, e, "selective", precision=precision),
        residual_activation_bytes(model, micro_batch, seq_len, e, "selective", precision),
    )


def comm_buffer_bytes(passes: Iterable[Sequence[Comm]]) -> float:
    """Double-buffered receive space of the busiest pass: 2 · max over passes of Σ over axes
    of the largest buffer of one communication on that axis.

    An all-gather or reduce-scatter on a ring of P chips holds ``P · step_bytes`` (the gathered
    sub-shard, or the partial sums it reduces); a send-recv shift holds ``step_bytes``.
    """
    worst = 0.0
    for comms in passes:
        per_axis = [0.0] * AXES
        for comm in comms:
            held = comm.step_bytes * (1 if comm.kind is CollectiveKind.SEND_RECV else comm.ring)
            per_axis[comm.axis] = max(per_axis[comm.axis], held)
        worst = max(worst, sum(per_axis))
    return 2.0 * worst


def memory_per_chip(
    model: ModelSpec,
    layers: Sequence[FcLayer],
    *,
    micro_batch: int,
    seq_len: int,
    bytes_per_element: int,
    dp: int,
    pp: int,
    tp: int,
    stage_blocks: int,
    micro_batches: int,
    zero: int,
    recompute: Recompute,
    buffers_bytes: float = 0.0,
    weight_shards: int | None = None,
    vpp: int = 1,
    attention: AttentionKind = "plain",
    ends: bool = False,
    grad_bytes: int | None = None,
    token_shards: int | None = None,
    side_params: float = 0.0,
    expert_params: float = 0.0,
    ep: int = 1,
    copies: int = 1,
    precision: Precision = DEFAULT_PRECISION,
) -> MemoryBreakdown:
    """Every term of the module docstring for one chip of the fuller end stage.

    Block parameters per chip = ``stage_blocks · Σ in·out (layers) / weight_shards`` (``tp``
    unless given: a 2.5D mesh of depth d shards the weights over tp / d chips and replicates
    them over depth, Tesseract §3.1); micro-batches in flight on the first stage =
    ``min(micro_batches, pp) · interleave_factor(pp, vpp)``. With ``ends`` the first stage also
    holds the embedding and the last the LM head (``V·h / tp`` parameters each) and its logits;
    the larger of the two is returned (one stage holds both when pp = 1). ``layers`` are one
    block's FC layers as costed (padded sizes when a dimension was padded to divide over the
    mesh); ``grad_bytes`` as in :func:`state_bytes`, ``token_shards`` as in
    :func:`activation_bytes`. ``side_params`` and ``expert_params``: a MoE / MLA block's
    weight elements per chip beyond ``layers`` (:class:`meshtune.step.moe.MoeBlock`); the
    expert ones have their state split over the ``dp / ep`` replicas of each expert.
    ``copies = 2``: DualPipe (:mod:`meshtune.step.pipeline`): every chip holds two stages' model
    state (its stage of each copy of the model; the end chips the embedding and the LM head
    both) and ``pp + 1`` micro-batches' activations of one stage (DeepSeek-V3 Table 2).
    ``precision``: the optimizer state and the cached activations of FP8 training
    (:mod:`meshtune.step.precision`).
    """
    e = bytes_per_element
    optimizer_bytes = optimizer_bytes_per_param(precision)
    held = copies * stage_blocks  # blocks whose state the chip holds
    block = block_parameters(layers) / (weight_shards or tp) + side_params
    params = held * block
    experts = state_bytes(held * expert_params, e, dp // ep, zero, grad_bytes, optimizer_bytes)
    end_params = model.vocab * model.hidden / tp if ends else 0.0
    flight = in_flight(micro_batches, pp, vpp, copies)
    if zero >= 3:  # one block's weights gathered over DP, double-buffered (prefetch)
        buffers_bytes += 2 * (block + expert_params) * e
    logits = LOGIT_BYTES * micro_batch * seq_len * model.vocab / tp if ends else 0.0
    per_block = _block_bytes(model, micro_batch, seq_len, e, recompute, attention, precision)
    shards = tp if token_shards is None else token_shards

    def stage(end_params: float, flight: float, logits: float) -> MemoryBreakdown:
        weights, gradients, optimizer = state_bytes(
            params + end_params, e, dp, zero, grad_bytes, optimizer_bytes
        )
        return MemoryBreakdown(
            weights + experts[0],
            gradients + experts[1],
            optimizer + experts[2],
            _spread(per_block, stage_blocks * flight, tp, shards),
            buffers_bytes,
            logits,
        )

    if pp == 1 or copies > 1:
        return stage(2 * end_params, flight, logits)
    first = stage(end_params, flight, 0.0)
    last = stage(end_params, 1.0, logits)
    return last if last.total_bytes > first.total_bytes else first


def fits(memory: MemoryBreakdown, capacity: float | None, headroom: float = 0.0) -> bool:
    """Whether ``memory`` fits in ``capacity · (1 − headroom)`` bytes (always without a
    capacity)."""
    return capacity is None or memory.total_bytes <= usable_bytes(capacity, headroom)


def over_capacity(
    memory: MemoryBreakdown, capacity: float | None, headroom: float = 0.0
) -> str | None:
    """Why ``memory`` does not fit in ``capacity · (1 − headroom)`` bytes (naming the biggest
    term), or None."""
    if capacity is None or fits(memory, capacity, headroom):
        return None
    name, size = memory.biggest()
    kept = f" less the {headroom:.0%} headroom" if headroom else ""
    return (
        f"needs {memory.total_bytes / 2**30:.1f} GiB per chip, over the "
        f"{capacity / 2**30:.1f} GiB capacity{kept}; biggest term {name} {size / 2**30:.1f} GiB"
    )
