"""Hand-worked costs of the baselines (SUMMA, Cannon, Wang; MeshSlice §2.3, §4.2, §4.3).

Every number below is worked from the formulas in the module docstrings of
:mod:`meshtune.cost.summa`, :mod:`meshtune.cost.cannon` and :mod:`meshtune.cost.wang`, with the
round-number profile of ``conftest.py`` (times in µs in the comments):
AG axis0 (10, 1, 1 GB/s), AG axis1 (20, 2, 2 GB/s), RdS axis0 (30, 3, 0.5 GB/s), RdS axis1
(40, 4, 4 GB/s), send-recv axis0 (50, 5, 1 GB/s), send-recv axis1 (60, 6, 1 GB/s) as
(t_launch, t_sync, bw); 1e12 FLOP/s effective; 2 bytes per element. All GeMMs are
m = 512, n = 2048, k = 4096.
"""

from __future__ import annotations

from typing import Any

import pytest

from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.config import Config
from meshtune.cost.schedule import AxisTraffic, PassCost, traffic
from meshtune.dataflow import Dataflow, GemmOp, Pass
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile

US = 1e-6
M, N, K = 512, 2048, 4096


def approx(value: float) -> Any:
    return pytest.approx(value, rel=1e-12, abs=1e-18)


def op(flow: Dataflow, transposed: bool = False) -> GemmOp:
    return GemmOp(Pass.FORWARD, flow, M, N, K, transposed, formula="")


def check(
    cost: PassCost,
    *,
    iterations: int,
    prologue: float,
    steady: float,
    epilogue: float,
    compute: float,
    launch: float,
    sync: float,
    transfer: float,
) -> None:
    assert cost.iterations == iterations
    assert cost.prologue_s == approx(prologue * US)
    assert cost.steady_s == approx(steady * US)
    assert cost.epilogue_s == approx(epilogue * US)
    assert cost.total_s == approx((prologue + (iterations - 1) * steady + epilogue) * US)
    assert cost.compute_s == approx(compute * US)
    assert cost.comm.launch_s == approx(launch * US)
    assert cost.comm.sync_s == approx(sync * US)
    assert cost.comm.transfer_s == approx(transfer * US)


# ------------------------------------------------------------------------------------ Wang
# On a half-duplex link the two halves of a both-ways shift take turns: a shift costs what a
# one-way shift of the whole shard costs, and the numbers below are worked that way. The
# full-duplex numbers follow in test_wang_*_both_ways_*.


def half_duplex(profile: HardwareProfile) -> HardwareProfile:
    return profile.model_copy(update={"full_duplex": False})


def test_wang_os_split_gather_hand_worked(round_profile: HardwareProfile) -> None:
    # 2 × 4, split = 2 (A's AG_col on the axis-1 ring of 4 becomes shifts), S = 2, u = 2.
    # shift of an A shard m·k/8 · 2 B = 524288 B: 60 + 6 + 524.288 = 590.288
    # plain AG_row of B (axis 0, ring 2): k·n/8 · 2 B = 2097152 B: 10 + 1 + 2097.152 = 2108.152
    # g = gemm(m/2, n/4, k/S) = 2·256·512·2048 / 1e12 = 536.870912
    # prologue = max(AG_row 2108.152, (u − 1) shifts 590.288) = 2108.152
    # steady = max(u shifts 1180.576, g) = 1180.576; epilogue = g
    # comm: launch 10 + 3·60 = 190; sync 1 + 3·6 = 19; transfer 2097.152 + 3·524.288 = 3670.016
    cost = REGISTRY["wang"].cost(
        op(Dataflow.OS), Mesh(2, 4), half_duplex(round_profile), Config.of(split=2, slices=2)
    )
    check(
        cost,
        iterations=2,
        prologue=2108.152,
        steady=1180.576,
        epilogue=536.870912,
        compute=1073.741824,
        launch=190,
        sync=19,
        transfer=3670.016,
    )
    assert cost.comm_wall_s == approx((2108.152 + 1180.576) * US)


