"""PrimePar's spatial-temporal primitive (Wang et al., ASPLOS 2024 slides; meshtune.cost.primepar).

Hand-worked costs use the round-number profile of ``conftest.py`` (times in µs in the comments):
send-recv axis0 (t_launch 50, t_sync 5, 1 GB/s), axis1 (60, 6, 1 GB/s); 1e12 FLOP/s effective;
2 bytes per element; m = 512, n = 2048, k = 4096 on 4 × 4, so g = gemm(128, 512, 1024) =
134.217728 and the shards are 262144 B (m·k/16 · 2 or k·m/16 · 2), 1048576 B (k·n/16 · 2) and
131072 B (m·n/16 · 2).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshtune.algorithms.registry import REGISTRY
from meshtune.cli import app
from meshtune.cost.config import Config
from meshtune.cost.schedule import AxisTraffic, traffic
from meshtune.dataflow import Dataflow, GemmOp, Pass, Stationary, layer_dataflow
from meshtune.errors import InfeasibleError
from meshtune.executor.mesh import VirtualMesh, dense_gemm, shard, unshard
from meshtune.executor.primepar import (
    backward_data,
    backward_weight,
    forward,
    gather,
    layout,
    place,
    skew_input,
    unskew_output,
)
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import make_plan

PRIMEPAR = REGISTRY["primepar"]
US = 1e-6
M, N, K = 512, 2048, 4096
BPE = 2


def approx(value: float) -> Any:
    return pytest.approx(value, rel=1e-12, abs=1e-18)


def op(flow: Dataflow, transposed: bool = False) -> GemmOp:
    return GemmOp(Pass.FORWARD, flow, M, N, K, transposed, formula="")


def counted(mesh: VirtualMesh) -> tuple[AxisTraffic, ...]:
    return tuple(AxisTraffic(*c.as_tuple()) for c in mesh.counters)


# ------------------------------------------------------------------------------ constraints


def test_meshes_and_refusals() -> None:
    assert PRIMEPAR.mesh_problem(Mesh(2, 4)) == "primepar needs a 2^k × 2^k mesh, got 2x4"
    assert PRIMEPAR.mesh_problem(Mesh(3, 3)) == "primepar needs a 2^k × 2^k mesh, got 3x3"
    assert PRIMEPAR.mesh_problem(Mesh(4, 4, 2)) == "primepar needs a 2^k × 2^k mesh, got 4x4x2"
    for side in (1, 2, 4, 8, 16):
        assert PRIMEPAR.mesh_problem(Mesh(side, side)) is None
    assert PRIMEPAR.meshes(16) == (Mesh(4, 4),)
    assert PRIMEPAR.meshes(256) == (Mesh(16, 16),)
    assert PRIMEPAR.meshes(1) == (Mesh(1, 1),)
    for chips in (2, 8, 32, 36, 128):
        assert PRIMEPAR.meshes(chips) == ()
    with pytest.raises(ValueError, match="primepar needs a 2\\^k × 2\\^k mesh, got 2x4"):
        PRIMEPAR.comms(op(Dataflow.OS), Mesh(2, 4), Config.of(), BPE)


def test_only_the_y_stationary_row_is_accepted() -> None:
    layer = FcLayer("fc", 64, 32, 96, None)
    for stationary in Stationary:
        for transposed in (False, True):
            configs, reason = PRIMEPAR.configs(
                layer_dataflow(layer, stationary, transposed), Mesh(4, 4), 2
            )
            if stationary is Stationary.Y:
                assert (configs, reason) == ((Config.of(),), None)
            else:
                assert configs == ()
                assert reason == (
                    "layer fc: primepar defines the Y-stationary row of Table 1 only (forward "
                    f"OS, backward data LS, backward weight RS), got {stationary.value}-stationary"
                )
    assert PRIMEPAR.dataflow_mode == "ystn"


def test_the_planner_refuses_a_chip_count_without_a_square_power_of_two(
    gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    with pytest.raises(
        InfeasibleError,
        match=re.escape(
            "primepar has no mesh shape of 32 chips; nearest feasible chip counts: 16 (fewer), "
            "64 (more)"
        ),
    ):
        make_plan(gpt3, tpuv4, 32, algorithm="primepar")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "128"], "primepar has no mesh shape of 128 chips"),
        (["-n", "16", "--shapes", "2x8"], "primepar needs a 2^k × 2^k mesh, got 2x8"),
    ],
)
def test_refusals_are_one_line_in_the_cli(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["plan", "gpt3", "--mesh-only", "-a", "primepar", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith("meshtune: error: ")
    assert message in result.stderr
    assert len(result.stderr.splitlines()) == 1


# ------------------------------------------------------------------------------ the DSIs


def test_layout_matches_the_slides_k2_tables() -> None:
    # Forward t = 3 ("O_{0,0} += I_{0,3} × W_{3,0}", "O_{2,3} += I_{2,0} × W_{0,3}").
    fwd = layout(Dataflow.OS, 4, 3)
    assert [int(x[0, 0]) for x in fwd["A"] + fwd["B"]] == [0, 3, 3, 0]
    assert [int(x[2, 3]) for x in fwd["A"] + fwd["B"]] == [2, 0, 0, 3]
    # Gradient: "Accumulated dW when t < 3", first two rows.
    acc = layout(Dataflow.RS, 4, 0)["C"]
    assert [(int(acc[0][0, c]), int(acc[1][0, c])) for c in range(4)] == [
        (3, 3),
        (0, 0),
        (1, 1),
        (2, 2),
    ]
    assert [(int(acc[0][1, c]), int(acc[1][1, c])) for c in range(4)] == [
        (0, 3),
        (1, 0),
        (2, 1),
        (3, 2),
    ]
    # Gradient t = 3, chip (1, 0): "dW_{1,0} += I_{1,0}ᵀ × dO_{0,0}" (I as [M, N]: block (0, 1)).
    last = layout(Dataflow.RS, 4, 3)
    assert [int(x[1, 0]) for x in last["A"] + last["B"] + last["C"]] == [0, 1, 0, 0, 1, 0]


@given(st.integers(0, 4))
def test_no_replication_and_no_all_reduce(k: int) -> None:
    # The slides' ❶ and ❷: at every step the blocks of each tensor are a permutation (no chip
    # shares a block with another), and over the P steps each chip sees every block of the
    # summed-over dimension (no all-reduce).
    p = 2**k
    contraction = {Dataflow.OS: ("A", 1), Dataflow.LS: ("A", 1), Dataflow.RS: ("A", 0)}
    for flow, (name, axis) in contraction.items():
        seen = np.zeros((p, p, p), dtype=bool)
        for t in range(p):
            held = layout(flow, p, t)
            for rows, cols in held.values():
                assert (
                    len(set(zip(rows.ravel().tolist(), cols.ravel().tolist(), strict=True)))
                    == p * p
                )
            seen[np.arange(p)[:, None], np.arange(p)[None, :], held[name][axis]] = True
        assert seen.all()


# ------------------------------------------------------------------ oracle and traffic


@pytest.mark.parametrize("side", [2, 4, 8])
@pytest.mark.parametrize("transposed", [False, True])
def test_three_passes_match_dense_numpy_and_predicted_traffic(side: int, transposed: bool) -> None:
    rng = np.random.default_rng(side)
    layer = FcLayer("fc", 8 * side, 2 * side, 3 * side, None)
    for gemm in layer_dataflow(layer, Stationary.Y, transposed).ops:
        a = rng.standard_normal(gemm.operand_shapes[0])
        b = rng.standard_normal(gemm.operand_shapes[1])
        virtual = VirtualMesh(side, side, BPE)
        got = PRIMEPAR.execute(gemm, a, b, virtual, Config.of(), 1)
        np.testing.assert_allclose(got, dense_gemm(gemm, a, b), rtol=1e-10, atol=1e-10)
        predicted = traffic(PRIMEPAR.comms(gemm, Mesh(side, side), Config.of(), BPE))
        assert counted(virtual) == predicted, gemm.dataflow


@pytest.mark.parametrize("side", [2, 4, 8])
def test_forward_to_backward_continuity_moves_nothing(side: int) -> None:
    """The slides' ❸: the forward's last layout is where both backward passes start, backward
    data's last dO is where the gradient starts, and W ends at home; run back to back on the
    same arrays, the three passes move exactly what their own schedules predict."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4 * side, 2 * side))  # I: tokens × in
    w = rng.standard_normal((2 * side, 3 * side))  # W: in × out
    dy = rng.standard_normal((4 * side, 3 * side))  # dO: tokens × out
    mesh = VirtualMesh(side, side, BPE)
    first = {flow: layout(flow, side, 0) for flow in Dataflow}

    y, i_last, w_last = forward(
        mesh,
        skew_input(mesh, shard(x, side, side), False),
        place(w, first[Dataflow.OS]["B"]),
        False,
    )
    after_forward = counted(mesh)
    # Exactly where the next phases start, by the slides' formulas (nothing moves in between).
    np.testing.assert_array_equal(w_last, place(w, first[Dataflow.LS]["B"]))
    np.testing.assert_array_equal(i_last, place(x, first[Dataflow.RS]["A"]))

    dx, do_last, w_home = backward_data(mesh, shard(dy, side, side), w_last, False)
    np.testing.assert_array_equal(do_last, place(dy, first[Dataflow.RS]["B"]))
    np.testing.assert_array_equal(w_home, place(w, first[Dataflow.OS]["B"]))
    dw = backward_weight(mesh, i_last, do_last, False)

    np.testing.assert_allclose(unshard(y), x @ w, rtol=1e-10)
    np.testing.assert_allclose(unshard(unskew_output(mesh, dx, False)), dy @ w.T, rtol=1e-10)
    np.testing.assert_allclose(gather(dw, first[Dataflow.OS]["B"]), x.T @ dy, rtol=1e-10)

    layer = FcLayer("fc", 4 * side, 2 * side, 3 * side, None)
    ops = layer_dataflow(layer, Stationary.Y, False).ops
    schedules = [traffic(PRIMEPAR.comms(o, Mesh(side, side), Config.of(), BPE)) for o in ops]
    assert after_forward == schedules[0]
    total = tuple(
        AxisTraffic(*(sum(t[axis][f] for t in schedules) for f in range(3))) for axis in range(3)
    )
    assert counted(mesh) == total


