"""verify_plan: real plans, the reduced-size rule, corrupted and self-contradicting plans."""

from __future__ import annotations

import json
from typing import Any

import pytest

from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.config import Config
from meshtune.cost.schedule import AxisTraffic
from meshtune.dataflow import Stationary, layer_dataflow
from meshtune.errors import VerifyError
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan
from meshtune.planner.make import make_plan
from meshtune.verify import run as verify_module
from meshtune.verify.run import PassCheck, reduced_layer, verify_plan


@pytest.fixture(scope="module")
def plan16(gpt3: ModelSpec, tpuv4: HardwareProfile) -> Plan:
    return make_plan(gpt3, tpuv4, 16)


def edited(plan: Plan, path: str, value: Any) -> Plan:
    """``plan`` with the field at dotted ``path`` (list indices as numbers) set to ``value``."""
    data = json.loads(plan.to_json())
    *parents, last = path.split(".")
    node: Any = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return Plan.model_validate(data)


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
    assert report.mesh == Mesh(plan.mesh.rows, plan.mesh.cols)
    for check in report.checks:
        # Every pass really moved data on at least one axis, and S matches the plan.
        assert any(t.bytes_per_link > 0 for t in check.counted)
        config = next(lp.config for lp in plan.layers if lp.name == check.layer)
        assert check.config == f"S={config['slices']}"


def test_reduced_sizes_keep_every_divisibility() -> None:
    # Y-stationary on 2×8, B = 8, S = 12: in is sliced (unit lcm(2, 8, 8·8·12) = 768);
    # tokens over mesh rows (unit 2), out over mesh columns (unit 8); each doubled.
    layer = layer_dataflow(FcLayer("qkv", 16384, 12288, 36864, None), Stationary.Y, False)
    small = reduced_layer(layer, REGISTRY["meshslice"], Mesh(2, 8), Config.of(slices=12), 8)
    assert (small.tokens, small.in_features, small.out_features) == (4, 1536, 16)


def test_reduced_size_never_exceeds_the_full_size() -> None:
    layer = layer_dataflow(FcLayer("l", 2, 64, 8, None), Stationary.Y, False)
    small = reduced_layer(layer, REGISTRY["meshslice"], Mesh(2, 2), Config.of(slices=2), 8)
    assert (small.tokens, small.in_features, small.out_features) == (2, 64, 4)


def test_too_many_chips_is_refused(plan16: Plan) -> None:
    with pytest.raises(VerifyError, match=r"2x8 has 16 chips, more than the limit of 8"):
        verify_plan(plan16, max_chips=8)


def test_an_invalid_slice_count_fails_with_the_valid_ones(plan16: Plan) -> None:
    report = verify_plan(corrupt(plan16, 0, config={"slices": 7}))
    assert not report.ok
    assert report.failures()[0].startswith(
        "layer qkv: configuration S=7 is not legal for meshslice on 2x8"
    )
    # in = 12288 = 192 · (B = 8) · lcm(2, 8): the valid S are the divisors of 192.
    legal = "; ".join(f"S={s}" for s in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 192))
    assert f"(legal: {legal})" in report.failures()[0]
    assert {c.layer for c in report.checks} == {"attn_out", "mlp_up", "mlp_down"}


def test_a_swapped_dataflow_fails_naming_table_1(plan16: Plan) -> None:
    report = verify_plan(corrupt(plan16, 1, forward_dataflow="LS"))
    assert report.failures() == [
        "layer attn_out forward: plan says LS Y = OS(X, W) (m=16384, n=12288, k=12288), Table 1 "
        "row Y-stn gives OS Y = OS(X, W) (m=16384, n=12288, k=12288)"
    ]


def test_a_wrong_sharding_or_sliced_dim_fails(plan16: Plan) -> None:
    report = verify_plan(corrupt(plan16, 2, sliced_dim="out"))
    assert report.failures() == [
        "layer mlp_up: stationary/transposed/sliced_dim ('Y', False, 'out') differ from phase "
        "1's ('Y', False, 'in')"
    ]


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
        algorithm="meshslice",
        dataflow="OS",
        m=4,
        n=16,
        k=1536,
        config="S=12",
        max_abs_error=0.0,
        numerics_ok=True,
        counted=(AxisTraffic(12, 12, 3072), AxisTraffic(12, 84, 5376), AxisTraffic(0, 0, 0)),
        predicted=(AxisTraffic(12, 12, 3000), AxisTraffic(12, 84, 5376), AxisTraffic(0, 0, 0)),
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
    assert data["mesh"] == {"rows": 2, "cols": 8, "depth": 1}
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


