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

from meshtune.algorithm import Config
from meshtune.algorithms import REGISTRY
from meshtune.compare import gemm_study
from meshtune.cost.schedule import AxisTraffic, shift, shift_both_ways, traffic
from meshtune.dataflow import Dataflow, GemmOp, Pass
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.mesh import Mesh
from meshtune.specs import CollectiveKind, HardwareProfile

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
    each longer than its GeMM, = 0.1076 s with the artifact's send-recv constants (Autotuner.py:
    13 µs launch, 50 µs sync) and ``bws['sendrecv'][1]`` = 35.224 GB/s, the ring's bandwidth
    in the artifact. meshtune's 256 × 1 ring runs over axis 0 (38.801 GB/s on tpuv4); with the
    artifact's ring bandwidth on that axis the two models agree within 5 %.
    """
    data = tpuv4.model_dump(mode="json")
    data["send_recv"]["axis0"] = data["send_recv"]["axis1"]
    ring = HardwareProfile.model_validate(data)
    study = gemm_study(262144, 36864, 12288, 256, ring, ["1d_tp"])
    (entry,) = study.entries
    assert entry.time_s == pytest.approx(0.1076, rel=0.05)
    # As shipped (axis 0's 38.801 GB/s), 255 shifts of 12582912 B per link direction:
    # 255 · (13 + 50 + 324.29) µs = 0.09876 s; one way round it was 0.1815 s.
    (shipped,) = gemm_study(262144, 36864, 12288, 256, tpuv4, ["1d_tp"]).entries
    assert shipped.time_s == pytest.approx(255 * (63e-6 + 12582912 / 38.801e9), rel=1e-3)


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