def test_wang_ls_split_reduce_scatter_hand_worked(round_profile: HardwareProfile) -> None:
    # 2 × 4, split = 2: C's RdS_col on the axis-1 ring of 4 becomes running-sum shifts; S = 4.
    # shift of a C shard m·n/8 · 2 B = 262144 B: 60 + 6 + 262.144 = 328.144
    # plain AG_row of B (axis 0): n·k/8 · 2 B = 2097152 B: 2108.152 (before any GeMM)
    # g = gemm(m/2, n/S, k/4) = 2·256·512·1024 / 1e12 = 268.435456
    # prologue = AG + g = 2376.587456; steady = max(328.144, g) = 328.144; epilogue = 0 shifts
    cost = REGISTRY["wang"].cost(
        op(Dataflow.LS), Mesh(2, 4), half_duplex(round_profile), Config.of(split=2, slices=4)
    )
    check(
        cost,
        iterations=4,
        prologue=2376.587456,
        steady=328.144,
        epilogue=0.0,
        compute=1073.741824,
        launch=190,
        sync=19,
        transfer=2097.152 + 3 * 262.144,
    )
    assert cost.total_s == approx(3361.019456 * US)


def test_wang_rs_without_unrolling_is_shifts_then_reduce_scatter(
    round_profile: HardwareProfile,
) -> None:
    # 2 × 4, split = 2 (A's AG_col), S = 1 (u = 4): all three shifts come first, then the GeMM,
    # then the plain RdS_row of C (axis 0, ring 2): m·n/8 · 2 B = 262144 B:
    #   30 + 1·(3 + 262144 / 0.5e9 s = 524.288) = 557.288
    # shift of an A shard k·m/8 · 2 B = 524288 B: 590.288; g = gemm(m, n/4, k/2) = 1073.741824
    # prologue = 3 shifts = 1770.864; epilogue = g + RdS = 1631.029824
    cost = REGISTRY["wang"].cost(
        op(Dataflow.RS), Mesh(2, 4), half_duplex(round_profile), Config.of(split=2, slices=1)
    )
    check(
        cost,
        iterations=1,
        prologue=3 * 590.288,
        steady=max(4 * 590.288, 1073.741824),  # unused: one iteration
        epilogue=1073.741824 + 557.288,
        compute=1073.741824,
        launch=30 + 3 * 60,
        sync=3 + 3 * 6,
        transfer=524.288 + 3 * 524.288,
    )
    assert cost.total_s == approx(3401.893824 * US)


def test_fsdp_is_wang_on_a_ring_hand_worked(round_profile: HardwareProfile) -> None:
    # FSDP forward OS (X·W) on a 4 × 1 ring: A's ring has one chip, W's AG_row over the 4
    # chips of axis 0 is split into 3 shifts of a W shard k·n/4 · 2 B = 4194304 B:
    #   50 + 5 + 4194.304 = 4249.304; S = 4 (u = 1): g = gemm(m/4, n, k/4) = 2·128·2048·1024
    #   / 1e12 = 536.870912; prologue = 0 shifts = 0; steady = max(4249.304, g); epilogue = g
    cost = REGISTRY["fsdp"].cost(
        op(Dataflow.OS), Mesh(4, 1), half_duplex(round_profile), Config.of(split=1, slices=4)
    )
    check(
        cost,
        iterations=4,
        prologue=0.0,
        steady=4249.304,
        epilogue=536.870912,
        compute=4 * 536.870912,
        launch=3 * 50,
        sync=3 * 5,
        transfer=3 * 4194.304,
    )
    assert cost.total_s == approx(13284.782912 * US)
    assert cost == REGISTRY["wang"].cost(
        op(Dataflow.OS), Mesh(4, 1), half_duplex(round_profile), Config.of(split=1, slices=4)
    )


def test_wang_os_both_ways_hand_worked(round_profile: HardwareProfile) -> None:
    # As test_wang_os_split_gather_hand_worked on full-duplex links: a shift moves half an A
    # shard each way, 262144 B per link direction: 60 + 6 + 262.144 = 328.144
    # prologue = max(AG_row 2108.152, 1 shift) = 2108.152; steady = max(2 shifts 656.288,
    # g 536.870912) = 656.288; epilogue = g
    # comm: launch 190; sync 19; transfer 2097.152 + 3·262.144 = 2883.584
    cost = REGISTRY["wang"].cost(
        op(Dataflow.OS), Mesh(2, 4), round_profile, Config.of(split=2, slices=2)
    )
    check(
        cost,
        iterations=2,
        prologue=2108.152,
        steady=656.288,
        epilogue=536.870912,
        compute=1073.741824,
        launch=190,
        sync=19,
        transfer=2883.584,
    )


