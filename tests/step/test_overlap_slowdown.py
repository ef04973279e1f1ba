"""Compute slowed by the collectives it overlaps (``HardwareProfile.overlap_slowdown``).

Hand-worked values for :func:`meshtune.step.comms.overlap_exposed` and every step term that
goes through it (DP tail, ZeRO-3 gathers, CP ring, DualPipe), for a 2D GeMM stage
(:func:`meshtune.cost.schedule.overlap_penalty_s`, MeshSlice scalar and array), the σ = 0 case
equal to the formulas before the slowdown, and hypothesis invariants: the overlapped pair never
takes less than its longer part nor more than the two one after the other, and the array form
equals the scalar one.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from conftest import make_profile
from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_profile
from meshtune.cost.config import Config
from meshtune.cost.meshslice import meshslice_times
from meshtune.cost.schedule import overlap_penalty_s
from meshtune.cost.vector import overlap_penalty
from meshtune.dataflow import Stationary, layer_dataflow
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.step.comms import dp_exposed, fsdp_exposed, overlap_exposed
from meshtune.step.cp import ring_exposed_s
from meshtune.step.pipeline import pipeline_time

seconds = st.floats(min_value=0.0, max_value=1e3, allow_nan=False)
slowdowns = st.floats(min_value=0.0, max_value=0.99, allow_nan=False)


def test_overlap_exposed_by_hand() -> None:
    # σ = 0.25: compute beside the collective runs 1.25x slower, σ / (1 + σ) = 0.2.
    assert overlap_exposed(3.0, 10.0, 0.25) == pytest.approx(0.6)  # hidden: 3 · 0.2
    assert overlap_exposed(10.0, 3.0, 0.25) == pytest.approx(7.0)  # longer than the compute
    # The switch between the two is where the slowed compute (3 · 1.25) ends with the collective.
    assert overlap_exposed(3.75, 3.0, 0.25) == pytest.approx(0.75)
    assert overlap_exposed(3.0, 10.0) == 0.0  # σ = 0: hidden for free
    assert overlap_exposed(0.0, 10.0, 0.25) == 0.0  # nothing to hide


@given(seconds, seconds, slowdowns)
def test_overlapped_pair_between_its_longer_part_and_their_sum(
    comm: float, compute: float, slowdown: float
) -> None:
    pair = compute + overlap_exposed(comm, compute, slowdown)
    assert max(comm, compute) <= pair * (1 + 1e-12) + 1e-12
    assert pair <= (comm + compute) * (1 + 1e-12) + 1e-12
    assert overlap_exposed(comm, compute, 0.0) == max(0.0, comm - compute)


@given(seconds, seconds, slowdowns, slowdowns)
def test_more_slowdown_never_hides_more(
    comm: float, compute: float, low: float, high: float
) -> None:
    low, high = sorted((low, high))
    assert overlap_exposed(comm, compute, low) <= overlap_exposed(comm, compute, high)


def test_dp_tail_by_hand() -> None:
    # 4 blocks, 1 s reduction and 2 s backward each: 3 s of reductions beside 6 s of backward.
    assert dp_exposed(1.0, 2.0, 4) == pytest.approx(1.0)  # max(t_r, 4 − 6)
    assert dp_exposed(1.0, 2.0, 4, slowdown=0.25) == pytest.approx(1.0 + 3 * 0.2)
    assert dp_exposed(1.0, 0.5, 4, slowdown=0.25) == pytest.approx(1.0 + 3 - 1.5)
    assert dp_exposed(1.0, 2.0, 4, overlap=False, slowdown=0.25) == pytest.approx(4.0)


@given(
    st.floats(min_value=1e-6, max_value=10.0), st.floats(min_value=0.0, max_value=10.0), slowdowns
)
def test_dp_tail_at_zero_slowdown_is_the_bucket_formula(
    reduce_s: float, backward_s: float, slowdown: float
) -> None:
    blocks = 7
    plain = max(reduce_s, blocks * reduce_s - (blocks - 1) * backward_s)
    assert dp_exposed(reduce_s, backward_s, blocks) == pytest.approx(plain)
    assert dp_exposed(reduce_s, backward_s, blocks, slowdown=slowdown) >= plain * (1 - 1e-12)


def test_zero3_gathers_by_hand() -> None:
    # Forward: 2 s gather beside 4 s forward; backward: 2 gathers + 1 s scatter beside 8 s.
    plain = fsdp_exposed(2.0, 1.0, 4.0, 8.0, backward_gathers=2)
    assert plain == 0.0
    slowed = fsdp_exposed(2.0, 1.0, 4.0, 8.0, backward_gathers=2, slowdown=0.25)
    assert slowed == pytest.approx(2 * 0.2 + 5 * 0.2)
    # Gathers longer than the compute show their excess, with or without σ.
    assert fsdp_exposed(6.0, 1.0, 4.0, 8.0, slowdown=0.25) == pytest.approx(2.0 + 0.0 + 7 * 0.2)


def test_cp_ring_by_hand() -> None:
    # cp = 4: three 1 s ring steps, each beside a quarter of 8 s of attention.
    assert ring_exposed_s(1.0, 8.0, 4) == 0.0
    assert ring_exposed_s(1.0, 8.0, 4, slowdown=0.25) == pytest.approx(3 * 0.2)
    assert ring_exposed_s(3.0, 8.0, 4, slowdown=0.25) == pytest.approx(3 * 1.0)


def test_dualpipe_by_hand() -> None:
    # 10 s per micro-batch of which 2 s all-to-alls, 1 s of sends: 3 s beside 8 s of compute.
    timed = pipeline_time(
        "dualpipe",
        pp=4,
        micro_batches=8,
        vpp=1,
        chip_s=10.0,
        a2a_s=2.0,
        sends_s=1.0,
        backward_s=5.0,
        weight_s=1.0,
        slowdown=0.25,
    )
    shows = 3 * 0.2
    assert timed.a2a_s == pytest.approx(shows * 2 / 3)
    assert timed.sends_s == pytest.approx(shows / 3)
    assert timed.bubble_s == pytest.approx((4 / 2 - 1) * (8 + shows + 5 - 3))


def test_gpu_profiles_price_it_and_tpu_profiles_do_not() -> None:
    assert load_profile("h100-8gpu-nodes").overlap_slowdown == pytest.approx(0.189)
    assert load_profile("a100-80gb-8gpu-nodes").overlap_slowdown == pytest.approx(0.189)
    assert load_profile("tpuv4").overlap_slowdown == 0.0


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), float("inf")])
def test_slowdown_out_of_range_is_refused(bad: float) -> None:
    data = load_profile("tpuv4").model_dump()
    data["overlap_slowdown"] = bad
    with pytest.raises(ValidationError, match="overlap_slowdown"):
        HardwareProfile.model_validate(data)


def test_zero_slowdown_keeps_the_profile_hash() -> None:
    tpu = load_profile("tpuv4")
    slowed = tpu.model_copy(update={"overlap_slowdown": 0.1})
    assert tpu.model_copy(update={"overlap_slowdown": 0.0}).content_hash() == tpu.content_hash()
    assert slowed.content_hash() != tpu.content_hash()


def test_stage_penalty_by_hand() -> None:
    # k = 0.2: 3 s of overlapped collectives beside 10 s of compute show 0.6 s more; behind 1 s
    # of blocking ones only 2 s overlap the compute; longer than the slowed compute, nothing.
    assert overlap_penalty_s(3.0, 0.0, 10.0, 0.25) == pytest.approx(0.6)
    assert overlap_penalty_s(3.0, 1.0, 10.0, 0.25) == pytest.approx(0.4)
    assert overlap_penalty_s(20.0, 0.0, 10.0, 0.25) == 0.0
    assert overlap_penalty_s(3.0, 0.0, 0.0, 0.25) == 0.0  # no compute to slow
    assert overlap_penalty_s(3.0, 0.0, 10.0, 0.0) == 0.0


@given(seconds, seconds, seconds, slowdowns)
def test_stage_penalty_array_is_the_scalar(
    hidden: float, blocking: float, compute: float, slowdown: float
) -> None:
    import numpy as np

    array = overlap_penalty(np.array([hidden]), np.array([blocking]), np.array([compute]), slowdown)
    assert array.tolist() == [overlap_penalty_s(hidden, blocking, compute, slowdown)]


def test_meshslice_stage_by_hand() -> None:
    # The Y-stationary forward of tests/test_vector_pricing.py's hand-worked MeshSlice case (OS,
    # 2 × 2, S = 2: collectives 22.768 µs per iteration), at 1 GFLOP/s so that the GeMM of an
    # iteration, 2·32·16·48 / 1e9 = 49.152 µs, outlasts them. σ = 0: stage(0) + stage(g) + g =
    # 22.768 + 49.152 + 49.152 = 121.072 µs; σ = 0.25 adds 22.768 · 0.2 = 4.5536 µs to the
    # steady stage: 125.6256 µs.
    op = layer_dataflow(FcLayer("l", 64, 96, 32, None), Stationary.Y, False).ops[0]
    config = Config.of(slices=2)
    for slowdown, want in ((0.0, 121.072e-6), (0.25, 125.6256e-6)):
        profile = make_profile(effective_flops_per_s=1e9, overlap_slowdown=slowdown)
        scalar = REGISTRY["meshslice"].cost(op, Mesh(2, 2), profile, config).total_s
        assert scalar == pytest.approx(want, rel=1e-12)
        array = meshslice_times([op], Mesh(2, 2), profile, [config])
        assert array.tolist()[0] == pytest.approx([want], rel=1e-12)
