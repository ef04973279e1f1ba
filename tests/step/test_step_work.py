"""The step model's terms (meshtune.step.work, comms, pipeline) worked by hand for a small model.

The model (test_memory.TINY): 4 blocks, h = 64, H = 4 heads of d = 16, GELU MLP F = 256,
vocabulary V = 100. A micro-batch of b = 2 sequences of s = 32: T = 64 tokens. The profile:
1e12 FLOP/s effective, 2e12 peak, HBM 1e11 B/s, bf16 (e = 2).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from meshtune.errors import ProfileError
from meshtune.hardware.profile import HardwareProfile
from meshtune.step.comms import dp_exposed, fsdp_exposed
from meshtune.step.pipeline import (
    bubble_fraction,
    chunk_blocks,
    interleavings,
    pipeline_slots,
    stage_layout,
)
from meshtune.step.work import (
    ADAM_BYTES_PER_PARAM,
    Work,
    attention_core,
    cross_entropy,
    elementwise,
    embedding,
    grad_accumulation_s,
    hbm_bandwidth,
    lm_head_flops,
    lm_head_s,
    optimizer_s,
)
from test_memory import TINY


@pytest.fixture(name="profile")
def _profile(make_profile: Callable[..., HardwareProfile]) -> HardwareProfile:
    return make_profile(hbm_bytes_per_s=1e11)


def test_attention_core_plain_fused_and_causal() -> None:
    # Scores per chip over TP 4: b·H·s²/tp = 2·4·32·32/4 = 2048; forward 4·2048·16 = 131,072.
    # Plain: the scores pass HBM 4·e bytes each forward (QKᵀ writes, softmax reads and writes,
    # ·V reads) and 7·e backward (dP written, P read for dV, softmax backward 3, dQ / dK 2).
    plain = attention_core(TINY, 2, 32, 4, 2, kind="plain")
    assert plain == Work(131_072, 262_144, 4 * 2 * 2048, 7 * 2 * 2048)
    # Attention dropout: one more kernel each way, 2·e + a 1-byte mask per score.
    dropped = attention_core(TINY, 2, 32, 4, 2, kind="plain", dropout=True)
    assert dropped.fwd_bytes - plain.fwd_bytes == (2 * 2 + 1) * 2048
    assert dropped.bwd_bytes - plain.bwd_bytes == (2 * 2 + 1) * 2048
    # FlashAttention regenerates its dropout mask: no bytes either way.
    fused_dropout = attention_core(TINY, 2, 32, 4, 2, kind="fused", dropout=True)
    assert fused_dropout.memory_bytes == 0.0
    # Fused and causal: half the forward, 2.5 forwards backward (QKᵀ recomputed), no bytes.
    fused = attention_core(TINY, 2, 32, 4, 2, kind="fused", causal=True)
    assert fused == Work(65_536, 163_840, 0.0, 0.0)
    assert attention_core(TINY, 2, 32, 4, 2, kind="fused", causal=False).fwd_flops == 131_072
    # GQA: the kv heads do not change the core's FLOPs.
    gqa = TINY.model_copy(update={"kv_heads": 1})
    assert attention_core(gqa, 2, 32, 4, 2, kind="plain") == plain


def test_elementwise_bytes_by_hand() -> None:
    # T·h/tp = 64·64/4 = 1024, T·F/tp = 4096; e = 2.
    work = elementwise(TINY, 2, 32, 4, 2)
    assert work.fwd_bytes == 2 * (4 * 1024 + 6 * 1024 + 2 * 4096)
    assert work.bwd_bytes == 2 * (6 * 1024 + 6 * 1024 + 3 * 4096)
    swiglu = elementwise(TINY.model_copy(update={"mlp": "swiglu"}), 2, 32, 4, 2)
    assert swiglu.memory_bytes - work.memory_bytes == 2 * 3 * 4096
    # Hidden dropout: two 1-byte masks over T·h/tp, written forward and read backward.
    dropped = elementwise(TINY, 2, 32, 4, 2, dropout=True)
    assert dropped.fwd_bytes - work.fwd_bytes == 2 * 1024
    assert dropped.bwd_bytes - work.bwd_bytes == 2 * 1024
    # Without sequence parallelism the residual stream is whole on every chip (T·h = 4096)
    # while the MLP's activation stays split (T·F/tp = 4096).
    replicated = elementwise(TINY, 2, 32, 4, 2, token_shards=1)
    assert replicated.fwd_bytes == 2 * (4 * 4096 + 6 * 4096 + 2 * 4096)
    assert replicated.bwd_bytes == 2 * (6 * 4096 + 6 * 4096 + 3 * 4096)


def test_work_times_need_hbm(profile: HardwareProfile, round_profile: HardwareProfile) -> None:
    work = Work(1e9, 2e9, 1e8, 3e8)
    assert work.forward_s(profile) == pytest.approx(1e9 / 1e12 + 1e8 / 1e11)
    assert work.total_s(profile) == pytest.approx(3e9 / 1e12 + 4e8 / 1e11)
    assert Work(1e9).forward_s(round_profile) == 1e-3  # no bytes: no bandwidth needed
    with pytest.raises(ProfileError, match="no hbm_bytes_per_s"):
        work.total_s(round_profile)
    with pytest.raises(ProfileError, match="'round'"):
        hbm_bandwidth(round_profile)


def test_embedding_head_and_loss(profile: HardwareProfile) -> None:
    assert embedding(TINY, 2, 32, 4, 2) == Work(fwd_bytes=2 * 2 * 1024, bwd_bytes=3 * 2 * 1024)
    # LM head: T = 64, V/tp = 25, h = 64; three GeMMs of 2·64·25·64 = 204,800 FLOPs.
    forward, backward = lm_head_s(TINY, 2, 32, 4, profile)
    assert forward == pytest.approx(204_800 / 1e12)
    assert backward == pytest.approx(2 * 204_800 / 1e12)
    assert lm_head_flops(TINY, 2, 32, 4) == 3 * 204_800
    # Loss on T·V/tp = 1600 fp32 logits: (2 + 12)·1600 forward, 8·1600 backward.
    assert cross_entropy(TINY, 2, 32, 4, 2) == Work(fwd_bytes=14 * 1600, bwd_bytes=8 * 1600)


def test_lm_head_follows_the_gemm_efficiency_curve(
    make_profile: Callable[..., HardwareProfile],
) -> None:
    curve = {"overhead_s": 1e-6, "curve": [{"flops": 1.0, "efficiency": 0.5}]}
    slow = make_profile(gemm_efficiency=curve)
    forward, _ = lm_head_s(TINY, 2, 32, 4, slow)
    assert forward == pytest.approx(1e-6 + 204_800 / (1e12 * 0.5))


def test_optimizer_is_adam_bytes_over_hbm(profile: HardwareProfile) -> None:
    # 28 bytes of Adam + 2 of the gradient-norm read per parameter.
    assert ADAM_BYTES_PER_PARAM == 28
    assert optimizer_s(1e6, 2, profile) == pytest.approx(30e6 / 1e11)


def test_gradient_accumulation_reads_the_gradient_and_updates_the_buffer(
    profile: HardwareProfile,
) -> None:
    # bf16 gradient read (2) + fp32 buffer read and write (2 · 4); fp16 into fp16: 2 + 2 · 2.
    assert grad_accumulation_s(1e6, 2, 4, profile) == pytest.approx(10e6 / 1e11)
    assert grad_accumulation_s(1e6, 2, 2, profile) == pytest.approx(6e6 / 1e11)


def test_terms_take_arrays() -> None:
    batches = np.array([1.0, 2.0, 4.0])
    work = attention_core(TINY, batches, 32, 4, 2, kind="plain")
    assert np.allclose(work.fwd_flops, 131_072 * batches / 2)
    assert np.allclose(elementwise(TINY, batches, 32, 4, 2).fwd_bytes, 2 * 18_432 * batches / 2)


def test_dp_tail_and_fsdp_exposure() -> None:
    assert dp_exposed(1.0, 2.0, 4) == 1.0
    assert dp_exposed(3.0, 1.0, 4) == 9.0  # L·t_r − (L − 1)·t_b = 12 − 3
    assert dp_exposed(0.0, 1.0, 4) == 0.0
    assert dp_exposed(1.0, 2.0, 4, overlap=False) == 4.0  # every block's reduction shows
    assert fsdp_exposed(1.0, 1.0, 2.0, 3.0) == 0.0  # hidden by compute
    assert fsdp_exposed(3.0, 1.0, 2.0, 3.0) == 1.0 + 1.0
    # A recomputed forward that gathers again: 2·3 + 1 − 3 in the backward.
    assert fsdp_exposed(3.0, 1.0, 2.0, 3.0, backward_gathers=2) == 1.0 + 4.0


def test_stage_layouts_keep_whole_blocks_and_lighten_the_ends() -> None:
    assert chunk_blocks(10, 4) == (2, 3, 3, 2)
    assert chunk_blocks(5, 1) == (5,)
    assert stage_layout(10, 4).blocks == (2, 3, 3, 2)
    # v = 2: 8 chunks of 12 blocks (1 or 2 each), chunk c on chip c mod 4.
    layout = stage_layout(12, 4, 2)
    assert chunk_blocks(12, 8) == (1, 2, 2, 2, 2, 1, 1, 1)
    assert layout.blocks == (1 + 2, 2 + 1, 2 + 1, 2 + 1)
    assert (layout.most, layout.fewest, layout.pp) == (3, 3, 4)


def test_interleaving_follows_megatron() -> None:
    assert interleavings(96, 8, 16) == [1, 2, 3, 4, 6, 12]
    assert interleavings(96, 8, 12) == [1]  # m not a multiple of pp
    # Blocks not a multiple of pp: chunks of 2 or 3 blocks (v = 1, 2), as Llama 3's 126
    # blocks on 16 stages ran; v = 3 would leave a chunk empty.
    assert interleavings(10, 4, 8) == [1, 2]
    assert stage_layout(10, 4, 2).blocks == (2, 3, 3, 2)
    assert interleavings(126, 16, 16) == [1, 2, 3, 4, 5, 6, 7]
    assert interleavings(3, 4, 8) == [1]  # fewer blocks than stages
    assert interleavings(96, 1, 8) == [1]
    assert pipeline_slots(8, 16, 4) == 16 + 7 / 4
    assert bubble_fraction(8, 16, 4) == pytest.approx((7 / 4) / (16 + 7 / 4))
