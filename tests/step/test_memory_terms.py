"""The factored memory pre-check (meshtune.step.memory_terms) against memory_per_chip, the
definition: a hand-worked split of a small model and, with hypothesis, equality bit for bit.

The model: test_memory's TINY, 4 blocks, h = 64, 4 heads of 16, GELU MLP of 256, sequences of
32, vocabulary 100; one block has 12·h² = 49,152 FC parameters.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.catalog import load_model
from meshtune.model.layers import fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.step.memory import MemoryBreakdown, block_parameters, memory_per_chip
from meshtune.step.memory_terms import SplitMemory
from test_memory import TINY


def test_a_hand_worked_split() -> None:
    # DP 2 × PP 2 × TP 4, 2 blocks per chip, 4 micro-batches of 1 sequence, ZeRO-1, bf16:
    # state (2 · 49,152 / 4 + 100 · 64 / 4) = 26,176 parameters: weights and gradients
    # 2 bytes each, optimizer 12 / DP 2; activations 34 · T · h / TP = 17,408 per block and
    # micro-batch, the first stage 2 blocks × min(4, 2) in flight = 69,632, the last 2 × 1
    # plus logits 4 · 32 · 100 / 4 = 3,200: the first is fuller.
    terms = SplitMemory(TINY, seq_len=32, bytes_per_element=2, recompute="selective")
    found = terms.memory(
        49_152, micro_batch=1, dp=2, pp=2, tp=4, stage_blocks=2, micro_batches=4, zero=1
    )
    assert found == MemoryBreakdown(52_352, 52_352, 157_056, 69_632, 0.0, 0.0)
    # PP 1 holds both ends and the logits; ZeRO-3 shards the weights and gathers one block,
    # 2 · 12,288 · 2 bytes double-buffered (DP 2, 4 blocks of 12,288 + 2 · 1,600 parameters)
    one = terms.memory(
        49_152, micro_batch=1, dp=2, pp=1, tp=4, stage_blocks=4, micro_batches=1, zero=3
    )
    assert one == MemoryBreakdown(52_352, 52_352, 314_112, 69_632, 49_152, 3_200)


MODELS = [TINY, load_model("gpt3"), load_model("llama3-70b")]


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    micro=st.integers(1, 8),
    dp=st.integers(1, 8),
    pp=st.integers(1, 8),
    tp=st.sampled_from([1, 2, 3, 4, 8, 96]),
    stage_blocks=st.integers(1, 8),
    micro_batches=st.integers(1, 16),
    zero=st.integers(0, 3),
    vpp=st.integers(1, 3),
    recompute=st.sampled_from(["none", "selective", "full"]),
    attention=st.sampled_from(["plain", "fused"]),
    precision=st.sampled_from(["bf16", "fp8"]),
    copies=st.sampled_from([1, 2]),
    e=st.sampled_from([1, 2, 4]),
    seq_len=st.sampled_from([32, 2048, 4096]),
)
def test_the_factored_memory_is_memory_per_chip_bit_for_bit(
    model: ModelSpec,
    micro: int,
    dp: int,
    pp: int,
    tp: int,
    stage_blocks: int,
    micro_batches: int,
    zero: int,
    vpp: int,
    recompute: str,
    attention: str,
    precision: str,
    copies: int,
    e: int,
    seq_len: int,
) -> None:
    layers = fc_layers(model, micro, seq_len)
    terms = SplitMemory(
        model,
        seq_len=seq_len,
        bytes_per_element=e,
        recompute=recompute,
        attention=attention,
        precision=precision,
        copies=copies,
    )
    split = dict(dp=dp, pp=pp, tp=tp, stage_blocks=stage_blocks, micro_batches=micro_batches)
    expected = memory_per_chip(
        model,
        layers,
        micro_batch=micro,
        seq_len=seq_len,
        bytes_per_element=e,
        zero=zero,
        recompute=recompute,
        vpp=vpp,
        attention=attention,
        ends=True,
        copies=copies,
        precision=precision,
        **split,
    )
    for _ in range(2):  # computed, then from the caches
        found = terms.memory(
            block_parameters(layers), micro_batch=micro, zero=zero, vpp=vpp, **split
        )
        assert found == expected
        assert found.total_bytes == expected.total_bytes
