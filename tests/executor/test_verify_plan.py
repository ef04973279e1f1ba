"""verify_plan on real plans (GPT-3 @ 16 and 256 chips), the reduced-size rule, corrupted plans."""

from __future__ import annotations

import json
from typing import Any

import pytest

from meshtune.cost.meshslice import MeshAxes
from meshtune.cost.traffic import AxisTraffic
from meshtune.dataflow import Stationary, layer_dataflow
from meshtune.errors import VerifyError
from meshtune.executor import PassCheck, verify_plan
from meshtune.executor import verify as verify_module
from meshtune.executor.verify import reduced_layer
from meshtune.layers import FcLayer
from meshtune.plan import Plan, make_plan
from meshtune.specs import HardwareProfile, ModelSpec


@pytest.fixture(scope="module")
def plan16(gpt3: ModelSpec, tpuv4: HardwareProfile) -> Plan:
    return make_plan(gpt3, tpuv4, 16)


def corrupt(plan: Plan, layer: int, **changes: Any) -> Plan:
    data = json.loads(plan.to_json())
    for key, value in changes.items():
        if key == "forward_dataflow":
            data["layers"][layer]["passes"][0]["dataflow"] = value
            data["layers"][layer]["dataflows"]["forward"] = value
        else:
            data["layers"][layer][key] = value
    return Plan.model_validate(data)


@pytest.mark.parametrize("chips", [16, 256])
def test_gpt3_plans_verify(gpt3: ModelSpec, tpuv4: HardwareProfile, chips: int) -> None:
    plan = make_plan(gpt3, tpuv4, chips)
    report = verify_plan(plan)
    assert report.ok, report.failures()
    assert len(report.checks) == 3 * len(plan.layers)
    assert report.mesh == MeshAxes(plan.mesh.rows, plan.mesh.cols)
    for check in report.checks:
        # Every pass really moved data on at least one axis, and S matches the plan.
        assert any(t.bytes_per_link > 0 for t in check.counted)
        assert check.slices == next(lp.slices for lp in plan.layers if lp.name == check.layer)


def test_reduced_sizes_keep_every_divisibility() -> None:
    # Y-stationary on 2×8, B = 8, S = 12: in is sliced (unit lcm(2, 8, 8·8·12) = 768);
    # tokens over mesh rows (unit 2), out over mesh columns (unit 8); each doubled.
    layer = layer_dataflow(FcLayer("qkv", 16384, 12288, 36864, None), Stationary.Y, False)
    small = reduced_layer(layer, MeshAxes(2, 8), 8, 12)
    assert (small.tokens, small.in_features, small.out_features) == (4, 1536, 16)


def test_reduced_size_never_exceeds_the_full_size() -> None:
    layer = layer_dataflow(FcLayer("l", 2, 64, 8, None), Stationary.Y, False)
    small = reduced_layer(layer, MeshAxes(2, 2), 8, 2)
    assert (small.tokens, small.in_features, small.out_features) == (2, 64, 4)


def test_too_many_chips_is_refused(plan16: Plan) -> None:
    with pytest.raises(VerifyError, match=r"2x8 has 16 chips, more than --max-chips 8"):
        verify_plan(plan16, max_chips=8)


def test_an_invalid_slice_count_fails_with_the_valid_ones(plan16: Plan) -> None:
    report = verify_plan(corrupt(plan16, 0, slices=7))
    assert not report.ok
    assert report.failures()[0].startswith("layer qkv: slices 7 is not valid for sliced dimension")
    # in = 12288 = 192 · (B = 8) · lcm(2, 8): the valid S are the divisors of 192.
    assert "(valid: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 192)" in report.failures()[0]
    assert {c.layer for c in report.checks} == {"attn_out", "mlp_up", "mlp_down"}


def test_a_swapped_dataflow_fails_naming_table_1(plan16: Plan) -> None:
    report = verify_plan(corrupt(plan16, 1, forward_dataflow="LS"))
    assert report.failures() == [
        "layer attn_out forward: plan says LS (m=16384, n=12288, k=12288), Table 1 row Y-stn "
        "gives OS (m=16384, n=12288, k=12288)"
    ]


def test_a_wrong_sharding_or_sliced_dim_fails(plan16: Plan) -> None:
    report = verify_plan(corrupt(plan16, 2, sliced_dim="out"))
    assert report.failures() == ["layer mlp_up: sliced_dim out should be in"]


def test_a_numerical_mismatch_is_reported(plan16: Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    real = verify_module.dense_gemm
    monkeypatch.setattr(verify_module, "dense_gemm", lambda op, a, b: real(op, a, b) + 1e-3)
    report = verify_plan(plan16)
    assert not report.ok
    assert report.failures()[0].startswith("layer qkv forward: max |error| 0.001 exceeds atol")


def test_a_traffic_mismatch_names_layer_pass_axis_and_both_numbers() -> None:
    check = PassCheck(
        layer="qkv",
        pass_="forward",
        dataflow="OS",
        m=4,
        n=16,
        k=1536,
        slices=12,
        max_abs_error=0.0,
        numerics_ok=True,
        counted=(AxisTraffic(12, 12, 3072), AxisTraffic(12, 84, 5376)),
        predicted=(AxisTraffic(12, 12, 3000), AxisTraffic(12, 84, 5376)),
    )
    assert not check.ok
    assert check.failures() == [
        "layer qkv forward axis 0: counted bytes_per_link 3072, predicted 3000"
    ]


def test_seed_changes_the_operands_not_the_verdict(plan16: Plan) -> None:
    a, b = verify_plan(plan16, seed=1), verify_plan(plan16, seed=2)
    assert a.ok and b.ok
    assert [c.counted for c in a.checks] == [c.counted for c in b.checks]
    assert [c.max_abs_error for c in a.checks] != [c.max_abs_error for c in b.checks]


def test_report_json_round_trips(plan16: Plan) -> None:
    data = json.loads(verify_plan(plan16).to_json())
    assert data["ok"] is True
    assert data["mesh"] == {"rows": 2, "cols": 8}
    first = data["checks"][0]
    assert first["counted"] == first["predicted"]
    assert set(first["counted"][0]) == {"launches", "steps", "bytes_per_link"}


def test_a_w_stationary_plan_with_transposed_layers_verifies(
    gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    # One sequence of 256 tokens makes W the largest matrix: W-stn rows, half transposed.
    plan = make_plan(gpt3, tpuv4, 8, batch=1, seq_len=256)
    assert {(lp.stationary, lp.transposed) for lp in plan.layers} == {("W", False), ("W", True)}
    report = verify_plan(plan)
    assert report.ok, report.failures()
