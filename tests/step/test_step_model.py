"""price_step (meshtune.step.model) worked by hand for the small model of test_step_work.

DP 2 × PP 2 × TP 4, batch 8 in 2 micro-batches of 2 sequences of 32; the FC block is given as
round numbers (forward 1 ms, backward 2 ms, 0.5 ms of it exposed TP communication).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import fc_layers
from meshtune.step import BlockFc, StepCost, StepOptions, model_flops, price_step
from meshtune.step.memory import Recompute
from meshtune.step.options import Zero
from meshtune.step.work import attention_core, cross_entropy, elementwise, embedding, lm_head_s
from test_memory import TINY

FC = BlockFc(4, 1e-3, 2e-3, 0.5e-3, tuple(fc_layers(TINY, 2, 32)), 4)


def reduce(grad_bytes: float, weight_bytes: float | None = None) -> float:
    """DP 2: reduce-scatter (axis 0: 30 us launch, 3 us sync, 0.5 GB/s) of half the gradient
    bytes + all-gather (10 us, 1 us, 1 GB/s) of half the weight bytes (the gradients' when
    not given)."""
    gathered = grad_bytes if weight_bytes is None else weight_bytes
    return 30e-6 + 3e-6 + grad_bytes / 2 / 0.5e9 + 10e-6 + 1e-6 + gathered / 2 / 1e9


def step(profile: HardwareProfile, options: StepOptions, zero: Zero = 0) -> StepCost:
    """The module's split (DP 2 × PP 2 × TP 4, 2 micro-batches of 2 sequences) priced at ZeRO
    stage ``zero``."""
    return price_step(
        TINY,
        profile,
        FC,
        batch=8,
        seq_len=32,
        dp=2,
        pp=2,
        micro_batches=2,
        zero=zero,
        options=options,
    )


@pytest.fixture(name="profile")
def _profile(make_profile: Callable[..., HardwareProfile]) -> HardwareProfile:
    return make_profile(hbm_bytes_per_s=1e11)


def test_one_step_by_hand(profile: HardwareProfile) -> None:
    options = StepOptions(recompute="selective", attention="plain", fp32_grads=False)
    cost = step(profile, options, zero=1)
    attn = attention_core(TINY, 2, 32, 4, 2, kind="plain").total_s(profile)
    recompute = attention_core(TINY, 2, 32, 4, 2, kind="plain").forward_s(profile)
    elem = elementwise(TINY, 2, 32, 4, 2).total_s(profile)
    block = 3e-3 + attn + elem + recompute
    head = sum(lm_head_s(TINY, 2, 32, 4, profile)) + cross_entropy(TINY, 2, 32, 4, 2).total_s(
        profile
    )
    emb = embedding(TINY, 2, 32, 4, 2).total_s(profile)
    assert head > emb  # the last stage (2 blocks + head) sets the pace
    p2p = 50e-6 + 5e-6 + 2 * 2 * 32 * 64 / 4 / 1e9  # send_recv axis 0, one step
    slot = 2 * block + head + 2 * p2p

    # DP: a block is 12,288 parameters per chip (24,576 B), an end 1,600 (3,200 B).
    plain = attention_core(TINY, 2, 32, 4, 2, kind="plain")
    forward = 1e-3 + plain.forward_s(profile) + elementwise(TINY, 2, 32, 4, 2).forward_s(profile)
    tail = max(reduce(24_576), 2 * reduce(24_576) - (block - forward))  # L = 2 blocks
    optimizer = (2 * 12_288 + 1600) / 2 * 30 / 1e11  # ZeRO-1: half the chip's parameters
    split = cost.split
    assert split.fc_s == pytest.approx(2 * 2 * 3e-3)
    assert split.tp_exposed_s == pytest.approx(2 * 2 * 0.5e-3)
    assert split.attention_s == pytest.approx(2 * 2 * attn)
    assert split.recompute_s == pytest.approx(2 * 2 * recompute)
    assert split.other_s == pytest.approx(2 * (2 * elem + head))
    assert split.send_recv_s == pytest.approx(2 * 2 * p2p)
    assert split.bubble_s == pytest.approx(slot)  # (pp − 1)/v = 1 slot
    assert split.dp_exposed_s == pytest.approx(tail + reduce(3200))
    assert split.optimizer_s == pytest.approx(optimizer)
    assert cost.step_s == pytest.approx(3 * slot + tail + reduce(3200) + optimizer)
    assert cost.layout.blocks == (2, 2)
    assert cost.tokens_per_s == pytest.approx(8 * 32 / cost.step_s)


def test_gradient_reduction_after_the_backward_pass(profile: HardwareProfile) -> None:
    # Without overlap every block's reduction shows: L = 2 blocks of 24,576 B, plus the ends'.
    serial = StepOptions(grad_overlap=False, fp32_grads=False)
    cost = step(profile, serial, zero=1)
    assert cost.split.dp_exposed_s == pytest.approx(2 * reduce(24_576) + reduce(3200))
    hidden = step(profile, StepOptions(fp32_grads=False), zero=1)
    assert hidden.split.dp_exposed_s < cost.split.dp_exposed_s


def test_fp32_gradients_double_the_reduce_scatter(profile: HardwareProfile) -> None:
    # fp32 gradients: the reduce-scatter moves 4 bytes per parameter, the all-gather of the
    # updated bf16 weights 2; the ends' bucket (1,600 parameters) shows whole.
    options = StepOptions(grad_overlap=False)
    assert options.fp32_grads
    cost = step(profile, options, zero=1)
    blocks = 2 * reduce(4 * 12_288, 2 * 12_288)
    assert cost.split.dp_exposed_s == pytest.approx(blocks + reduce(4 * 1600, 2 * 1600))
    # Adam reads the fp32 gradient and the norm reads it again: 2 · (4 − 2) more bytes.
    assert cost.split.optimizer_s == pytest.approx((2 * 12_288 + 1600) / 2 * 34 / 1e11)
    # ZeRO-1 keeps the whole fp32 gradient: 4 bytes per parameter.
    bf16 = step(profile, StepOptions(grad_overlap=False, fp32_grads=False), zero=1)
    assert cost.memory.gradients_bytes == pytest.approx(2 * bf16.memory.gradients_bytes)


def test_zero0_all_reduces_fp32_gradients_at_their_width(profile: HardwareProfile) -> None:
    # ZeRO-0: the ring all-reduce's all-gather carries the fp32 gradients, not bf16 weights.
    options = StepOptions(grad_overlap=False)
    cost = step(profile, options, zero=0)
    blocks = 2 * reduce(4 * 12_288)
    assert cost.split.dp_exposed_s == pytest.approx(blocks + reduce(4 * 1600))


def test_grad_all_reduce_gathers_twice(profile: HardwareProfile) -> None:
    # DeepSpeed's BF16 optimizer under ZeRO-1: all-reduce of the fp32 gradients (4 B each way)
    # then the all-gather of the updated bf16 weights (2 B): one more all-gather of 2 · 12,288
    # B per block than the reduce-scatter path; the ends' bucket likewise.
    options = StepOptions(grad_overlap=False, grad_all_reduce=True)
    cost = step(profile, options, zero=1)
    gather_weights = 10e-6 + 1e-6 + 2 * 12_288 / 2 / 1e9
    gather_ends = 10e-6 + 1e-6 + 2 * 1600 / 2 / 1e9
    blocks = 2 * (reduce(4 * 12_288) + gather_weights)
    assert cost.split.dp_exposed_s == pytest.approx(blocks + reduce(4 * 1600) + gather_ends)


def test_separate_gradient_accumulation_is_a_memory_pass(profile: HardwareProfile) -> None:
    # Every micro-batch adds its bf16 gradients (2 B read) into the fp32 buffer (4 B read, 4 B
    # written): 10 B per parameter over 1e11 B/s, 2 blocks of 12,288 parameters and the LM
    # head's 1,600 on the pacing (last) stage, 2 micro-batches, plus one bubble slot of it.
    fused, separate = (
        step(profile, StepOptions(grad_accumulation=kind), zero=1) for kind in ("fused", "separate")
    )
    per_slot = (2 * 12_288 + 1600) * 10 / 1e11
    assert separate.split.other_s - fused.split.other_s == pytest.approx(2 * per_slot)
    assert separate.split.bubble_s - fused.split.bubble_s == pytest.approx(per_slot)


def test_replicated_residual_stream_costs_every_chip(profile: HardwareProfile) -> None:
    # Megatron without SP (token_shards = 1): the element-wise T·h work is whole per chip.
    options = StepOptions(dropout=True)
    shared = step(profile, options)
    whole = BlockFc(4, 1e-3, 2e-3, 0.5e-3, FC.layers, 4, token_shards=1)
    replicated = price_step(
        TINY, profile, whole, batch=8, seq_len=32, dp=2, pp=2, micro_batches=2, options=options
    )
    per_block = elementwise(TINY, 2, 32, 4, 2, dropout=True, token_shards=1).total_s(
        profile
    ) - elementwise(TINY, 2, 32, 4, 2, dropout=True).total_s(profile)
    assert replicated.split.other_s - shared.split.other_s == pytest.approx(2 * 2 * per_block)


def test_mfu_and_hfu_follow_korthikanti(profile: HardwareProfile) -> None:
    # Model FLOPs of the step, all chips: 4 blocks · (6 · 64 tokens · 49,152 + 12·b·H·s²·d)
    # + 6·T·h·V, per micro-batch of 2 sequences, times dp · m = 4.
    per_micro = 4 * (6 * 64 * 49_152 + 12 * 2 * 4 * 32 * 32 * 16) + 6 * 64 * 64 * 100
    assert model_flops(TINY, 2, 32, fc_layers(TINY, 2, 32)) == per_micro
    plain = StepOptions(recompute="full", attention="plain")
    cost = step(profile, plain)
    assert cost.model_flops == 4 * per_micro
    # Full recompute runs the FC forward and the attention forward again.
    extra = 4 * (2 * 64 * 49_152 + 4 * 2 * 4 * 32 * 32 * 16)
    assert cost.hardware_flops == 4 * (per_micro + extra)
    assert cost.mfu(profile) == pytest.approx(4 * per_micro / (cost.step_s * 16 * 2e12))
    assert cost.hfu(profile) > cost.mfu(profile)


def test_zero3_gathers_per_block_and_shards_everything(profile: HardwareProfile) -> None:
    kw = {"batch": 8, "seq_len": 32, "dp": 2, "pp": 2, "micro_batches": 2}
    two = price_step(TINY, profile, FC, zero=2, **kw)  # type: ignore[arg-type]
    three = price_step(TINY, profile, FC, zero=3, **kw)  # type: ignore[arg-type]
    assert three.memory.weights_bytes == pytest.approx(two.memory.weights_bytes / 2)
    assert three.dp_block_s == 0.0  # no end-of-step bucket: reduced per micro-batch
    assert three.split.optimizer_s == two.split.optimizer_s


def test_deepspeed_zero3_gathers_again_for_the_recomputed_forward(
    make_profile: Callable[..., HardwareProfile],
) -> None:
    # A DP all-gather slow enough to show: one block's 12,288 bf16 parameters over a ring of 2
    # at 1 MB/s take g = 10 us + 1 us + 12,288 B / 1e6 B/s. Under full recompute DeepSpeed's
    # recomputed forward gathers once more: g more exposed per block per micro-batch (2 blocks
    # on the pacing stage, 2 micro-batches). Without full recompute nothing is recomputed and
    # the option changes nothing.
    slow = make_profile(hbm_bytes_per_s=1e11, all_gather={"axis0": {"bw_bytes_per_s": 1e6}})
    gather = 11e-6 + 2 * 12_288 / 2 / 1e6

    def exposed(recompute: Recompute, regather: bool) -> float:
        options = StepOptions(recompute=recompute, zero3_recompute_gather=regather)
        return step(slow, options, zero=3).split.dp_exposed_s

    assert exposed("full", True) - exposed("full", False) == pytest.approx(2 * 2 * gather)
    assert exposed("selective", True) == exposed("selective", False)


def test_interleaving_shrinks_the_bubble_and_multiplies_sends(profile: HardwareProfile) -> None:
    kw = {"batch": 8, "seq_len": 32, "dp": 1, "pp": 2, "micro_batches": 4}
    one = price_step(TINY, profile, FC, **kw)  # type: ignore[arg-type]
    two = price_step(TINY, profile, FC, vpp=2, **kw)  # type: ignore[arg-type]
    assert two.split.send_recv_s == pytest.approx(2 * one.split.send_recv_s)
    assert two.split.bubble_s < one.split.bubble_s
    assert two.memory.activations_bytes > one.memory.activations_bytes
