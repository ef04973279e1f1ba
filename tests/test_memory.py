"""Memory per chip (meshtune.memory) against hand-worked figures for a small model.

The model: 4 blocks, h = 64, 4 heads of 16, GELU MLP of 256, sequences of 32. One block has
12·h² = 49,152 FC parameters (QKV 64·192, attention out 64·64, MLP up 64·256, down 256·64).
"""

from __future__ import annotations

import pytest

from meshtune.cost.schedule import Comm
from meshtune.hardware.links import CollectiveKind
from meshtune.model.layers import fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.step.memory import (
    MemoryBreakdown,
    activation_bytes,
    block_activation_bytes,
    block_parameters,
    comm_buffer_bytes,
    interleave_factor,
    memory_per_chip,
    over_capacity,
    state_bytes,
    usable_bytes,
)

TINY = ModelSpec(
    name="tiny",
    display_name="Tiny",
    source="tests/test_memory.py",
    blocks=4,
    hidden=64,
    heads=4,
    head_dim=16,
    kv_heads=4,
    ffn_hidden=256,
    mlp="gelu",
    vocab=100,
    seq_len=32,
)


def test_block_parameters_are_twelve_h_squared() -> None:
    assert block_parameters(fc_layers(TINY, 1, 32)) == 12 * 64 * 64 == 49_152


def test_state_is_sixteen_bytes_per_parameter_and_zero_shards_it() -> None:
    # ZeRO §3.1: 2 (bf16 weights) + 2 (gradients) + 12 (fp32 master, momentum, variance).
    assert state_bytes(1000, 2, dp=4, zero=0) == (2000, 2000, 12_000)
    assert sum(state_bytes(1000, 2, dp=4, zero=0)) == 16 * 1000
    assert state_bytes(1000, 2, dp=4, zero=1) == (2000, 2000, 3000)  # P_os
    assert state_bytes(1000, 2, dp=4, zero=2) == (2000, 500, 3000)  # P_os+g
    assert state_bytes(1000, 2, dp=4, zero=3) == (500, 500, 3000)  # P_os+g+p (FSDP)


def test_headroom_and_interleaving() -> None:
    assert usable_bytes(32.0, 0.1) == pytest.approx(28.8)
    assert interleave_factor(4, 1) == 1.0
    # Korthikanti §4.2.3: 1 + (p − 1)/(p·v) = 1 + 3/8 for p = 4, v = 2.
    assert interleave_factor(4, 2) == 1.375


def test_fused_attention_never_keeps_the_scores() -> None:
    selective = block_activation_bytes(TINY, 2, 32, 2, "selective")
    assert block_activation_bytes(TINY, 2, 32, 2, "none", "fused") == selective


def test_selective_activations_are_korthikanti_34_sbh() -> None:
    # micro-batch 2 × 32 tokens = 64 tokens: 34 · 64 · 64 = 139,264 bytes.
    assert block_activation_bytes(TINY, 2, 32, 2, "selective") == 34 * 64 * 64 == 139_264


def test_no_recompute_adds_the_attention_scores() -> None:
    # Korthikanti eq. 1: s·b·h·(34 + 5·a·s/h) = 32·2·64·(34 + 5·4·32/64) = 4096 · 44.
    assert block_activation_bytes(TINY, 2, 32, 2, "none") == 32 * 2 * 64 * 44 == 180_224


def test_full_recompute_keeps_the_block_input() -> None:
    assert block_activation_bytes(TINY, 2, 32, 2, "full") == 2 * 64 * 64 == 8192


def test_gqa_and_swiglu_use_the_model_widths() -> None:
    small = TINY.model_copy(update={"kv_heads": 2, "ffn_hidden": 128, "mlp": "swiglu"})
    # qkv = (4 + 2·2)·16 = 128, attn = 64, up = 2·128 = 256, per token:
    # attention 2·64 + 2·128 + 2·64 + 64 = 576, MLP 2·64 + 2·256 + 2·128 + 64 = 960, norms 256.
    assert block_activation_bytes(small, 2, 32, 2, "selective") == 64 * (576 + 960 + 256)


def test_activations_per_chip_count_blocks_micro_batches_in_flight_and_tp() -> None:
    kept = activation_bytes(TINY, 2, 32, 2, "selective", stage_blocks=2, in_flight=2, tp=4)
    assert kept == 2 * 2 * 139_264 / 4
    full = activation_bytes(TINY, 2, 32, 2, "full", stage_blocks=2, in_flight=2, tp=4)
    assert full == (2 * 2 * 8192 + 139_264) / 4  # inputs + one block rebuilt at a time


