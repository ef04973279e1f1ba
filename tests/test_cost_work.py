"""Work bounds of the cost models (issue 20, finding 10): repeated communications are priced by
count, so neither a pass's list of communications nor the pricing of it grows with the slice
count S or the ring size P. Counted in objects and calls, never in seconds."""

from __future__ import annotations

import pytest

from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import REGISTRY, algorithm_names
from meshtune.cost.collectives import CommTime
from meshtune.cost.config import Config
from meshtune.cost.schedule import (
    AxisTraffic,
    Comm,
    comm_time,
    parallel_time,
    repeated,
    stage,
    traffic,
)
from meshtune.dataflow import Stationary, layer_dataflow
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer

AG = CollectiveKind.ALL_GATHER
SR = CollectiveKind.SEND_RECV
# Distinct operations one pass may list (two per direction, a diagonal's two hops, a skew, an
# unskew, a depth all-reduce): a bound that S and P do not enter.
MAX_DISTINCT = 12
# Link prices one cost call may take: a few per distinct operation and schedule part.
MAX_PRICES = 80
CHIPS = 4096
# Every dimension a large power of two: S and lcm(P_r, P_c) divide it on every mesh.
LAYER = FcLayer("l", 2**30, 2**30, 2**30, None)


def _blocking(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` with nothing overlapped: every communication is priced one by one."""
    return profile.model_copy(update={"overlapped": []})


def _extremes(algorithm: Algorithm) -> list[tuple[Mesh, Config]]:
    """On the most square, the tallest and the flattest mesh of :data:`CHIPS` chips the
    algorithm allows, its smallest and largest configuration."""
    meshes = [m for m in algorithm.meshes(CHIPS) if algorithm.mesh_problem(m) is None]
    if not meshes:  # e.g. the one-sided GeMM stops at 64 processes
        meshes = [m for m in algorithm.meshes(64) if algorithm.mesh_problem(m) is None]
    square = min(meshes, key=lambda m: abs(m.rows - m.cols))
    picked = []
    for mesh in dict.fromkeys([square, meshes[0], meshes[-1]]):
        choice = layer_dataflow(LAYER, Stationary.Y, False)
        if algorithm.dataflow_mode is not None:
            choice = layer_dataflow(LAYER, Stationary(algorithm.mode("auto")[0].upper()), False)
        configs, reason = algorithm.configs(choice, mesh, 8)
        assert reason is None, (algorithm.name, mesh, reason)
        picked += [(mesh, configs[0]), (mesh, configs[-1])]
    return picked


@pytest.mark.parametrize("name", algorithm_names())
def test_comms_and_pricing_stay_bounded_on_4096_chips(
    name: str, tpuv4: HardwareProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    algorithm = REGISTRY[name]
    profile = _blocking(tpuv4)
    data = profile.model_dump(mode="json")
    for kind in ("all_gather", "reduce_scatter", "send_recv"):
        data[kind]["axis2"] = data[kind]["axis0"]
    profile = HardwareProfile.model_validate(data)
    prices = 0
    real = Comm.time

    def counted(self: Comm, p: HardwareProfile) -> CommTime:
        nonlocal prices
        prices += 1
        return real(self, p)

    monkeypatch.setattr(Comm, "time", counted)
    largest_count = 0
    for mesh, config in _extremes(algorithm):
        for stationary in Stationary:
            if (
                algorithm.dataflow_mode is not None
                and stationary.value != algorithm.mode("auto")[0].upper()
            ):
                continue
            for op in layer_dataflow(LAYER, stationary, False).ops:
                comms = algorithm.comms(op, mesh, config, 2)
                assert len(comms) <= MAX_DISTINCT, (name, mesh, config, len(comms))
                largest_count = max([largest_count, *(c.count for c in comms)])
                prices = 0
                algorithm.cost(op, mesh, profile, config)
                assert prices <= MAX_PRICES, (name, mesh, config, prices)
    # Collective and Megatron run each collective once per pass (no loop); one-sided was bounded.
    if name not in ("collective", "megatron", "onesided"):
        # The repetitions are there, as counts: a ring or slice count of 64 or more.
        assert largest_count >= 63, name


def test_repeated_prices_and_counts_like_the_unrolled_list(tpuv4: HardwareProfile) -> None:
    gather = Comm(AG, 0, 4, 3, 100.0, 300.0)
    hop = Comm(SR, 1, 8, 1, 50.0, 50.0)
    both = [gather, hop]
    assert repeated(both, 0) == []
    assert repeated(both, 1) == both
    many = repeated(both, 1000)
    assert len(many) == 2 and [c.count for c in many] == [1000, 1000]
    assert repeated(many, 3)[0].count == 3000
    unrolled = both * 1000
    # 1000 launches, 3000 steps, 300 kB on axis 0; 1000 launches and steps, 50 kB on axis 1.
    assert (
        traffic(many)
        == traffic(unrolled)
        == (
            AxisTraffic(1000, 3000, 300_000),
            AxisTraffic(1000, 1000, 50_000),
            AxisTraffic(0, 0, 0),
        )
    )
    blocking = _blocking(tpuv4)
    for profile in (tpuv4, blocking):
        assert comm_time(many, profile).total_s == pytest.approx(
            comm_time(unrolled, profile).total_s, rel=1e-12
        )
        assert parallel_time(many, profile) == pytest.approx(
            parallel_time(unrolled, profile), rel=1e-12
        )
        assert stage(1e-3, many, profile) == pytest.approx(
            stage(1e-3, unrolled, profile), rel=1e-12
        )
    # The time of a counted operation is count times one issue's.
    assert many[0].time(tpuv4).total_s == pytest.approx(1000 * gather.time(tpuv4).total_s)
    with pytest.raises(ValueError, match="issued -1 times"):
        repeated(both, -1)
