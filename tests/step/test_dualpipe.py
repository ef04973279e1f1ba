"""DualPipe (DeepSeek-V3 §3.2.1, Table 2) worked by hand: the schedule's rules, its bubble, the
overlap of stage sends with the paired chunk's compute, two model copies per chip."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_step_model import FC

from meshtune.errors import InfeasibleError
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.search.legal import splits
from meshtune.search.levels import search_cluster
from meshtune.step import StepOptions, price_step
from meshtune.step.bounds import Bound
from meshtune.step.options import ClusterOptions
from meshtune.step.pipeline import dualpipe_bubble_s, dualpipe_legal, pipeline_time
from meshtune.step.work import attention_core, cross_entropy, elementwise, embedding, lm_head_s
from test_memory import TINY

PLAIN = {"recompute": "none", "attention": "plain", "fp32_grads": False}


def test_dualpipe_rules_and_bubble_formula() -> None:
    # deepseek-ai/DualPipe DualPipe.step: PP even, m even and at least 2·PP; one virtual stage
    assert dualpipe_legal(4, 8)
    assert not dualpipe_legal(3, 8)  # odd PP
    assert not dualpipe_legal(4, 6)  # m < 2·PP
    assert not dualpipe_legal(4, 9)  # odd m
    assert not dualpipe_legal(4, 8, vpp=2)
    # (PP/2 − 1)·(F&B + B − 3W): PP 8, F&B 5, B 4, W 1 → 3 · 6
    assert dualpipe_bubble_s(8, 5.0, 4.0, 1.0) == pytest.approx(18.0)
    assert dualpipe_bubble_s(2, 5.0, 4.0, 1.0) == 0.0  # PP 2: no bubble
    assert dualpipe_bubble_s(8, 1.0, 1.0, 1.0) == 0.0  # never negative


def test_dualpipe_hides_stage_sends_behind_compute(
    make_profile: Callable[..., HardwareProfile],
) -> None:
    # TINY (4 blocks) on PP 2 × TP 4, 4 micro-batches of one sequence, sends at 100 kB/s so
    # that they outlast the compute. Each chip holds 2 blocks of each copy and embeds or ends
    # half the micro-batches: compute = 2 · block + (embedding + head) / 2. 1F1B shows both
    # sends of every slot; DualPipe shows only what the compute does not hide, and PP 2 has
    # no bubble.
    profile = make_profile(hbm_bytes_per_s=1e11, send_recv={"axis0": {"bw_bytes_per_s": 1e5}})
    kw = {"batch": 4, "seq_len": 32, "dp": 1, "pp": 2, "micro_batches": 4}
    dual = price_step(
        TINY, profile, FC, zero=1, options=StepOptions(**PLAIN, schedule="dualpipe"), **kw
    )  # type: ignore[arg-type]
    one = price_step(TINY, profile, FC, zero=1, options=StepOptions(**PLAIN), **kw)  # type: ignore[arg-type]
    attn = attention_core(TINY, 1, 32, 4, 2, kind="plain").total_s(profile)
    elem = elementwise(TINY, 1, 32, 4, 2).total_s(profile)
    block = 3e-3 + attn + elem
    head = sum(lm_head_s(TINY, 1, 32, 4, profile)) + cross_entropy(TINY, 1, 32, 4, 2).total_s(
        profile
    )
    emb = embedding(TINY, 1, 32, 4, 2).total_s(profile)
    compute = 2 * block + (emb + head) / 2
    p2p = 50e-6 + 5e-6 + 1 * 32 * 64 * 2 / 4 / 1e5  # one send of a micro-batch's activations
    assert 2 * p2p > compute  # the sends outlast the compute
    assert dual.split.bubble_s == 0.0
    assert dual.split.send_recv_s == pytest.approx(4 * (2 * p2p - compute))
    assert one.split.send_recv_s == pytest.approx(4 * 2 * p2p)
    assert dual.bubble_fraction == 0.0
    # two copies: each chip holds 4 blocks (12,288 bf16 parameters each) and both ends (1,600)
    assert dual.memory.weights_bytes == pytest.approx(2 * (4 * 12_288 + 2 * 1600))
    assert dual.copies == 2 and dual.dp_reduction_s == pytest.approx(
        2 * 2 * dual.dp_block_s + dual.dp_end_s
    )


def test_dualpipe_search_keeps_to_its_splits(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    options = ClusterOptions(step=StepOptions(schedule="dualpipe"))
    found = splits(gpt3, 256, 128, options)
    assert found and all(dualpipe_legal(pp, m, v) for _, pp, m, v in found)
    best = search_cluster(gpt3, tpuv4, 256, batch=128, seq_len=2048, options=options, top=1).best
    assert best.cost.copies == 2 and dualpipe_legal(best.pp, best.micro_batches, best.vpp)
    with pytest.raises(InfeasibleError, match="DualPipe needs PP and the micro-batches even"):
        search_cluster(
            gpt3,
            tpuv4,
            256,
            batch=128,
            seq_len=2048,
            options=ClusterOptions(pp=3, step=StepOptions(schedule="dualpipe")),
        )


def test_a_bound_without_slope_prunes_no_block_time() -> None:
    assert Bound(1.0, 0.5, 0.0).budget(2.0) == float("inf")
    assert Bound(1.0, 0.5, 2.0).budget(2.0) == pytest.approx(1.0)


def test_pipeline_time_by_hand() -> None:
    kw = {"pp": 4, "micro_batches": 8, "vpp": 1, "backward_s": 4.0, "weight_s": 1.0}
    # 1F1B: a slot of 6 + 1 s, every second on the critical path, 3 slots of bubble
    one = pipeline_time("1f1b", chip_s=6.0, a2a_s=2.0, sends_s=1.0, **kw)  # type: ignore[arg-type]
    assert (one.bubble_s, one.a2a_s, one.sends_s) == (21.0, 2.0, 1.0)
    assert one.fraction == pytest.approx(3 / 11)
    # DualPipe: compute 4 s hides 2 + 1 s of communication; F&B = 4, bubble (2 − 1)·(4 + 4 − 3)
    dual = pipeline_time("dualpipe", chip_s=6.0, a2a_s=2.0, sends_s=1.0, **kw)  # type: ignore[arg-type]
    assert (dual.bubble_s, dual.a2a_s, dual.sends_s) == (5.0, 0.0, 0.0)
    assert dual.fraction == pytest.approx(5 / (8 * 4 + 5))
    # 6 s of communication against 4 of compute: 2 s show, shared 4 : 2 between them
    slow = pipeline_time("dualpipe", chip_s=8.0, a2a_s=4.0, sends_s=2.0, **kw)  # type: ignore[arg-type]
    assert slow.a2a_s == pytest.approx(4 / 3) and slow.sends_s == pytest.approx(2 / 3)
    assert slow.bubble_s == pytest.approx(6 + 4 - 3)
