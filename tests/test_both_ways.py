"""Shifts both ways round full-duplex rings (Wang, 1D TP, FSDP): cost, executor and the artifact.

A send-recv shift on a ring of more than two chips cuts the moving chunk in two along the sliced
extent and sends one part each way (:func:`meshtune.cost.schedule.shift_both_ways`); the
executor does the same with real arrays, so counted == predicted must hold for every ring size
and every chunk extent, odd ones included (the parts are then ⌈e / 2⌉ and ⌊e / 2⌋).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_profile
from meshtune.compare.gemm import gemm_study
from meshtune.cost.config import Config
from meshtune.cost.schedule import AxisTraffic, shift, shift_both_ways, traffic
from meshtune.dataflow import Dataflow, GemmOp, Pass
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import ring_profile

BPE = 2


def test_a_both_ways_shift_moves_the_larger_part_per_link_direction() -> None:
    # 12 rows: 6 each way; 7 rows: 4 one way, 3 the other; a fractional extent halves.
    assert shift_both_ways(0, 4, 1200.0, 12)[0].step_bytes == 600.0
    assert shift_both_ways(0, 4, 700.0, 7)[0].step_bytes == 400.0
    assert shift_both_ways(1, 8, 1000.0, 2.5)[0].step_bytes == 500.0
    # One row cannot be cut: it all goes one way.
    assert shift_both_ways(0, 4, 64.0, 1)[0].step_bytes == 64.0
    # Rings of two chips (and one) shift one way.
    assert shift_both_ways(0, 2, 800.0, 8) == shift(0, 2, 800.0)
    assert shift_both_ways(0, 1, 800.0, 8) == []


def test_half_duplex_links_give_both_ways_no_gain(round_profile: HardwareProfile) -> None:
    # send-recv axis 0 of the round profile: 50 µs launch, 5 µs sync, 1 GB/s.
    half = round_profile.model_copy(update={"full_duplex": False})
    both = shift_both_ways(0, 4, 2e6, 8)[0]
    one = shift(0, 4, 2e6)[0]
    assert both.time(half) == one.time(half)
    assert both.time(round_profile).total_s == pytest.approx((50 + 5 + 1000) * 1e-6)
    assert one.time(round_profile).total_s == pytest.approx((50 + 5 + 2000) * 1e-6)


def test_full_duplex_is_the_default_and_keeps_old_hashes(
    make_profile: Callable[..., HardwareProfile],
) -> None:
    full = make_profile()
    assert full.full_duplex
    half = full.model_copy(update={"full_duplex": False})
    assert half.content_hash() != full.content_hash()
    data = full.model_dump(mode="json")
    del data["full_duplex"]
    assert HardwareProfile.model_validate(data).content_hash() == full.content_hash()


def test_one_d_tp_matches_the_artifacts_logical_ring(tpuv4: HardwareProfile) -> None:
    """hwnam831/meshslice CostModel.py, ``LogicalRing_ISplit`` (M, N, K) = (262144, 36864,
    12288) on 256 chips: P rolls of ``bytes(M × K/P) / (2 · bw) + link latency + overhead``,
    each longer than its GeMM, with the artifact's send-recv constants (Autotuner.py: 13 µs
    launch, 50 µs sync) and ``bws['sendrecv'][1]`` = 35.224 GB/s:
    256 · (25165824 / (2 · 35.224e9) + 63e-6) = 0.10757 s. meshtune's 256 × 1 ring snakes over
    both axes of the torus (``ring_profile``), so its hops run at the slower send-recv axis,
    the same 35.224 GB/s: 255 shifts of 12582912 B per link direction,
    255 · (63 + 357.23) µs = 0.10716 s (on axis 0's 38.801 GB/s it was 0.0988 s, −8.2 %).
    """
    artifact = 256 * (25165824 / (2 * 35.224e9) + 63e-6)
    assert artifact == pytest.approx(0.1076, abs=5e-5)
    (entry,) = gemm_study(262144, 36864, 12288, 256, tpuv4, ["1d_tp"]).entries
    assert entry.time_s == pytest.approx(255 * (63e-6 + 12582912 / 35.224e9), rel=1e-3)
    assert entry.time_s == pytest.approx(artifact, rel=0.005)


def test_a_ring_of_all_chips_takes_the_slower_axis_per_kind(
    make_profile: Callable[..., HardwareProfile],
) -> None:
    """Round profile, send-recv axis 1 slowed to 0.8 GB/s: on 4 × 1 (and 1 × 4) every kind
    takes its slower axis whole, on both axes: all-gather axis 0 (10 µs, 1 µs, 1 GB/s),
    reduce-scatter axis 0 (30 µs, 3 µs, 0.5 GB/s), send-recv axis 1 (60 µs, 6 µs, 0.8 GB/s)."""
    profile = make_profile(send_recv={"axis1": {"bw_bytes_per_s": 0.8e9}})
    snake = ring_profile(profile, Mesh(4, 1))
    assert ring_profile(profile, Mesh(1, 4)) is snake
    for kind, axis in [
        (CollectiveKind.ALL_GATHER, 0),
        (CollectiveKind.REDUCE_SCATTER, 0),
        (CollectiveKind.SEND_RECV, 1),
    ]:
        assert snake.link(kind, 0) == snake.link(kind, 1) == profile.link(kind, axis)
    # One both-ways shift of 2 MB (1 MB per link direction) round the 4-chip snake:
    # 60 + 6 + 1e6 / 0.8e9 s = 1316 µs; on axis 0 alone it was 50 + 5 + 1000 = 1055 µs.
    (one,) = shift_both_ways(0, 4, 2e6, 8)
    assert one.time(snake).total_s == pytest.approx(1316e-6)
    assert one.time(profile).total_s == pytest.approx(1055e-6)
    # Wang's cost goes through it; the cost model on the raw profile would not.
    op = GemmOp(Pass.FORWARD, Dataflow.OS, 64, 64, 64, False, formula="")
    config = Config.of(split=1, slices=4)
    wang = REGISTRY["wang"]
    assert wang.cost(op, Mesh(4, 1), profile, config) == wang.cost_model(
        op, Mesh(4, 1), snake, config
    )
    assert (
        wang.cost(op, Mesh(4, 1), profile, config).total_s
        > wang.cost_model(op, Mesh(4, 1), profile, config).total_s
    )


def test_only_a_ring_of_all_chips_snakes(
    make_profile: Callable[..., HardwareProfile], tpuv4: HardwareProfile
) -> None:
    profile = make_profile()
    # 2D meshes are the torus itself, a ring of two chips is one link, depth keeps its axes.
    for mesh in (Mesh(2, 2), Mesh(4, 2), Mesh(2, 1), Mesh(1, 2), Mesh(4, 1, 2), Mesh(1, 1)):
        assert ring_profile(profile, mesh) is profile, mesh.label
    # Axes that agree (the shipped GPU profiles) give the profile itself.
    gpu = load_profile("h100-8gpu-nodes")
    assert ring_profile(gpu, Mesh(16, 1)) is gpu
    # tpuv4: only send-recv changes (axis 1 is its slower axis).
    snake = ring_profile(tpuv4, Mesh(256, 1))
    for kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        assert snake.link(kind, 0) == tpuv4.link(kind, 0)
    assert snake.link(CollectiveKind.SEND_RECV, 0).bw_bytes_per_s == 35.224e9


def _run(name: str, op: GemmOp, mesh: Mesh, config: Config) -> None:
    algorithm = REGISTRY[name]
    rng = np.random.default_rng(3)
    a = rng.standard_normal(op.operand_shapes[0])
    b = rng.standard_normal(op.operand_shapes[1])
    virtual = VirtualMesh(mesh.rows, mesh.cols, BPE)
    got = algorithm.execute(op, a, b, virtual, config, 1)
    where = f"{name} {op.dataflow.value} {'T' if op.transposed else ''} on {mesh.label} {config}"
    np.testing.assert_allclose(got, dense_gemm(op, a, b), rtol=1e-10, atol=1e-10, err_msg=where)
    counted = tuple(AxisTraffic(*c.as_tuple()) for c in virtual.counters)
    assert counted == traffic(algorithm.comms(op, mesh, config, BPE)), where


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 5),
    cols=st.integers(1, 5),
    unit=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
    flow=st.sampled_from(list(Dataflow)),
    transposed=st.booleans(),
    split=st.sampled_from([1, 2]),
)
def test_wang_both_ways_matches_dense_and_its_traffic_for_any_extent(
    rows: int,
    cols: int,
    unit: tuple[int, int, int],
    flow: Dataflow,
    transposed: bool,
    split: int,
) -> None:
    """Odd ring sizes and odd chunk extents (sizes = ring product × 1 … 3) included."""
    mesh = Mesh(rows, cols)
    if mesh.ring(split - 1) == 1 and rows * cols > 1:
        split = 3 - split
    span = rows * cols
    m, n, k = (span * u for u in unit)
    op = GemmOp(Pass.FORWARD, flow, m, n, k, transposed, formula="")
    _run("wang", op, mesh, Config.of(split=split, slices=1))


@pytest.mark.parametrize("flow", list(Dataflow))
@pytest.mark.parametrize("transposed", [False, True])
def test_wang_both_ways_on_a_ring_of_five_with_odd_chunks(flow: Dataflow, transposed: bool) -> None:
    # 5 × 3: every chunk extent is 3 (rows 2 + 1), slices 5 (u = 1) and 1.
    op = GemmOp(Pass.FORWARD, flow, 45, 45, 45, transposed, formula="")
    for split, slices in ((1, 5), (2, 3), (1, 1)):
        _run("wang", op, Mesh(5, 3), Config.of(split=split, slices=slices))
    comms = REGISTRY["wang"].comms(op, Mesh(5, 3), Config.of(split=1, slices=5), BPE)
    sends = [c for c in comms if c.kind is CollectiveKind.SEND_RECV]
    assert {c.both_ways for c in sends} == {True}