# --------------------------------------------------------------------------- hand-worked


def test_forward_hand_worked(round_profile: HardwareProfile) -> None:
    # I shard 262144 B from the right (axis 1): 60 + 6 + 262.144 = 328.144; W shard 1048576 B
    # from below (axis 0): 50 + 5 + 1048.576 = 1103.576.
    # prologue = skew of I, every row the shorter way, ⌊P/2⌋ = 2 shifts: 656.288; steady =
    # max(max(328.144, 1103.576), g) = 1103.576 (3 times); epilogue = g. Total 656.288 +
    # 3310.728 + 134.217728 = 4101.233728.
    # comm: 5 I shifts and 3 W shifts: launch 5·60 + 3·50 = 450, sync 30 + 15 = 45,
    # transfer 5·262.144 + 3·1048.576 = 4456.448.
    cost = PRIMEPAR.cost(op(Dataflow.OS), Mesh(4, 4), round_profile, Config.of())
    assert cost.iterations == 4
    assert cost.prologue_s == approx(656.288 * US)
    assert cost.steady_s == approx(1103.576 * US)
    assert cost.epilogue_s == approx(134.217728 * US)
    assert cost.total_s == approx(4101.233728 * US)
    assert cost.compute_s == approx(536.870912 * US)
    assert cost.comm.launch_s == approx(450 * US)
    assert cost.comm.sync_s == approx(45 * US)
    assert cost.comm.transfer_s == approx(4456.448 * US)
    assert traffic(PRIMEPAR.comms(op(Dataflow.OS), Mesh(4, 4), Config.of(), BPE)) == (
        AxisTraffic(3, 3, 3 * 1048576),
        AxisTraffic(5, 5, 5 * 262144),
        AxisTraffic(0, 0, 0),
    )


