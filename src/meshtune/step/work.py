"""The work of one training step on one chip beside the FC GeMMs: pure cost functions.

Each function prices one micro-batch of ``micro_batch`` sequences of ``seq_len`` tokens
(T = micro_batch · seq_len) on one chip of a tensor-parallel group of ``tp`` chips, as a
:class:`Work`: FLOPs and HBM bytes of the forward pass and of the backward pass. Widths come
from the model: h hidden, H query heads of width d, F the MLP's inner width, V the vocabulary,
e = ``bytes_per_element``. Every activation is split over the ``tp`` chips (heads over TP for
the attention core, the 2D sharding of X and Y for the rest; MeshSlice §4.4, Korthikanti et al.
2022 §4.2.2), so each chip does ``1/tp`` of the work. Times: FLOPs / ``effective_flops_per_s``,
bytes / ``hbm_bytes_per_s`` (:func:`hbm_bandwidth`), except the LM head, a GeMM priced with the
profile's GeMM model (:func:`meshtune.cost.compute.gemm_time`, its efficiency curve included).
Every formula takes scalars or NumPy arrays alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from meshtune.cost.compute import gemm_time
from meshtune.errors import ProfileError
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec

AttentionKind = Literal["fused", "plain"]
ATTENTION_KINDS: tuple[AttentionKind, ...] = ("fused", "plain")
DEFAULT_ATTENTION: AttentionKind = "fused"

MASK_BYTES = 1  # a dropout mask keeps one byte per element (Korthikanti et al. 2022 §4.1)
LOGIT_BYTES = 4  # Megatron's vocab-parallel cross-entropy works on fp32 logits
# Adam with mixed precision (ZeRO §3.1 widths): reads the bf16 gradient (2) and the fp32
# master weight, momentum and variance (3 · 4), writes those three (3 · 4) and the bf16 weight
# (2): 28 bytes per parameter of the chip's optimizer shard.
ADAM_BYTES_PER_PARAM = 2 + 3 * 4 + 3 * 4 + 2


@dataclass(frozen=True)
class Work:
    """FLOPs and HBM bytes of one piece of work, forward and backward (one chip)."""

    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(
            self.fwd_flops + other.fwd_flops,
            self.bwd_flops + other.bwd_flops,
            self.fwd_bytes + other.fwd_bytes,
            self.bwd_bytes + other.bwd_bytes,
        )

    @property
    def flops(self) -> float:
        """Forward + backward FLOPs."""
        return self.fwd_flops + self.bwd_flops

    @property
    def memory_bytes(self) -> float:
        """Forward + backward HBM bytes."""
        return self.fwd_bytes + self.bwd_bytes

    def forward_s(self, profile: HardwareProfile) -> float:
        """fwd_flops / F + fwd_bytes / HBM bandwidth."""
        return _seconds(self.fwd_flops, self.fwd_bytes, profile)

    def backward_s(self, profile: HardwareProfile) -> float:
        """bwd_flops / F + bwd_bytes / HBM bandwidth."""
        return _seconds(self.bwd_flops, self.bwd_bytes, profile)

    def total_s(self, profile: HardwareProfile) -> float:
        """forward_s + backward_s."""
        return self.forward_s(profile) + self.backward_s(profile)


def hbm_bandwidth(profile: HardwareProfile) -> float:
    """The profile's ``hbm_bytes_per_s``; :class:`ProfileError` naming the field when absent."""
    if profile.hbm_bytes_per_s is None:
        raise ProfileError(
            f"profile '{profile.name}' has no hbm_bytes_per_s, which the step model's "
            "memory-bound work (layer norms, softmax, optimizer) needs"
        )
    return profile.hbm_bytes_per_s


def _seconds(flops: float, nbytes: float, profile: HardwareProfile) -> float:
    time = flops / profile.effective_flops_per_s
    if nbytes:
        time = time + nbytes / hbm_bandwidth(profile)
    return time


def causal_fraction(seq_len: float, window: int | None) -> float:
    """The share of the s² query-key pairs a causal mask keeps, the window ``w`` (None: ``s``)
    counted: ``(s·w − w²/2) / s²`` with ``w = min(w, s)``, each query seeing at most ``w``
    keys; ``1/2`` without a window (the pairs on the diagonal's side, as the kernel's tiles
    are counted)."""
    w = seq_len if window is None else min(float(window), seq_len)
    return (seq_len * w - w * w / 2) / (seq_len * seq_len)


