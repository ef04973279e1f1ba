"""The step model's MoE terms (meshtune.step.moe, issue 18): side GeMMs, expert weights and
their state over EP × DP, and the EP all-to-all, worked by hand on the round profile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from moe_helpers import tiny

from meshtune.catalog import load_model, load_profile
from meshtune.errors import ProfileError
from meshtune.hardware.links import LinkParams
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.step.memory import memory_per_chip
from meshtune.step.moe import (
    NO_MOE,
    all_to_all_link,
    all_to_all_s,
    expert_layer_params,
    has_all_to_all,
    moe_block,
)

A2A = {"t_launch_s": 10e-6, "t_sync_s": 1e-6, "bw_bytes_per_s": 1e9}


@pytest.fixture(name="tiny")
def _tiny() -> ModelSpec:
    """4 blocks, h 8, 4 experts of width 6, top 2, one shared expert of width 12."""
    return tiny()


def test_all_to_all_by_hand() -> None:
    link = LinkParams.model_validate(A2A)
    # 4 ranks, 4000 bytes per chip: 3 rounds of 1000 bytes at 1 GB/s, each with 1 µs sync
    assert all_to_all_s(link, 4, 4000) == pytest.approx(10e-6 + 3 * (1e-6 + 1e-6))
    assert all_to_all_s(link, 1, 4000) == 0.0


def test_all_to_all_parameters_come_from_the_tier_the_group_spans() -> None:
    h100 = load_profile("h100-8gpu-nodes")
    assert has_all_to_all(h100)
    nvlink, network = h100.tiers or []
    assert all_to_all_link(h100, 8) == nvlink.all_to_all
    assert all_to_all_link(h100, 16) == network.all_to_all
    tpuv4 = load_profile("tpuv4")
    assert not has_all_to_all(tpuv4)
    with pytest.raises(ProfileError, match="profile 'tpuv4' has no all_to_all parameters"):
        all_to_all_link(tpuv4, 4)


def test_moe_block_by_hand(tiny: ModelSpec, make_profile: Callable[..., HardwareProfile]) -> None:
    profile = make_profile(all_to_all=A2A)
    layers = fc_layers(tiny, 1, 10)
    got = moe_block(tiny, profile, layers, micro_batch=1, seq_len=10, tp=2, weight_shards=2, ep=2)
    # router: 10 tokens over 2 chips × 8 → 4: 2·5·4·8 FLOPs at 1e12 FLOP/s
    router = 2 * 5 * 4 * 8 / 1e12
    # dispatch: 10 tokens · top 2 · h 8 · 2 bytes / tp 2 = 160 bytes per chip over 2 ranks:
    # 10 µs + 1 · (1 µs + 80 B / 1 GB/s); four all-to-alls per block
    a2a = 4 * (10e-6 + 1e-6 + 80 / 1e9)
    assert got.all_to_all_s == pytest.approx(a2a)
    assert got.forward_s == pytest.approx(router + a2a / 2)
    assert got.backward_s == pytest.approx(2 * router + a2a / 2)
    assert got.side_flops == 3 * 2 * 10 * 8 * 4
    # a mesh holds 4/2 routed + 2 shared-slot matrices per MLP layer (8·12 + 6·8 = 144
    # elements each), the FC layers count one: routed 2 · 144, shared (2 − 1) · 144
    assert expert_layer_params(tiny, layers, 2) == (2 * 144, 1 * 144)
    assert got.expert_params == 2 * 144 / 2  # over 2 weight shards
    assert got.dense_params == 8 * 4 / 2 + 144 / 2  # the router over TP, the shared experts
    with pytest.raises(ValueError, match="ep 3 does not divide 4 experts"):
        expert_layer_params(tiny, layers, 3)
    assert (
        moe_block(
            tiny, profile, layers, micro_batch=1, seq_len=10, tp=2, weight_shards=2, ep=1
        ).all_to_all_s
        == 0.0
    )


def test_a_dense_model_has_no_moe_terms(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    layers = fc_layers(gpt3, 1, 2048)
    got = moe_block(gpt3, tpuv4, layers, micro_batch=1, seq_len=2048, tp=16, weight_shards=16)
    assert got is NO_MOE


def test_expert_parallelism_needs_all_to_all_parameters(
    tiny: ModelSpec, round_profile: HardwareProfile
) -> None:
    with pytest.raises(ProfileError, match="has no all_to_all parameters"):
        moe_block(
            tiny,
            round_profile,
            fc_layers(tiny, 1, 10),
            micro_batch=1,
            seq_len=10,
            tp=2,
            weight_shards=2,
            ep=2,
        )


def test_expert_state_is_split_over_the_replicas_of_each_expert(tiny: ModelSpec) -> None:
    layers = fc_layers(tiny, 1, 10)
    got = memory_per_chip(
        tiny,
        layers,
        micro_batch=1,
        seq_len=10,
        bytes_per_element=2,
        dp=4,
        pp=1,
        tp=2,
        stage_blocks=4,
        micro_batches=1,
        zero=1,
        recompute="selective",
        side_params=16,
        expert_params=216,
        ep=2,
    )
    # dense: 4 blocks · ((8·16 + 8·8 + 8·12 + 6·8) / 2 + 16) = 736 parameters, optimizer over
    # DP 4; experts: 4 · 216 = 864 parameters, optimizer over their DP / EP = 2 replicas
    assert got.weights_bytes == 2 * (736 + 864)
    assert got.gradients_bytes == 2 * (736 + 864)
    assert got.optimizer_bytes == 12 * 736 / 4 + 12 * 864 / 2


def test_mixtral_experts_are_in_the_memory_of_a_plan() -> None:
    spec = load_model("mixtral-8x7b")
    layers = fc_layers(spec, 1, 4096)
    h100 = load_profile("h100-8gpu-nodes")
    one = moe_block(spec, h100, layers, micro_batch=1, seq_len=4096, tp=8, weight_shards=8)
    eight = moe_block(spec, h100, layers, micro_batch=1, seq_len=4096, tp=8, weight_shards=8, ep=8)
    mlp = 4096 * 2 * 14336 + 14336 * 4096
    assert one.expert_params == 8 * mlp / 8  # all 8 experts on every mesh, over TP 8
    assert eight.expert_params == mlp / 8  # one expert per mesh
    # the router, less the MLP layers' own matrix (counted with the routed experts)
    assert one.dense_params == eight.dense_params == (4096 * 8 - mlp) / 8
    assert eight.all_to_all_s > 0.0


def test_the_step_shows_the_all_to_all_inside_other() -> None:
    """price_step with EP 8: four all-to-alls per block and micro-batch, as moe_block prices
    them, reported as ep_exposed_s, a part of other_s."""
    from meshtune.step import BlockFc, price_step

    spec, h100 = load_model("mixtral-8x7b"), load_profile("h100-8gpu-nodes")
    layers = fc_layers(spec, 1, 4096)
    fc = BlockFc(8, 1e-2, 2e-2, 0.0, layers, 8)
    kwargs: dict[str, Any] = {"batch": 16, "seq_len": 4096, "dp": 8, "pp": 1}
    one = price_step(spec, h100, fc, micro_batches=2, **kwargs)
    eight = price_step(spec, h100, fc, micro_batches=2, ep=8, **kwargs)
    block = moe_block(spec, h100, layers, micro_batch=1, seq_len=4096, tp=8, weight_shards=8, ep=8)
    assert one.split.ep_exposed_s == 0.0
    assert eight.split.ep_exposed_s == pytest.approx(2 * 32 * block.all_to_all_s)
    assert eight.split.other_s - one.split.other_s == pytest.approx(eight.split.ep_exposed_s)
    assert eight.memory.weights_bytes < one.memory.weights_bytes
