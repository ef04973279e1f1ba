"""The search's lower bounds (meshtune.step.bounds) against the step they bound.

A bound that stops being one drops the best plan, so the property here is the definition: for
every split and every mesh level at least as slow as the compute-only one (slower FC passes,
fewer weight shards, the residual stream whole on every chip), the priced step is at least
the bound's line at that block FC time, and at least its ZeRO-3 floor. The vector forms are
the scalar ones, float for float.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.catalog import load_model, load_profile
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.step import BlockFc, price_step
from meshtune.step.bounds import (
    BUDGET_SLACK,
    Bound,
    block_floor_s,
    bound_work,
    budget_ceiling,
    budget_ceilings,
    compute_fc,
    fc_block_s,
    fc_compute_s,
    lower_bound,
    pipeline_spans,
)
from meshtune.step.options import ClusterOptions, StepOptions, Zero
from meshtune.step.pipeline import Schedule, dualpipe_legal, interleavings
from test_memory import TINY

MODELS = {"gpt3": load_model("gpt3"), "llama3-70b": load_model("llama3-70b")}
PROFILES = {"tpuv4": load_profile("tpuv4"), "h100-8gpu-nodes": load_profile("h100-8gpu-nodes")}


class Case(NamedTuple):
    """A split the search could bound and a mesh level at least as slow as the bound's."""

    model: ModelSpec
    profile: HardwareProfile
    split: tuple[int, int, int, int]
    micro: int
    zero: Zero
    options: ClusterOptions
    exact: tuple[FcLayer, ...]
    fc: BlockFc


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A model, profile, split, micro-batch, ZeRO stage and options, and a mesh level of the
    bound's TP size with slower FC passes than the compute-only one (any TP exposure), its
    weights over fewer shards and the residual stream maybe whole on every chip."""
    model = MODELS[draw(st.sampled_from(sorted(MODELS)))]
    profile = PROFILES[draw(st.sampled_from(sorted(PROFILES)))]
    schedule: Schedule = draw(st.sampled_from(["1f1b", "dualpipe"]))
    dp = draw(st.sampled_from([1, 2, 8, 32]))
    pp = draw(st.sampled_from([1, 2, 4, 8, 16]))
    m = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    legal = interleavings(model.blocks, pp, m)
    if schedule == "dualpipe":
        legal = [v for v in legal if dualpipe_legal(pp, m, v)]
    if not legal:
        schedule, legal = "1f1b", interleavings(model.blocks, pp, m)
    vpp = draw(st.sampled_from(legal))
    tp = draw(st.sampled_from([1, 4, 16, 64]))
    micro = draw(st.sampled_from([1, 2]))
    zero: Zero = draw(st.sampled_from([0, 1, 2, 3] if dp > 1 else [0]))
    options = ClusterOptions(
        step=StepOptions(
            schedule=schedule,
            recompute=draw(st.sampled_from(["none", "selective", "full"])),
            attention=draw(st.sampled_from(["fused", "plain"])),
            fp32_grads=draw(st.booleans()),
            grad_overlap=draw(st.booleans()),
            grad_accumulation=draw(st.sampled_from(["fused", "separate"])),
            zero3_recompute_gather=draw(st.booleans()),
        )
    )
    exact = fc_layers(model, micro, model.seq_len)
    compute = compute_fc(exact, tp, profile, options)
    slower = st.floats(min_value=1.0, max_value=20.0)
    forward = compute.forward_s * draw(slower)
    backward = compute.backward_s * draw(slower)
    fc = BlockFc(
        tp,
        forward,
        backward,
        (forward + backward) * draw(st.floats(0.0, 1.0)),
        compute.layers,
        draw(st.sampled_from([d for d in (1, 2, 4, 16, 64) if tp % d == 0])),
        token_shards=draw(st.sampled_from([None, 1])),
    )
    return Case(model, profile, (dp, pp, m, vpp), micro, zero, options, tuple(exact), fc)


@settings(max_examples=150)
@given(cases())
def test_every_meshs_step_is_at_least_the_bound(case: Case) -> None:
    model, split, fc, options = case.model, case.split, case.fc, case.options
    dp, pp, m, vpp = split
    batch = dp * m * case.micro
    bound = lower_bound(
        model,
        case.profile,
        case.exact,
        split,
        tp=fc.tp,
        batch=batch,
        seq_len=model.seq_len,
        zero=case.zero,
        options=options,
    )
    cost = price_step(
        model,
        case.profile,
        fc,
        batch=batch,
        seq_len=model.seq_len,
        dp=dp,
        pp=pp,
        micro_batches=m,
        vpp=vpp,
        zero=case.zero,
        options=options.step,
        exact_layers=case.exact,
    )
    t = fc.forward_s + fc.backward_s  # the mesh's block FC time
    assert t >= bound.block_s * (1 - 1e-12)
    line = bound.step_s + bound.slope * (t - bound.block_s)
    assert cost.step_s >= line * (1 - 1e-9)
    assert cost.step_s >= bound.floor_s
    assert not bound.beaten(cost.step_s * (1 + 1e-9))
    if options.step.schedule == "dualpipe":
        assert bound.slope == 0.0 and bound.floor_s == 0.0


def test_the_bound_of_the_compute_only_mesh_is_its_step_less_the_dp_tail() -> None:
    # On the mesh the bound prices (compute_fc), at ZeRO-1, the step and the bound differ by
    # what the DP tail shows beyond one block's reduction
    gpt3, tpuv4 = MODELS["gpt3"], PROFILES["tpuv4"]
    options = ClusterOptions(zero=1)
    exact = fc_layers(gpt3, 1, gpt3.seq_len)
    fc = compute_fc(exact, 16, tpuv4, options)
    bound = lower_bound(
        gpt3, tpuv4, exact, (8, 4, 8, 1), tp=16, batch=64, seq_len=2048, zero=1, options=options
    )
    cost = price_step(
        gpt3,
        tpuv4,
        fc,
        batch=64,
        seq_len=2048,
        dp=8,
        pp=4,
        micro_batches=8,
        zero=1,
        options=options.step,
    )
    floor = cost.dp_end_s + cost.dp_block_s
    assert bound.step_s == pytest.approx(cost.step_s - cost.split.dp_exposed_s + floor)
    assert bound.block_s == fc_block_s(fc.forward_s) == pytest.approx(3 * fc.forward_s)
    assert bound.slope == (8 + 3 / 1) * cost.pace_blocks
    assert bound.floor_s == 0.0


def test_the_zero3_floor_holds_the_gathers_of_the_pace_chip() -> None:
    # ZeRO-3 on DP 32: the linear bound is stage 2's without its DP tail, and the floor adds
    # slots · pace blocks · the gathers the compute-only block leaves exposed
    gpt3, tpuv4 = MODELS["gpt3"], PROFILES["tpuv4"]
    options = ClusterOptions(zero=3)
    exact = fc_layers(gpt3, 1, gpt3.seq_len)
    three, two = (
        lower_bound(
            gpt3,
            tpuv4,
            exact,
            (32, 2, 8, 1),
            tp=4,
            batch=256,
            seq_len=2048,
            zero=z,
            options=options,
        )
        for z in (3, 2)
    )
    assert three.step_s < two.step_s  # no DP tail of its own
    assert three.slope == two.slope and three.block_s == two.block_s
    assert three.floor_s > three.step_s * (1 - BUDGET_SLACK)


def test_the_quick_bound_and_the_work_floor_are_below_the_bound() -> None:
    # splits of 64 sequences in micro-batches of 2 on TP 16: span · the compute-only FC block
    # ≤ span · the block work's floor ≤ the bound's step, and the spans' slope ≤ the bound's
    gpt3, tpuv4 = MODELS["gpt3"], PROFILES["tpuv4"]
    options = ClusterOptions()
    exact = fc_layers(gpt3, 2, gpt3.seq_len)
    dp, pp, m, vpp = [4, 4, 2], np.array([1, 4, 8]), np.array([8, 8, 16]), np.array([1, 2, 3])
    span, slope = pipeline_spans(gpt3, pp, m, vpp)
    compute = fc_compute_s(exact, 16, tpuv4)
    work = bound_work(gpt3, tpuv4, exact, tp=16, micro_batch=2, seq_len=2048, options=options)
    for i, split in enumerate(zip(dp, pp.tolist(), m.tolist(), vpp.tolist(), strict=True)):
        bound = lower_bound(
            gpt3, tpuv4, exact, split, tp=16, batch=64, seq_len=2048, zero=1, options=options
        )
        assert span[i] * fc_block_s(compute) <= span[i] * block_floor_s(work) <= bound.step_s
        assert 0.0 < slope[i] <= bound.slope


def test_pipeline_spans_by_hand() -> None:
    # TINY's 4 blocks: PP 2, v 2 → chunks of one block, two a chip; PP 3 → 1, 2 and 1 blocks
    pp, m, vpp = np.array([2, 3]), np.array([4, 6]), np.array([2, 1])
    span, slope = pipeline_spans(TINY, pp, m, vpp)
    assert span.tolist() == [(4 + 1 / 2) * 2, (6 + 2) * 2]
    assert slope.tolist() == [(4 + 1 / 2) * 2, (6 + 2) * 1]
    # DualPipe: its bubble is not whole slots; m slots of the fuller chip, no slope
    span, slope = pipeline_spans(TINY, np.array([2]), np.array([4]), np.array([1]), "dualpipe")
    assert span.tolist() == [8.0] and slope.tolist() == [0.0]


def test_fc_block_s_of_columns_is_each_ones() -> None:
    compute = np.array([1e-3, 0.1, 7.3e-5])
    assert fc_block_s(compute).tolist() == [fc_block_s(c) for c in compute.tolist()]


@given(
    quick=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=8),
    slope=st.one_of(st.just(0.0), st.floats(1e-3, 100.0)),
    best_s=st.one_of(st.floats(0.0, 20.0), st.just(math.inf)),
)
def test_budget_ceilings_are_each_splits_ceiling(
    quick: list[float], slope: float, best_s: float
) -> None:
    slopes = [slope * (i % 3) for i in range(len(quick))]
    found = budget_ceilings(
        quick=np.array(quick), block_s=0.5, slope=np.array(slopes), best_s=best_s
    )
    each = [
        budget_ceiling(quick=q, block_s=0.5, slope=s, best_s=best_s)
        for q, s in zip(quick, slopes, strict=True)
    ]
    assert found.tolist() == each


def test_a_budget_ceiling_is_at_least_the_budget_of_every_bound_above_it() -> None:
    # a bound of step ≥ quick and slope ≥ slope: its budget is at most the ceiling
    for step_s, slope in ((1.0, 2.0), (1.5, 2.0), (1.0, 3.0), (1.9, 8.0)):
        bound = Bound(step_s, 0.5, slope)
        assert budget_ceiling(quick=1.0, block_s=0.5, slope=2.0, best_s=2.0) >= bound.budget(2.0)
    assert budget_ceiling(quick=1.0, block_s=0.5, slope=0.0, best_s=2.0) == math.inf