def attention_core(
    model: ModelSpec,
    micro_batch: float,
    seq_len: float,
    tp: float,
    bytes_per_element: int,
    *,
    kind: AttentionKind = DEFAULT_ATTENTION,
    causal: bool = True,
    dropout: bool = False,
) -> Work:
    """QKᵀ, softmax and ·V of one block (Vaswani et al. 2017; Dao et al., FlashAttention 2022).

    Forward FLOPs ``4·b·H·s²·d / tp`` (two GeMMs per head and sequence, each 2·s·s·d; GQA/MQA
    share K and V between query heads but every query head still multiplies, so the count does
    not depend on kv_heads); the backward pass is twice the forward (dQ, dK from dS; dV, dP).
    ``"fused"`` (FlashAttention): no s² tensor touches HBM (dropout masks are regenerated from
    the RNG state); a causal mask halves the FLOPs (the kernel skips masked tiles); the backward
    recomputes QKᵀ (+ half a forward, FlashAttention §3.1). ``"plain"`` (Megatron SC'21's
    baddbmm, scaled-masked-softmax, dropout, bmm): the full s² scores are computed even under a
    causal mask and every step passes them through HBM. Per score, e bytes per value: forward,
    QKᵀ writes the scores (e), the softmax reads and writes them (2·e), ·V reads the
    probabilities (e): ``4·e``; backward, dP = dO·Vᵀ is written (e), dV = Pᵀ·dO reads P (e),
    the softmax backward reads P and dP and writes dS (3·e), dQ and dK read dS (2·e): ``7·e``.
    With ``dropout`` (attention dropout, Megatron's default 0.1) the probabilities go through
    one more kernel: forward reads and writes them and writes a 1-byte mask (``2·e + 1``),
    backward reads the mask and the gradient and writes one (``2·e + 1``); Korthikanti et al.
    2022 §4.1 keep the same mask and dropout output. All per score ``b·H·s² / tp``.
    A model's ``sliding_window`` w (Mistral 7B §2) narrows what the fused causal kernel
    computes to the tiles inside the window (:func:`causal_fraction`; FlashAttention-2's
    ``window_size``); the plain path masks the full s² scores and its cost does not change.
    """
    scores = micro_batch * model.heads * seq_len * seq_len / tp
    forward = 4 * scores * model.head_dim
    if kind == "fused":
        if causal:
            forward = forward * causal_fraction(seq_len, model.sliding_window)
        return Work(fwd_flops=forward, bwd_flops=2.5 * forward)
    e = bytes_per_element
    drop = (2 * e + MASK_BYTES) if dropout else 0
    return Work(forward, 2 * forward, (4 * e + drop) * scores, (7 * e + drop) * scores)


def elementwise(
    model: ModelSpec,
    micro_batch: float,
    seq_len: float,
    tp: float,
    bytes_per_element: int,
    *,
    dropout: bool = False,
    token_shards: float | None = None,
) -> Work:
    """The memory-bound element-wise work of one block, HBM bytes (no FLOPs counted).

    Each op reads its inputs and writes its output once in the forward pass; the backward pass
    reads the saved input and the incoming gradient and writes one gradient. Per chip, with
    T = b·s tokens:

    * two layer norms: forward ``2·2·e·T·h``, backward ``2·3·e·T·h``;
    * two residual adds (two reads, one write each way): ``2·3·e·T·h`` and ``2·3·e·T·h``;
    * the activation: GELU ``2·e·T·F`` and ``3·e·T·F``; SwiGLU (gate and up in, one out)
      ``3·e·T·F`` and ``5·e·T·F``;
    * with ``dropout``, the two hidden dropouts, fused with the residual add as Megatron does
      (bias-dropout-add): each writes a 1-byte mask forward and reads it backward,
      ``2·T·h`` each way;

    the ``T·F`` terms over ``tp``, the ``T·h`` ones over ``token_shards`` (None: ``tp``; 1 when
    the residual stream is replicated, Megatron without sequence parallelism). Biases and
    rotary embeddings are not counted (each at most one more pass over ``T·h``).
    """
    e = bytes_per_element
    th = micro_batch * seq_len * model.hidden / (tp if token_shards is None else token_shards)
    tf = micro_batch * seq_len * model.ffn_hidden / tp
    act_fwd, act_bwd = (3, 5) if model.mlp == "swiglu" else (2, 3)
    masks = 2 * MASK_BYTES * th if dropout else 0.0
    return Work(
        fwd_bytes=e * (4 * th + 6 * th + act_fwd * tf) + masks,
        bwd_bytes=e * (6 * th + 6 * th + act_bwd * tf) + masks,
    )


def nonfc_block(
    model: ModelSpec, batch: int, seq_len: int, chips: int, profile: HardwareProfile
) -> Work:
    """Every non-FC piece of one block for ``batch`` sequences on ``chips`` chips, as the
    end-to-end estimate of ``meshtune compare`` takes it (MeshSlice §4.4): plain attention with
    no causal savings (:func:`attention_core`) plus :func:`elementwise`. Raises
    :class:`ProfileError` (via :func:`hbm_bandwidth`) when its time is asked of a profile with
    no ``hbm_bytes_per_s``."""
    hbm_bandwidth(profile)
    e = profile.bytes_per_element
    plain = attention_core(model, batch, seq_len, chips, e, kind="plain", causal=False)
    return plain + elementwise(model, batch, seq_len, chips, e)