def test_without_sequence_parallelism_the_residual_stream_is_whole() -> None:
    # Korthikanti eq. 2: s·b·h·(10 + 24/t) for selective recompute; 64 tokens · 64 wide,
    # t = 4: 4096 · (10 + 6) = 65,536 bytes (with SP, eq. 4: 4096 · 34 / 4 = 34,816).
    args = (TINY, 2, 32, 2, "selective")
    whole = activation_bytes(*args, stage_blocks=1, in_flight=1, tp=4, token_shards=1)
    assert whole == 64 * 64 * (10 + 24 / 4) == 65_536
    assert activation_bytes(*args, stage_blocks=1, in_flight=1, tp=4) == 64 * 64 * 34 / 4
    # Full recompute: the block input (e·T·h) whole per chip, and the rebuilt block as above.
    full = activation_bytes(
        TINY, 2, 32, 2, "full", stage_blocks=2, in_flight=2, tp=4, token_shards=1
    )
    assert full == 2 * 2 * 8192 + 65_536


def test_memory_per_chip_hand_worked() -> None:
    # DP 2 × PP 2 × TP 4: 2 blocks per stage, 4 micro-batches of 2 sequences, 2 in flight.
    memory = memory_per_chip(
        TINY,
        fc_layers(TINY, 2, 32),
        micro_batch=2,
        seq_len=32,
        bytes_per_element=2,
        dp=2,
        pp=2,
        tp=4,
        stage_blocks=2,
        micro_batches=4,
        zero=1,
        recompute="selective",
        buffers_bytes=1000.0,
    )
    params = 2 * 49_152 / 4  # 24,576 per chip
    assert memory == MemoryBreakdown(
        weights_bytes=2 * params,
        gradients_bytes=2 * params,
        optimizer_bytes=12 * params / 2,
        activations_bytes=2 * 2 * 139_264 / 4,
        buffers_bytes=1000.0,
    )
    assert memory.total_bytes == 49_152 + 49_152 + 147_456 + 139_264 + 1000
    assert memory.biggest() == ("optimizer", 147_456)


def test_the_end_stages_hold_the_embedding_the_head_and_the_logits() -> None:
    # PP 2, TP 4, v 1: 2 blocks per stage, vocab 100 × h 64 / 4 = 1,600 parameters per end.
    common = {
        "micro_batch": 2,
        "seq_len": 32,
        "bytes_per_element": 2,
        "dp": 1,
        "pp": 2,
        "tp": 4,
        "stage_blocks": 2,
        "micro_batches": 4,
        "zero": 0,
        "recompute": "selective",
    }
    bare = memory_per_chip(TINY, fc_layers(TINY, 2, 32), **common)  # type: ignore[arg-type]
    ends = memory_per_chip(TINY, fc_layers(TINY, 2, 32), ends=True, **common)  # type: ignore[arg-type]
    # The first stage (2 micro-batches in flight) outweighs the last (1, plus 4·64·100/4 B of
    # fp32 logits = 6,400 B), so the first is returned: 16 B per embedding parameter more.
    assert ends.total_bytes - bare.total_bytes == 16 * 1600
    assert ends.logits_bytes == 0.0
    one = memory_per_chip(TINY, fc_layers(TINY, 2, 32), ends=True, **{**common, "pp": 1})  # type: ignore[arg-type]
    assert one.logits_bytes == 4 * 64 * 100 / 4
    assert one.weights_bytes - bare.weights_bytes == 2 * 2 * 1600  # embedding and head


def test_one_micro_batch_in_flight_without_pipelining() -> None:
    common = {"micro_batch": 2, "seq_len": 32, "bytes_per_element": 2, "dp": 1, "tp": 1}
    one = memory_per_chip(
        TINY,
        fc_layers(TINY, 2, 32),
        pp=1,
        stage_blocks=4,
        micro_batches=8,
        zero=0,
        recompute="selective",
        **common,
    )
    assert one.activations_bytes == 4 * 139_264


def test_buffers_are_the_busiest_pass_double_buffered() -> None:
    ag, rds, sr = (
        CollectiveKind.ALL_GATHER,
        CollectiveKind.REDUCE_SCATTER,
        CollectiveKind.SEND_RECV,
    )
    first = [Comm(ag, 0, 4, 3, 100, 300), Comm(ag, 1, 2, 1, 300, 300)]  # 400 + 600
    second = [Comm(rds, 1, 2, 1, 50, 50), Comm(sr, 0, 4, 1, 1000, 1000)]  # 1000 + 100
    assert comm_buffer_bytes([first, second]) == 2 * 1100
    assert comm_buffer_bytes([]) == 0


def test_over_capacity_names_the_biggest_term() -> None:
    memory = MemoryBreakdown(1.0, 1.0, 6.0 * 2**30, 30.0 * 2**30, 0.0)
    reason = over_capacity(memory, 32.0 * 2**30)
    assert reason is not None
    assert "biggest term activations 30.0 GiB" in reason
    assert "over the 32.0 GiB capacity" in reason
    assert over_capacity(memory, None) is None
    assert over_capacity(memory, 40.0 * 2**30) is None


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_activations_grow_with_the_micro_batch(recompute: str) -> None:
    small = block_activation_bytes(TINY, 1, 32, 2, recompute)  # type: ignore[arg-type]
    assert block_activation_bytes(TINY, 2, 32, 2, recompute) == 2 * small  # type: ignore[arg-type]
