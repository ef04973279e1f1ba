"""Grouped expert GeMMs (issue 18): a mesh holding G experts runs G GeMMs of one expert's
weight over each expert's own tokens (meshtune.model.moe); hand-worked time and traffic, phase 1 on
one expert's matrices, the executor once per expert, and G = 1 priced exactly as before."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pytest import approx

from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_model, load_profile
from meshtune.cost.config import Config
from meshtune.cost.schedule import AxisTraffic, traffic
from meshtune.dataflow import Stationary, choose_stationary, layer_dataflow, plan_dataflows
from meshtune.engines.passes import plan_passes
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.plan import Plan, read_plan
from meshtune.planner.make import make_plan
from meshtune.search import search
from meshtune.timeline.trace import plan_timelines
from meshtune.verify.run import verify_plan

US = 1e-6
MESHSLICE = REGISTRY["meshslice"]
ONE = Config.of(slices=1)


def test_grouped_gemm_time_and_traffic_by_hand(round_profile: HardwareProfile) -> None:
    # 4 experts of 64 tokens each, W 256 × 512, Y-stationary forward OS on 2 × 2 (P = 4), S = 1.
    # One expert: AG_col of X: 64·256/4 el · 2 B = 8192 B on the axis-1 ring of 2
    #   = 20 + 1 · (2 + 8192 / 2e9 s = 4.096) = 26.096 µs;
    # AG_row of W: 256·512/4 · 2 = 65536 B on the axis-0 ring of 2 = 10 + (1 + 65.536) = 76.536;
    # GeMM 2·64·512·256 / 4 / 1e12 = 4.194304 µs; total = max(76.536, 26.096) + 4.194304
    #   = 80.730304 µs. The group: 4 × that = 322.921216 µs, every expert's weight moved.
    fc = FcLayer("mlp_up", 64, 256, 512, None, groups=4)
    forward = layer_dataflow(fc, Stationary.Y, False).ops[0]
    assert (forward.m, forward.n, forward.k, forward.groups) == (64, 512, 256, 4)
    assert forward.flops == 4 * 2 * 64 * 512 * 256
    cost = MESHSLICE.cost(forward, Mesh(2, 2), round_profile, ONE)
    assert cost.total_s == approx(4 * 80.730304 * US)
    assert cost.compute_s == approx(4 * 4.194304 * US)
    assert cost.prologue_s + cost.epilogue_s == approx(cost.total_s)  # S = 1: no steady state
    assert cost.comm.launch_s == approx(4 * (20 + 10) * US)
    assert cost.comm.sync_s == approx(4 * (2 + 1) * US)
    assert cost.comm.transfer_s == approx(4 * (4.096 + 65.536) * US)
    moved = traffic(MESHSLICE.pass_comms(forward, Mesh(2, 2), ONE, 2))
    assert moved == (AxisTraffic(4, 4, 4 * 65536), AxisTraffic(4, 4, 4 * 8192), (0, 0, 0))
    # The same 256 rows priced one expert wide (the old layer) move W once:
    # max(76.536, 20 + 2 + 16.384) + 16.777216 = 93.313216 µs.
    wide = layer_dataflow(FcLayer("mlp_up", 256, 256, 512, None), Stationary.Y, False).ops[0]
    assert MESHSLICE.cost(wide, Mesh(2, 2), round_profile, ONE).total_s == approx(93.313216 * US)


def test_phase_one_compares_one_experts_matrices() -> None:
    # 256 rows over 4 experts of 64: X 64·256, W 256·512, Y 64·512 → W is the largest and stays
    # (weights stationary, tokens move); one expert wide over all 256 rows Y ties W and stays.
    grouped = FcLayer("mlp_up", 64, 256, 512, None, groups=4)
    assert choose_stationary(grouped) is Stationary.W
    assert choose_stationary(FcLayer("mlp_up", 256, 256, 512, None)) is Stationary.Y


def test_the_executor_runs_a_grouped_pass_once_per_expert() -> None:
    """Each expert's GeMM on the virtual mesh equals its dense product; the traffic the mesh
    counted over the G runs equals the grouped pass's predicted traffic."""
    fc = FcLayer("mlp_up", 32, 64, 64, None, groups=3)  # W-stationary, tokens sliced
    block = plan_dataflows([fc])
    assert block.layers[0].stationary is Stationary.W
    assert Config.of(slices=2) in MESHSLICE.configs(block.layers[0], Mesh(2, 2), 8)[0]
    rng = np.random.default_rng(0)
    mesh = Mesh(2, 2)
    virtual = VirtualMesh(2, 2, 2)
    for op in block.layers[0].ops:
        for _ in range(op.groups):
            shape_a, shape_b = op.operand_shapes
            a, b = rng.uniform(-1, 1, shape_a), rng.uniform(-1, 1, shape_b)
            got = MESHSLICE.execute(op, a, b, virtual, Config.of(slices=2), 8)
            np.testing.assert_allclose(got, dense_gemm(op, a, b), rtol=1e-12, atol=1e-12)
    counted = tuple(AxisTraffic(*c.as_tuple()) for c in virtual.counters)
    predicted = [
        traffic(MESHSLICE.pass_comms(op, mesh, Config.of(slices=2), 2))
        for op in block.layers[0].ops
    ]
    assert counted == tuple(
        AxisTraffic(*(sum(t[axis][i] for t in predicted) for i in range(3))) for axis in range(3)
    )


