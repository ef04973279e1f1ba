"""Expert parallelism on virtual chips (meshtune.executor.moe, issue 18): the dispatched and
combined MoE layer equals the dense NumPy MoE, and the all-to-alls it counts equal what the
step model prices (meshtune.step.moe.dispatch_bytes and the pairwise-exchange rounds)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshtune.executor.moe import Experts, dense_moe, expert_parallel_moe, route
from meshtune.model.spec import ModelSpec
from meshtune.step.moe import dispatch_bytes


def _experts(rng: np.random.Generator, h: int, count: int, f: int, shared: int) -> Experts:
    return Experts(
        router=rng.standard_normal((h, count)),
        up=rng.standard_normal((count, h, 2 * f)) / np.sqrt(h),
        down=rng.standard_normal((count, f, h)) / np.sqrt(f),
        shared_up=rng.standard_normal((shared, h, 2 * f)) / np.sqrt(h),
        shared_down=rng.standard_normal((shared, f, h)) / np.sqrt(f),
    )


def _spec(h: int, count: int, top_k: int, f: int, capacity_factor: float) -> ModelSpec:
    data: dict[str, Any] = {
        "name": "t",
        "display_name": "t",
        "source": "test",
        "blocks": 1,
        "hidden": h,
        "heads": 1,
        "head_dim": h,
        "kv_heads": 1,
        "ffn_hidden": f,
        "mlp": "swiglu",
        "vocab": 2,
        "seq_len": 2,
        "moe": {
            "experts": count,
            "top_k": top_k,
            "expert_ffn_hidden": f,
            "capacity_factor": capacity_factor,
        },
    }
    return ModelSpec.model_validate(data)


@given(
    ep_log=st.integers(0, 2),
    per=st.integers(1, 3),
    top_k=st.integers(1, 2),
    tokens=st.integers(1, 12),
    capacity=st.integers(1, 12),
    shared=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_dispatched_moe_equals_the_dense_moe(
    ep_log: int, per: int, top_k: int, tokens: int, capacity: int, shared: int, seed: int
) -> None:
    ep = 2**ep_log
    count = ep * per
    top_k = min(top_k, count)
    rng = np.random.default_rng(seed)
    h, f = 4, 3
    experts = _experts(rng, h, count, f, shared)
    x = rng.standard_normal((ep, tokens, h))
    y, counter = expert_parallel_moe(
        x, experts, top_k=top_k, capacity=capacity, bytes_per_element=2
    )
    for r in range(ep):
        np.testing.assert_allclose(y[r], dense_moe(x[r], experts, top_k, capacity), atol=1e-12)
    # two all-to-alls (dispatch, combine) of ep − 1 rounds; each round a rank sends the
    # capacity buffers of the other rank's experts: per · capacity · h elements
    assert (counter.launches, counter.rounds) == (2, 2 * (ep - 1))
    assert counter.bytes_sent == 2 * (ep - 1) * per * capacity * h * 2


@pytest.mark.parametrize("ep", [2, 4])
def test_counted_all_to_all_bytes_equal_the_step_models(ep: int) -> None:
    # 8 experts, top 2, 16 tokens per rank, capacity factor 1.5: capacity 1.5 · 16 · 2 / 8 = 6
    count, top_k, tokens, h, f, cf = 8, 2, 16, 4, 3, 1.5
    capacity = int(cf * tokens * top_k / count)
    rng = np.random.default_rng(7)
    experts = _experts(rng, h, count, f, 0)
    x = rng.standard_normal((ep, tokens, h))
    _, counter = expert_parallel_moe(
        x, experts, top_k=top_k, capacity=capacity, bytes_per_element=2
    )
    per_chip = dispatch_bytes(_spec(h, count, top_k, f, cf), tokens, 1, 2)
    assert per_chip == 16 * 2 * 1.5 * 4 * 2
    # pairwise exchange: a rank sends (P − 1) / P of its bytes, in each of the two all-to-alls
    assert counter.bytes_sent == pytest.approx(2 * (ep - 1) / ep * per_chip)
    assert counter.rounds == 2 * (ep - 1)


def test_tokens_past_capacity_are_dropped_and_ties_go_to_the_lower_expert() -> None:
    router = np.zeros((2, 4))  # every logit equal: top 2 are experts 0 and 1, gates 1/2
    chosen, gates = route(np.ones((3, 2)), router, 2)
    assert chosen.tolist() == [[0, 1]] * 3
    assert gates.tolist() == [[0.5, 0.5]] * 3
    experts = Experts(router=router, up=np.ones((4, 2, 2)), down=np.ones((4, 1, 2)))
    x = np.ones((1, 3, 2))
    y, _ = expert_parallel_moe(x, experts, top_k=2, capacity=2, bytes_per_element=2)
    # expert output for x = (1, 1): silu(2) · 2 per output; the third token is dropped
    one = (2 / (1 + np.exp(-2.0))) * 2
    np.testing.assert_allclose(y[0], [[one, one], [one, one], [0.0, 0.0]])


def test_ep_must_divide_the_experts() -> None:
    experts = _experts(np.random.default_rng(0), 2, 3, 2, 0)
    with pytest.raises(ValueError, match="ep 2 does not divide 3 experts"):
        expert_parallel_moe(np.zeros((2, 1, 2)), experts, top_k=1, capacity=1, bytes_per_element=2)