# --------------------------------------------------------------------------- self-consistency
# Issue: verify must fail (exit 1) a plan that contradicts itself or its inputs, naming the field.


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("mesh.rows", 16, "field 'mesh': 16x8 has 128 chips, but inputs.chips is 16"),
        ("mesh.cols", 1, "field 'mesh': 2x1 has 2 chips, but inputs.chips is 16"),
        ("inputs.chips", 512, "field 'mesh': 2x8 has 16 chips, but inputs.chips is 512"),
        ("utilization", -5, "field 'utilization' is negative (-5)"),
        ("utilization", 0.9, "field 'utilization' is 0.9, the plan's own time gives"),
        ("fc_time_s", float("inf"), "field 'fc_time_s' is inf, not a finite number"),
        ("fc_time_s", 1.0, "field 'fc_time_s' is 1 s, but blocks × Σ layer time ="),
        ("fc_flops", 1.0, "field 'fc_flops' is 1, the layers give"),
        ("inputs.model.hidden", 8192, "layer qkv: tokens/in/out (16384, 12288, 36864) differ"),
        ("inputs.batch", 4, "layer qkv: tokens/in/out (16384, 12288, 36864) differ"),
        ("layers.0.time_s", 1.0, "field 'layers.qkv.time_s' is 1 s, but its passes add up to"),
        (
            "layers.1.passes.0.steady_s",
            1.0,
            "field 'layers.attn_out.passes[0].total_s' is",
        ),
        (
            "layers.1.passes.0.compute_s",
            1.0,
            "field 'layers.attn_out.passes[0].compute_s' is 1, the cost model gives",
        ),
        (
            "inputs.profile_hash",
            "sha256:" + "0" * 64,
            "profile 'tpuv4' changed since the plan was made",
        ),
        ("inputs.shapes", ["4x4"], "field 'mesh': 2x8 is not one of inputs.shapes (4x4)"),
    ],
)
def test_a_plan_that_contradicts_itself_fails_naming_the_field(
    plan16: Plan, path: str, value: Any, message: str
) -> None:
    report = verify_plan(edited(plan16, path, value))
    assert not report.ok
    assert any(message in f for f in report.failures()), report.failures()


def test_a_plan_without_layers_fails(plan16: Plan) -> None:
    report = verify_plan(edited(plan16, "layers", []))
    assert not report.ok
    assert (
        "field 'layers': the plan has layers [], the model's FC layers are"
        in (report.failures()[0])
    )
    assert report.checks == ()


@pytest.mark.parametrize("count", [2, 4])
def test_a_layer_with_the_wrong_number_of_passes_fails(plan16: Plan, count: int) -> None:
    data = json.loads(plan16.to_json())
    passes = data["layers"][0]["passes"]
    data["layers"][0]["passes"] = (passes + passes)[:count]
    report = verify_plan(Plan.model_validate(data))
    assert f"layer qkv: has {count} passes; a layer has 3" in report.failures()


def test_an_unknown_profile_leaves_the_plan_unverified(plan16: Plan) -> None:
    # Issue 20 finding 4: a plan whose times cannot be re-derived is never "passed".
    report = verify_plan(edited(plan16, "inputs.profile", "no-such-profile"))
    assert report.ok, report.failures()
    assert report.verdict == "unverified" and not report.rederived
    assert report.notes == (
        "profile 'no-such-profile' is not in the catalog: recorded times not re-derived (give "
        "the profile file with --profile FILE)",
    )
    strict = verify_plan(edited(plan16, "inputs.profile", "no-such-profile"), strict=True)
    assert not strict.ok and strict.verdict == "FAILED"
    assert strict.failures()[0].startswith("unverified (--strict): profile 'no-such-profile'")


def test_a_profile_named_by_the_user_re_derives_the_times(
    plan16: Plan, tpuv4: HardwareProfile
) -> None:
    report = verify_plan(edited(plan16, "inputs.profile", "private"), profile=tpuv4, strict=True)
    assert report.ok and report.verdict == "passed", report.failures()
    tampered = edited(edited(plan16, "inputs.profile", "private"), "layers.0.utilization", 0.5)
    failures = verify_plan(tampered, profile=tpuv4, execute=False).failures()
    assert any("layers.qkv.utilization" in f for f in failures), failures


def test_bad_limits_are_refused(plan16: Plan) -> None:
    with pytest.raises(VerifyError, match="seed must be a non-negative integer, got -1"):
        verify_plan(plan16, seed=-1)
    with pytest.raises(VerifyError, match="chip limit must be a positive integer, got 0"):
        verify_plan(plan16, max_chips=0)