def test_backward_data_hand_worked(round_profile: HardwareProfile) -> None:
    # dO shard 262144 B from the right (axis 1): 328.144. W 1048576 B from the top right: down
    # (axis 0) 1103.576, then left (axis 1) 66 + 1048.576 = 1114.576. dI 131072 B: 197.072.
    # steady = max(max(328.144, 1103.576) + 1114.576, g) = 2218.152 (3 times);
    # epilogue = W home max(1114.576, g) + unskew (every row the shorter way) 2 · 197.072 =
    # 1508.72.
    # comm: axis 1 carries 3 dO, 4 W and 2 dI shifts, axis 0 3 W hops: launch 540 + 150 = 690,
    # sync 54 + 15 = 69, transfer 786.432 + 7340.032 + 262.144 = 8388.608.
    cost = PRIMEPAR.cost(op(Dataflow.LS), Mesh(4, 4), round_profile, Config.of())
    assert cost.iterations == 4
    assert cost.prologue_s == 0.0
    assert cost.steady_s == approx(2218.152 * US)
    assert cost.epilogue_s == approx(1508.72 * US)
    assert cost.total_s == approx(8163.176 * US)
    assert cost.comm.launch_s == approx(690 * US)
    assert cost.comm.sync_s == approx(69 * US)
    assert cost.comm.transfer_s == approx(8388.608 * US)