def test_fsdp_both_ways_hand_worked(round_profile: HardwareProfile) -> None:
    # As test_fsdp_is_wang_on_a_ring_hand_worked on full-duplex links: 2097152 B per link
    # direction, 50 + 5 + 2097.152 = 2152.152 = steady (> g 536.870912); total
    # 3 · 2152.152 + 536.870912 = 6993.326912
    cost = REGISTRY["fsdp"].cost(
        op(Dataflow.OS), Mesh(4, 1), round_profile, Config.of(split=1, slices=4)
    )
    assert cost.steady_s == approx(2152.152 * US)
    assert cost.total_s == approx(6993.326912 * US)
    assert cost.comm.transfer_s == approx(3 * 2097.152 * US)


def test_wang_on_a_ring_of_two_shifts_one_way(round_profile: HardwareProfile) -> None:
    # 2 × 1: both neighbours are the one other chip, so the shard goes whole (4 × 1 above
    # halves it): a W shard k·n/2 · 2 B = 8388608 B, 50 + 5 + 8388.608 = 8443.608 per shift.
    cost = REGISTRY["fsdp"].cost(
        op(Dataflow.OS), Mesh(2, 1), round_profile, Config.of(split=1, slices=2)
    )
    assert cost.steady_s == approx(8443.608 * US)


# ---------------------------------------------------------------------------------- Cannon


def test_cannon_os_hand_worked(round_profile: HardwareProfile) -> None:
    # 4 × 4 (P = 4, P² = 16). A shard m·k/16 · 2 B = 262144 B on axis 1: 60 + 6 + 262.144 =
    # 328.144; B shard k·n/16 · 2 B = 1048576 B on axis 0: 50 + 5 + 1048.576 = 1103.576.
    # skew: every ring the shorter way, ⌊P/2⌋ = 2 shifts: max(2 · 328.144, 2 · 1103.576) =
    # 2207.152; g = 2·128·512·1024 / 1e12 = 134.217728
    # steady = max(1103.576, g) = 1103.576 (P − 1 = 3 times); epilogue = g
    # comm: 5 A shifts and 5 B shifts: launch 5·60 + 5·50 = 550; sync 5·6 + 5·5 = 55;
    # transfer 5·262.144 + 5·1048.576 = 6553.6
    cost = REGISTRY["cannon"].cost(op(Dataflow.OS), Mesh(4, 4), round_profile, Config.of())
    check(
        cost,
        iterations=4,
        prologue=2207.152,
        steady=1103.576,
        epilogue=134.217728,
        compute=536.870912,
        launch=550,
        sync=55,
        transfer=6553.6,
    )
    assert cost.total_s == approx(5652.097728 * US)


def test_cannon_ls_hand_worked(round_profile: HardwareProfile) -> None:
    # 4 × 4. B shard n·k/16 · 2 B = 1048576 B on axis 0: 1103.576; C shard m·n/16 · 2 B =
    # 131072 B on axis 1: 60 + 6 + 131.072 = 197.072; g = 134.217728.
    # prologue = skew B (2 · 1103.576 = 2207.152) + first stage max(1103.576, g) = 3310.728
    # steady = max(B ∥ C = 1103.576, g) = 1103.576, iterations = P − 1 = 3 (2 steady stages)
    # epilogue = last stage max(197.072, g) + unskew 2 · 197.072 = 591.216
    # comm: 5 B shifts (launch 250, sync 25, transfer 5242.88) and 5 C shifts (300, 30,
    # 655.36)
    cost = REGISTRY["cannon"].cost(op(Dataflow.LS), Mesh(4, 4), round_profile, Config.of())
    check(
        cost,
        iterations=3,
        prologue=3310.728,
        steady=1103.576,
        epilogue=591.216,
        compute=536.870912,
        launch=550,
        sync=55,
        transfer=5242.88 + 655.36,
    )
    assert cost.total_s == approx(6109.096 * US)


def test_cannon_refuses_rectangular_meshes() -> None:
    cannon = REGISTRY["cannon"]
    assert cannon.mesh_problem(Mesh(2, 4)) == "cannon needs a square mesh, got 2x4"
    assert cannon.mesh_problem(Mesh(4, 4)) is None
    with pytest.raises(ValueError, match="cannon needs a square mesh, got 2x4"):
        cannon.comms(op(Dataflow.OS), Mesh(2, 4), Config.of(), 2)


# ----------------------------------------------------------------------------------- SUMMA


