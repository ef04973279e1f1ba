"""Context parallelism (issue 18 item 2): ring attention on virtual ranks equals dense causal
attention, and the K/V bytes it passes equal the cost model's (meshtune.step.cp)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshtune.executor.ring_attention import (
    dense_causal_attention,
    rank_positions,
    ring_attention,
)
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.step.cp import kv_shard_bytes, ring_attention_s, ring_exposed_s
from meshtune.step.work import Work


def _spec(heads: int, kv_heads: int, head_dim: int) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": "t",
            "display_name": "t",
            "source": "test",
            "blocks": 1,
            "hidden": heads * head_dim,
            "heads": heads,
            "head_dim": head_dim,
            "kv_heads": kv_heads,
            "ffn_hidden": 4,
            "mlp": "gelu",
            "vocab": 2,
            "seq_len": 16,
        }
    )


def test_ranks_hold_balanced_chunks() -> None:
    # 16 tokens, cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
    assert rank_positions(16, 2, 0).tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    assert rank_positions(16, 2, 1).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    with pytest.raises(ValueError, match="not a multiple of 2·cp = 4"):
        rank_positions(10, 2, 0)


@given(
    cp_log=st.integers(0, 3),
    chunk=st.integers(1, 3),
    kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**16),
)
def test_ring_attention_equals_dense_causal_attention(
    cp_log: int, chunk: int, kv_heads: int, group: int, seed: int
) -> None:
    cp = 2**cp_log
    seq, d, heads = 2 * cp * chunk, 4, kv_heads * group
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((heads, seq, d))
    k = rng.standard_normal((kv_heads, seq, d))
    v = rng.standard_normal((kv_heads, seq, d))
    out, counter = ring_attention(q, k, v, cp, bytes_per_element=2)
    np.testing.assert_allclose(out, dense_causal_attention(q, k, v), atol=1e-12)
    # cp − 1 steps, each passing one rank's K and V: counted == the cost model's shard
    spec = _spec(heads, kv_heads, d)
    assert counter.steps == cp - 1
    assert counter.bytes_sent == (cp - 1) * kv_shard_bytes(spec, 1, seq, 1, cp, 2)


def test_ring_costs_by_hand(make_profile: Callable[..., HardwareProfile]) -> None:
    spec = _spec(8, 2, 4)
    # micro-batch 2, 1,024 tokens, TP 2, CP 4: 2 · 2 · 256 · 2 · 4 · 2 bytes / 2 = 8,192 bytes
    assert kv_shard_bytes(spec, 2, 1024, 2, 4, 2) == 8192
    # 3 steps; a chunk's attention 4 µs (16 / 4) hides 4 of each step's 19.192 µs
    assert ring_exposed_s(19.192e-6, 16e-6, 4) == pytest.approx(3 * 15.192e-6)
    assert ring_exposed_s(19.192e-6, 1.0, 4) == 0.0  # fully hidden
    assert ring_exposed_s(19.192e-6, 0.0, 1) == 0.0  # no ring
    # the round profile (no tiers): a send-recv step on its slowest axis, axis 0:
    # 50 µs + 5 µs + bytes / 1 GB/s
    profile = make_profile()
    attention = Work(fwd_flops=16e-6 * 1e12, bwd_flops=40e-6 * 1e12)  # 16 µs, 40 µs
    forward, backward = ring_attention_s(
        spec, profile, attention, micro_batch=2, seq_len=1024, tp=2, cp=4
    )
    assert forward == pytest.approx(3 * (55e-6 + 8.192e-6 - 4e-6))
    # backward: K/V and their gradients, 16,384 bytes a step; a chunk's backward 10 µs
    assert backward == pytest.approx(3 * (55e-6 + 16.384e-6 - 10e-6))
    assert ring_attention_s(spec, profile, attention, micro_batch=2, seq_len=1024, tp=2, cp=1) == (
        0.0,
        0.0,
    )


def test_all_gather_cp_costs_by_hand(make_profile: Callable[..., HardwareProfile]) -> None:
    # Llama 3's CP: the 4 ranks' 8,192-byte K/V shards all-gathered (round profile, slowest
    # axis 0: 10 µs launch + 3 · (1 µs + 8,192 B / 1 GB/s)), exposed whatever the attention;
    # the backward gathers again and reduce-scatters the gradients (30 µs + 3 · (3 µs +
    # 8,192 B / 0.5 GB/s)).
    spec, profile = _spec(8, 2, 4), make_profile()
    attention = Work(fwd_flops=1e12, bwd_flops=2e12)  # 1 s, 2 s: would hide any ring
    forward, backward = ring_attention_s(
        spec, profile, attention, micro_batch=2, seq_len=1024, tp=2, cp=4, comm="all-gather"
    )
    gather = 10e-6 + 3 * (1e-6 + 8.192e-6)
    assert forward == pytest.approx(gather)
    assert backward == pytest.approx(gather + 30e-6 + 3 * (3e-6 + 16.384e-6))
    assert ring_attention_s(spec, profile, attention, micro_batch=2, seq_len=1024, tp=2, cp=4) == (
        0.0,
        0.0,
    )