def test_backward_weight_hand_worked(round_profile: HardwareProfile) -> None:
    # I shard 262144 B: up (axis 0) 55 + 262.144 = 317.144, right (axis 1) 328.144. dO shard
    # 1048576 B: up 1103.576, left 1114.576. dW 131072 B from the right: 197.072.
    # steady (P − 2 = 2 times) = max(I right 328.144, dO up 1103.576) + I up 317.144 = 1420.72;
    # into the last step: max(dO left 1114.576, I up 317.144) + dO up 1103.576 = 2218.152;
    # last step: max(dW 197.072, g) = 197.072. Total 2841.44 + 2415.224 = 5256.664.
    # comm: axis 0 6 hops (3 I, 3 dO), axis 1 4 (2 I, 1 dO, 1 dW): launch 300 + 240 = 540,
    # sync 30 + 24 = 54, transfer 5·262.144 + 4·1048.576 + 131.072 = 5636.096.
    cost = PRIMEPAR.cost(op(Dataflow.RS), Mesh(4, 4), round_profile, Config.of())
    assert cost.iterations == 3
    assert cost.steady_s == approx(1420.72 * US)
    assert cost.epilogue_s == approx(2415.224 * US)
    assert cost.total_s == approx(5256.664 * US)
    assert cost.comm.launch_s == approx(540 * US)
    assert cost.comm.sync_s == approx(54 * US)
    assert cost.comm.transfer_s == approx(5636.096 * US)


def test_two_by_two_gradient_and_one_chip(round_profile: HardwareProfile) -> None:
    # 2 × 2: no repeated stage; into the last step max(dO left, I up) + dO up, then the dW
    # shift. Shards ×4 of the 4 × 4 ones: I 1048576 B, dO 4194304 B, dW 524288 B.
    # dO left 66 + 4194.304 = 4260.304; dO up 55 + 4194.304 = 4249.304; dW 66 + 524.288 =
    # 590.288; g = 2·256·1024·2048 / 1e12 = 1073.741824.
    cost = PRIMEPAR.cost(op(Dataflow.RS), Mesh(2, 2), round_profile, Config.of())
    assert cost.iterations == 1
    assert cost.total_s == approx((4260.304 + 4249.304 + 1073.741824) * US)
    one = PRIMEPAR.cost(op(Dataflow.LS), Mesh(1, 1), round_profile, Config.of())
    assert one.total_s == approx(2 * M * N * K / 1e12)
    assert PRIMEPAR.comms(op(Dataflow.LS), Mesh(1, 1), Config.of(), BPE) == []


def test_transposed_swaps_the_physical_axes(round_profile: HardwareProfile) -> None:
    plain = traffic(PRIMEPAR.comms(op(Dataflow.OS), Mesh(4, 4), Config.of(), BPE))
    flipped = traffic(PRIMEPAR.comms(op(Dataflow.OS, True), Mesh(4, 4), Config.of(), BPE))
    assert flipped == (plain[1], plain[0], plain[2])


def test_plans_gpt3_on_sixteen_chips(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    plan = make_plan(gpt3, tpuv4, 16, algorithm="primepar")
    assert plan.mesh.to_mesh() == Mesh(4, 4)
    # Against Cannon on the same Table 1 row, square mesh and send-recv links: with Cannon's
    # skews taking the shorter way round (⌊P/2⌋ hops, issue 14) PrimePar's missing skew of W no
    # longer pays for its backward data (W moving diagonally, two hops a step): 13.85 s of FC
    # time against Cannon's 13.21 s.
    cannon = make_plan(gpt3, tpuv4, 16, algorithm="cannon", mode="ystn")
    assert cannon.fc_time_s < plan.fc_time_s
    assert plan.layers[0].passes[1].total_s > cannon.layers[0].passes[1].total_s


def test_shifts_that_cannot_overlap_add_up(make_profile: Any) -> None:
    # With no kind overlapped every hop holds the chip before its GeMM: backward data's steady
    # stage is dO 328.144 + W down 1103.576 + W left 1114.576 + g 134.217728 = 2680.513728.
    blocking = make_profile(overlapped=[])
    cost = PRIMEPAR.cost(op(Dataflow.LS), Mesh(4, 4), blocking, Config.of())
    assert cost.steady_s == approx(2680.513728 * US)