def embedding(
    model: ModelSpec, micro_batch: float, seq_len: float, tp: float, bytes_per_element: int
) -> Work:
    """The token-embedding lookup on the first stage (vocabulary sharded over TP, Megatron):
    forward reads T rows of the table and writes them (``2·e·T·h / tp``); backward reads the
    gradient and adds it into the table's gradient rows (read + write: ``3·e·T·h / tp``)."""
    th = micro_batch * seq_len * model.hidden / tp
    return Work(fwd_bytes=2 * bytes_per_element * th, bwd_bytes=3 * bytes_per_element * th)


def lm_head_s(
    model: ModelSpec, micro_batch: float, seq_len: float, tp: float, profile: HardwareProfile
) -> tuple[float, float]:
    """(forward, backward) seconds of the LM head on the last stage: the GeMM T × h × V with
    the vocabulary sharded over TP (Megatron's vocab-parallel output layer: ``V / tp`` columns
    per chip), forward ``gemm(T, V/tp, h)``, backward data ``gemm(T, h, V/tp)`` + weight
    ``gemm(h, V/tp, T)`` (:func:`meshtune.cost.compute.gemm_time`). The all-gather of the
    hidden states before it is not priced."""
    tokens = micro_batch * seq_len
    shard = model.vocab / tp
    forward = gemm_time(profile, tokens, shard, model.hidden)
    backward = gemm_time(profile, tokens, model.hidden, shard) + gemm_time(
        profile, model.hidden, shard, tokens
    )
    return forward, backward


def lm_head_flops(model: ModelSpec, micro_batch: float, seq_len: float, tp: float) -> float:
    """FLOPs of the LM head's three GeMMs on one chip: ``3 · 2·T·h·V / tp``."""
    return 6 * micro_batch * seq_len * model.hidden * model.vocab / tp


def cross_entropy(
    model: ModelSpec, micro_batch: float, seq_len: float, tp: float, bytes_per_element: int
) -> Work:
    """The loss over the vocabulary on the last stage, memory-bound on fp32 logits (Megatron's
    vocab-parallel cross-entropy casts to fp32): forward reads the e-byte logits and writes fp32
    ones, then reads them twice (max, Σ exp): ``(e + 3·4)·T·V / tp``; backward reads them and
    writes the gradient: ``2·4·T·V / tp``. The logits' fp32 copy is what the last stage keeps
    (:mod:`meshtune.step.memory`)."""
    logits = micro_batch * seq_len * model.vocab / tp
    return Work(
        fwd_bytes=(bytes_per_element + 3 * LOGIT_BYTES) * logits,
        bwd_bytes=2 * LOGIT_BYTES * logits,
    )


def grad_accumulation_s(
    params: float, bytes_per_element: int, grad_bytes: int, profile: HardwareProfile
) -> float:
    """One micro-batch's separate gradient accumulation over ``params`` parameters,
    memory-bound: the backward pass's e-byte gradient is read and added into a
    ``grad_bytes``-wide accumulator (read and written), ``e + 2·grad_bytes`` bytes per
    parameter. This is the pass a framework runs when the weight-gradient GeMM does not
    accumulate into the buffer itself: DeepSpeed's BF16 optimizer (``update_hp_grads``, fp32
    accumulator; microsoft/DeepSpeed deepspeed/runtime/bf16_optimizer.py @06e39a56), PyTorch
    autograd's accumulation into ``.grad`` and Megatron-LM's DDP hook ``main_grad.add_``
    without ``--gradient-accumulation-fusion`` (NVIDIA/Megatron-LM PR #6943 and AMD-AGI/Primus
    PR #995 describe the pass the fusion removes)."""
    return params * (bytes_per_element + 2 * grad_bytes) / hbm_bandwidth(profile)


def optimizer_s(
    params_shard: float,
    bytes_per_element: int,
    profile: HardwareProfile,
    grad_bytes: int | None = None,
    state_bytes: int = 12,
) -> float:
    """The optimizer step over a chip's shard of ``params_shard`` parameters, memory-bound:
    Adam's ``ADAM_BYTES_PER_PARAM`` = 28 bytes per parameter (reads gradient, fp32 master,
    momentum, variance; writes the three and the e-byte weight; Kingma & Ba 2015, widths of
    ZeRO §3.1) plus the gradient-clipping norm's one read of the gradients (``e`` per
    parameter; the all-reduce of one number is not priced). Gradients of ``grad_bytes`` (fp32:
    4) instead of ``e`` are read twice with that width. ``state_bytes``: the optimizer state per
    parameter (master, momentum, variance), read and written: 12 (fp32), 8 in FP8 training
    (BF16 moments, :func:`meshtune.step.precision.optimizer_bytes_per_param`)."""
    extra = 0 if grad_bytes is None else 2 * (grad_bytes - bytes_per_element)
    extra += 2 * (state_bytes - 12)
    return (
        params_shard * (ADAM_BYTES_PER_PARAM + bytes_per_element + extra) / hbm_bandwidth(profile)
    )