@given(groups=st.integers(1, 9), name=st.sampled_from(sorted(REGISTRY)))
def test_a_group_costs_its_gemm_groups_times(groups: int, name: str) -> None:
    """Every registered algorithm: G GeMMs of one shape take G times one's time and move G
    times its traffic; G = 1 is the ungrouped pass itself."""
    algorithm = REGISTRY[name]
    profile = load_profile("tpuv4")
    fc = FcLayer("mlp_up", 256, 128, 512, None)
    mesh = next(m for m in algorithm.meshes(4) if algorithm.mesh_problem(m) is None)
    one = layer_dataflow(fc, Stationary.Y, False)
    many = layer_dataflow(FcLayer("mlp_up", 256, 128, 512, None, groups), Stationary.Y, False)
    configs, reason = algorithm.configs(one, mesh, profile.slice_block)
    assert reason is None
    for single, grouped in zip(one.ops, many.ops, strict=True):
        base = algorithm.cost(single, mesh, profile, configs[0])
        got = algorithm.cost(grouped, mesh, profile, configs[0])
        assert got.total_s == approx(groups * base.total_s, rel=1e-12)
        assert got.compute_s == approx(groups * base.compute_s, rel=1e-12)
        want = traffic(algorithm.comms(single, mesh, configs[0], 2))
        assert traffic(algorithm.pass_comms(grouped, mesh, configs[0], 2)) == tuple(
            AxisTraffic(*(groups * v for v in axis)) for axis in want
        )
        if groups == 1:
            assert got == base


def test_one_expert_per_mesh_prices_as_the_ungrouped_layer() -> None:
    """Mixtral at EP 8 holds one expert a mesh: its MLP layers are the one-expert-wide layers
    of before (8,192 rows for 4,096 tokens, top 2), priced to the same seconds."""
    mixtral, h100 = load_model("mixtral-8x7b"), load_profile("h100-8gpu-nodes")
    grouped = fc_layers(mixtral, 1, 4096, ep=8)
    before = (
        FcLayer("qkv", 4096, 4096, 6144, None),
        FcLayer("attn_out", 4096, 4096, 4096, "qkv"),
        FcLayer("mlp_up", 8192, 4096, 28672, None),
        FcLayer("mlp_down", 8192, 14336, 4096, "mlp_up"),
    )
    assert grouped == before
    a = search(grouped, h100, 8, blocks=32).best
    b = search(before, h100, 8, blocks=32).best
    assert (a.mesh, a.time_s) == (b.mesh, b.time_s)
    # a dense model's layers are never grouped
    assert {fc.groups for fc in fc_layers(load_model("gpt3"), 1, 2048)} == {1}


def test_fewer_experts_per_mesh_move_fewer_weights() -> None:
    """Mixtral on an 8 × 1 H100 mesh: the MLP layers of EP 1 (8 experts a mesh) take longer
    than those of EP 8 (one expert, the same rows), since a weight-moving dataflow moves each
    expert's weight."""
    mixtral, h100 = load_model("mixtral-8x7b"), load_profile("h100-8gpu-nodes")
    times = {}
    for ep in (1, 8):
        layers = fc_layers(mixtral, 2, 4096, ep)
        result = search(layers, h100, 8, blocks=32, shapes=[Mesh(8, 1)]).best
        times[ep] = sum(c.time_s for c in result.layers if c.dataflow.layer.name[:3] == "mlp")
    assert times[1] > 1.2 * times[8]


def test_expert_groups_need_an_ep_that_divides_the_experts() -> None:
    moe = load_model("deepseek-v3").moe
    assert moe is not None
    assert moe.expert_groups(64) == 256 // 64 + 1  # and the one shared expert
    with pytest.raises(ValueError, match="ep 3 does not divide 256 experts"):
        moe.expert_groups(3)


@pytest.fixture(scope="module")
def grouped_plan() -> Plan:
    """Mixtral on one 8-chip mesh: all 8 experts on the mesh, MLP layers of 8 GeMMs."""
    return make_plan(
        load_model("mixtral-8x7b"), load_profile("h100-8gpu-nodes"), 8, batch=1, seq_len=4096
    )


def test_a_grouped_plan_records_its_groups_and_replays_each_gemm(grouped_plan: Plan) -> None:
    assert [layer.groups for layer in grouped_plan.layers] == [1, 1, 8, 8]
    text = grouped_plan.to_json()
    assert text.count('"groups"') == 2  # written for the grouped layers only
    assert read_plan(text, "p.json") == grouped_plan
    h100 = load_profile("h100-8gpu-nodes")
    timelines = plan_timelines(grouped_plan, h100, "mlp_up")
    recorded = grouped_plan.layers[2].passes
    assert len(timelines) == 3 * 8  # each pass once per expert
    for i, plan_pass in enumerate(recorded):
        replayed = sum(t.total_s for t in timelines[8 * i : 8 * i + 8])
        assert replayed == approx(plan_pass.total_s, rel=1e-9)
    # the engine runs (and predicts) one GeMM of the group: an eighth of the recorded pass
    up_fwd = plan_passes(grouped_plan, "full", h100)[6]
    assert (up_fwd.layer, up_fwd.op.groups) == ("mlp_up", 1)
    assert up_fwd.predicted_s == approx(recorded[0].total_s / 8, rel=1e-12)


def test_a_tampered_group_count_fails_verify(grouped_plan: Plan) -> None:
    data = json.loads(grouped_plan.to_json())
    data["layers"][2]["groups"] = 4
    report = verify_plan(read_plan(json.dumps(data), "tampered.json"), execute=False)
    assert not report.ok
    assert "layer mlp_up: groups 4 differ from the model's 8" in " ".join(report.problems)