def test_summa_os_hand_worked(round_profile: HardwareProfile) -> None:
    # 2 × 4: L = lcm(2, 4) = 4 blocks of k; D = 2 packets; S = 2 (u = 2 blocks per iteration).
    # bcast_col of an A block (m/2)·(k/4) · 2 B = 524288 B on the axis-1 ring of 4:
    #   P + D − 2 = 4 stages of 262144 B: 20 + 4·(2 + 131.072) = 552.288
    # bcast_row of a B block (k/4)·(n/4) · 2 B = 1048576 B on the axis-0 ring of 2:
    #   2 stages of 524288 B: 10 + 2·(1 + 524.288) = 1060.576
    # g = gemm(m/2, n/4, k/S) = 536.870912
    # prologue = max(2 · 552.288, 2 · 1060.576) = 2121.152 = steady; epilogue = g
    # comm (L = 4 of each): launch 4·30 = 120; sync 4·(4·2 + 2·1) = 40;
    # transfer 4·(4·131.072 + 2·524.288) = 6291.456
    config = Config.of(packets=2, slices=2)
    cost = REGISTRY["summa"].cost(op(Dataflow.OS), Mesh(2, 4), round_profile, config)
    check(
        cost,
        iterations=2,
        prologue=2121.152,
        steady=2121.152,
        epilogue=536.870912,
        compute=1073.741824,
        launch=120,
        sync=40,
        transfer=6291.456,
    )
    assert cost.total_s == approx(4779.174912 * US)
    predicted = traffic(REGISTRY["summa"].comms(op(Dataflow.OS), Mesh(2, 4), config, 2))
    assert predicted == (
        AxisTraffic(4, 4 * 2, 4 * 1048576),
        AxisTraffic(4, 4 * 4, 4 * 524288),
        AxisTraffic(0, 0, 0),
    )


def test_summa_ls_hand_worked(round_profile: HardwareProfile) -> None:
    # 2 × 4, L = 4, D = 1, S = 4 (u = 1).
    # bcast_row of a B block (n/4)·(k/4) · 2 B = 1048576 B on the axis-0 ring of 2:
    #   1 stage: 10 + 1 + 1048.576 = 1059.576
    # reduce_col of a C block (m/2)·(n/4) · 2 B = 262144 B on the axis-1 ring of 4 (RdS
    #   parameters): 3 stages: 40 + 3·(4 + 65.536) = 248.608
    # g = gemm(m/2, n/S, k/4) = 268.435456
    # prologue = 1059.576; steady = max(1059.576, 248.608, g) = 1059.576;
    # epilogue = g + 248.608 = 517.043456
    cost = REGISTRY["summa"].cost(
        op(Dataflow.LS), Mesh(2, 4), round_profile, Config.of(packets=1, slices=4)
    )
    check(
        cost,
        iterations=4,
        prologue=1059.576,
        steady=1059.576,
        epilogue=517.043456,
        compute=1073.741824,
        launch=4 * (10 + 40),
        sync=4 * (1 + 3 * 4),
        transfer=4 * (1048.576 + 3 * 65.536),
    )
    assert cost.total_s == approx(4755.347456 * US)


@pytest.mark.parametrize("packets", [1, 4])
def test_summa_synchronisations_grow_quadratically_collective_linearly(packets: int) -> None:
    # On a P × P mesh SUMMA broadcasts L = P blocks per direction, each in P + D − 2 stages:
    # P·(P + D − 2) synchronisations per axis. Collective all-gathers once: P − 1 (§2.3.3-4).
    summa, collective = REGISTRY["summa"], REGISTRY["collective"]
    gemm = GemmOp(Pass.FORWARD, Dataflow.OS, 1024, 1024, 1024, False, formula="")
    summa_steps, collective_steps = [], []
    for p in (2, 4, 8, 16):
        config = Config.of(packets=packets, slices=p)
        axes = traffic(summa.comms(gemm, Mesh(p, p), config, 2))
        summa_steps.append(axes[0].steps)
        assert axes[1].steps == axes[0].steps == p * (p + packets - 2)
        collective_steps.append(
            traffic(collective.comms(gemm, Mesh(p, p), Config.of(slices=1), 2))[0].steps
        )
    assert collective_steps == [1, 3, 7, 15]
    assert summa_steps == [p * (p + packets - 2) for p in (2, 4, 8, 16)]
    # Doubling P multiplies SUMMA's count by about 4 and Collective's by about 2.
    assert summa_steps[-1] / summa_steps[-2] > 3.5
    assert collective_steps[-1] / collective_steps[-2] < 2.2
