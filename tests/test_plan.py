"""The plan file (meshtune.plan) and safe output (meshtune.io)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from meshtune.catalog import load_model, load_profile
from meshtune.errors import InfeasibleError, PlanFileError
from meshtune.hardware.profile import HardwareProfile
from meshtune.io import write_atomic
from meshtune.model.spec import ModelSpec
from meshtune.plan import PLAN_SCHEMA_VERSION, Plan, plan_json_schema, read_plan
from meshtune.planner.make import make_plan


@pytest.fixture(scope="module")
def plan() -> Plan:
    """GPT-3 on 256 TPUv4 chips, every shape listed."""
    return make_plan(load_model("gpt3"), load_profile("tpuv4"), 256, top=9)


# --------------------------------------------------------------------------- contents


def test_inputs_echo(plan: Plan, gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    inputs = plan.inputs
    assert inputs.model == gpt3
    assert inputs.profile == "tpuv4"
    assert inputs.profile_hash == tpuv4.content_hash()
    assert (inputs.chips, inputs.batch, inputs.seq_len) == (256, 128, 2048)  # §5.1.1 defaults
    assert inputs.dataflow_mode == "auto"
    assert inputs.shapes is None


def test_explicit_inputs_echo(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    p = make_plan(
        gpt3, tpuv4, 256, batch=64, seq_len=1024, mode="ystn", shapes=[" 16X16 ", "32x8"], top=1
    )
    assert (p.inputs.batch, p.inputs.seq_len, p.inputs.dataflow_mode) == (64, 1024, "ystn")
    assert p.inputs.shapes == ["16x16", "32x8"]
    assert all(layer.tokens == 64 * 1024 for layer in p.layers)
    assert len(p.candidates) == 1


def test_default_batch_is_at_least_one(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    assert make_plan(gpt3, tpuv4, 1).inputs.batch == 1


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"chips": 0}, "chips must be between 1 and 16,777,216, got 0"),
        ({"chips": 8, "batch": 0}, "batch must be between 1 and 1,099,511,627,776, got 0"),
        ({"chips": 8, "seq_len": -1}, "sequence length must be between 1 and 1,099,511,627,776"),
        ({"chips": 8, "top": 0}, "top must be between 1 and 1,099,511,627,776, got 0"),
        ({"chips": 2.5}, "chips must be a whole number, got 2.5"),
        ({"chips": True}, "chips must be a whole number, got True"),
        (
            {"chips": 10**23},
            "chips must be between 1 and 16,777,216, got 100,000,000,000,000,000,000,000",
        ),
        ({"chips": 8, "shapes": ["8"]}, "mesh shape '8' is not of the form"),
    ],
)
def test_bad_sizes_are_infeasible(
    gpt3: ModelSpec, tpuv4: HardwareProfile, kwargs: dict[str, Any], needle: str
) -> None:
    chips = kwargs.pop("chips")
    with pytest.raises(InfeasibleError) as info:
        make_plan(gpt3, tpuv4, chips, **kwargs)
    assert needle in str(info.value)


def test_fc_flops_count(plan: Plan) -> None:
    # blocks · Σ 3 passes · 2·T·I·O with T = 128 · 2048 and GPT-3's four layers
    tokens = 128 * 2048
    io = [(12288, 36864), (12288, 12288), (12288, 49152), (49152, 12288)]
    assert plan.fc_flops == 96 * sum(3 * 2 * tokens * i * o for i, o in io)


def test_utilization_is_flops_over_time_chips_peak(plan: Plan, tpuv4: HardwareProfile) -> None:
    assert 0.0 < plan.utilization <= 1.0
    expected = plan.fc_flops / (plan.fc_time_s * 256 * tpuv4.peak_flops_per_s)
    assert plan.utilization == pytest.approx(expected)
    # and never above effective / peak
    assert plan.utilization <= tpuv4.effective_flops_per_s / tpuv4.peak_flops_per_s
    for layer in plan.layers:
        assert 0.0 < layer.utilization <= 1.0
    for cand in plan.candidates:
        assert 0.0 < cand.utilization <= 1.0


def test_time_adds_up(plan: Plan) -> None:
    blocks = plan.inputs.model.blocks
    assert plan.fc_time_s == pytest.approx(blocks * sum(layer.time_s for layer in plan.layers))
    for layer in plan.layers:
        assert layer.time_s == pytest.approx(sum(p.total_s for p in layer.passes))
        assert layer.config in layer.config_candidates
        for p in layer.passes:
            s = layer.config["slices"]
            assert p.total_s == pytest.approx(p.prologue_s + (s - 1) * p.steady_s + p.epilogue_s)
            assert p.comm_hidden_s >= 0.0 and p.comm_exposed_s >= 0.0
            assert p.total_s >= p.compute_s


def test_layers_record_phase1(plan: Plan) -> None:
    names = [layer.name for layer in plan.layers]
    assert names == ["qkv", "attn_out", "mlp_up", "mlp_down"]
    down = plan.layers[3]
    assert (down.stationary, down.transposed, down.sliced_dim) == ("X", False, "out")
    assert [down.dataflows[p.name] for p in down.passes] == ["LS", "OS", "RS"]
    assert down.sharding == {"X": ["tokens", "in"], "W": ["out", "in"], "Y": ["tokens", "out"]}
    assert [p.formula for p in down.passes] == [
        "Y = LS(X, Wᵀ)",
        "X' = OS(Y', Wᵀ)",
        "W'ᵀ = RS(Y', X)",
    ]


def test_candidates_sorted_and_best_first(plan: Plan) -> None:
    times = [c.fc_time_s for c in plan.candidates]
    assert times == sorted(times)
    assert (plan.candidates[0].rows, plan.candidates[0].cols) == (plan.mesh.rows, plan.mesh.cols)
    assert plan.candidates[0].fc_time_s == plan.fc_time_s
    assert plan.candidates[0].configs == {layer.name: layer.config for layer in plan.layers}
    assert plan.infeasible_shapes == []


def test_top_limits_candidates(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    assert len(make_plan(gpt3, tpuv4, 256, top=3).candidates) == 3


def test_infeasible_shapes_are_listed(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    p = make_plan(gpt3, tpuv4, 1024)
    assert p.infeasible_shapes
    assert all(": layer " in reason for reason in p.infeasible_shapes)
    assert any(reason.startswith("1x1024: ") for reason in p.infeasible_shapes)


# --------------------------------------------------------------------------- JSON round trip


def test_json_round_trip(plan: Plan) -> None:
    text = plan.to_json()
    assert text.endswith("\n")
    again = read_plan(text, "plan.json")
    assert again == plan
    assert again.to_json() == text


def test_json_keys(plan: Plan) -> None:
    data = json.loads(plan.to_json())
    assert data["schema_version"] == PLAN_SCHEMA_VERSION == 2
    assert data["mesh"] == {"rows": 32, "cols": 8, "depth": 1}
    assert set(data["layers"][0]["dataflows"]) == {"forward", "backward_data", "backward_weight"}


def test_schema_version_mismatch_names_the_file(plan: Plan) -> None:
    data = json.loads(plan.to_json())
    data["schema_version"] = 3
    with pytest.raises(
        PlanFileError,
        match=r"^old\.json: plan schema_version 3 is not supported \(this meshtune reads "
        r"versions 1 and 2\)",
    ):
        read_plan(json.dumps(data), "old.json")


def test_missing_schema_version_is_rejected(plan: Plan) -> None:
    data = json.loads(plan.to_json())
    del data["schema_version"]
    with pytest.raises(
        PlanFileError, match=r"^p\.json: no schema_version; is this a meshtune plan file\?"
    ):
        read_plan(json.dumps(data), "p.json")


def test_bad_json_names_file_and_line() -> None:
    with pytest.raises(PlanFileError, match=r"^plans/x\.json:3: invalid JSON"):
        read_plan('{\n  "a": 1,\n  oops\n}', "plans/x.json")


def test_invalid_plan_field_is_named(plan: Plan) -> None:
    data = json.loads(plan.to_json())
    data["mesh"]["rows"] = 0
    with pytest.raises(PlanFileError, match=r"^p\.json: field 'mesh\.rows'"):
        read_plan(json.dumps(data), "p.json")


def test_non_object_json_is_a_plan_file_error() -> None:
    with pytest.raises(PlanFileError, match=r"^p\.json: "):
        read_plan("[1, 2]", "p.json")


def test_plan_json_schema() -> None:
    schema = json.loads(plan_json_schema())
    assert schema["title"] == "Plan"
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    for key in ("tool_version", "inputs", "mesh", "layers", "fc_time_s", "utilization"):
        assert key in schema["required"]
    assert schema["properties"]["schema_version"]["const"] == 2
    assert {"PlanInputs", "LayerPlan", "PassPlan", "MeshCandidate"} <= set(schema["$defs"])


def test_plan_json_schema_requires_every_field_read_plan_requires(plan: Plan) -> None:
    # read_plan rejects a file without schema_version, so the published schema must list it
    # as required too (a CI check against the schema would otherwise pass such a file).
    # (cluster is the one optional section: plans without it stay valid version-2 files).
    schema = json.loads(plan_json_schema())
    assert set(schema["required"]) == set(schema["properties"]) - {"cluster"}


def test_plan_json_uses_only_schema_keys(plan: Plan) -> None:
    schema = json.loads(plan_json_schema())
    data = json.loads(plan.to_json())
    assert set(data) == set(schema["properties"]) - {"cluster"}
    layer_def = schema["$defs"]["LayerPlan"]
    # a dense layer's group count (1) is not written; the schema says it is optional
    assert set(data["layers"][0]) == set(layer_def["properties"]) - {"groups"}
    assert "groups" not in layer_def["required"]


# --------------------------------------------------------------------------- write_atomic


def test_write_atomic_creates(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    write_atomic(target, "hello\n")
    assert target.read_text(encoding="utf-8") == "hello\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_write_atomic_writes_bytes_verbatim(tmp_path: Path) -> None:
    target = tmp_path / "plot.png"
    payload = b"\x89PNG\r\n\x1a\n\x00\xff"
    write_atomic(target, payload)
    assert target.read_bytes() == payload
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_write_atomic_gives_the_usual_file_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        target = tmp_path / "plan.json"
        write_atomic(target, "x")
        assert target.stat().st_mode & 0o777 == 0o644
        target.chmod(0o640)
        write_atomic(target, "y", force=True)
        assert target.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_write_atomic_refuses_existing(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(PlanFileError, match=r"already exists; pass --force to overwrite"):
        write_atomic(target, "new")
    assert target.read_text(encoding="utf-8") == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_write_atomic_force_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old", encoding="utf-8")
    write_atomic(target, "new", force=True)
    assert target.read_text(encoding="utf-8") == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_write_atomic_missing_folder(tmp_path: Path) -> None:
    target = tmp_path / "absent" / "plan.json"
    with pytest.raises(PlanFileError, match=r"folder .*absent does not exist"):
        write_atomic(target, "x")
    assert not (tmp_path / "absent").exists()


def test_write_atomic_onto_a_folder_cleans_up(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    target.mkdir()
    with pytest.raises(PlanFileError, match=r"cannot write"):
        write_atomic(target, "x", force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]
    assert target.is_dir()


def test_write_atomic_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_atomic(Path("p.json"), "x")
    assert (tmp_path / "p.json").read_text(encoding="utf-8") == "x"


def test_version_1_plan_files_still_read_as_meshslice_plans() -> None:
    from meshtune.verify.run import verify_plan

    path = Path(__file__).parent / "data" / "gpt3-256-v1.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    plan = read_plan(path.read_text(encoding="utf-8"), str(path))
    assert plan.schema_version == 2
    assert plan.inputs.algorithm == "meshslice"
    assert plan.inputs.model.blocks == old["inputs"]["model"]["layers"] == 96
    for layer, before in zip(plan.layers, old["layers"], strict=True):
        assert layer.algorithm == "meshslice"
        assert layer.config == {"slices": before["slices"]}
        assert layer.config_candidates == [{"slices": s} for s in before["slice_candidates"]]
        assert [p.iterations for p in layer.passes] == [before["slices"]] * 3
    assert plan.candidates[0].configs == {
        name: {"slices": s} for name, s in old["candidates"][0]["slices"].items()
    }
    report = verify_plan(plan)
    # The fixture predates a tpuv4 profile change: stale, but its layers still execute.
    assert report.failures() == [
        "field 'inputs.profile_hash': profile 'tpuv4' changed since the plan was made (the "
        "plan is stale)"
    ]
    assert len(report.checks) == 12 and all(c.ok for c in report.checks)


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ((), {"layers": 1}, "field 'layers': should be a list, got 1"),
        ((), {"candidates": "x"}, "field 'candidates': should be a list, got 'x'"),
        (("layers", 0), {"slice_candidates": 2}, "field 'layers.0.config_candidates'"),
        (("layers", 0), {"passes": {}}, "field 'layers.0.passes'"),
        (("candidates", 0), {"slices": [1]}, "field 'candidates.0.configs'"),
        (("candidates", 0), {"slices": 3}, "field 'candidates.0.configs'"),
    ],
)
def test_a_version_1_plan_of_odd_shape_is_one_line_in_every_command(
    tmp_path: Path, where: tuple[str | int, ...], value: dict[str, Any], message: str
) -> None:
    from typer.testing import CliRunner

    from meshtune.cli import app

    data = json.loads((Path(__file__).parent / "data" / "gpt3-256-v1.json").read_text())
    node = data
    for key in where:
        node = node[key]
    node.update(value)
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    for command in (["verify"], ["export", "--to", "megatron"], ["timeline"], ["check"]):
        result = CliRunner().invoke(app, [*command, str(path)])
        assert result.exit_code == 2, (command, result.output)
        assert result.output.startswith(f"meshtune: error: {path}: "), result.output
        assert result.output.count("\n") == 1 and message in result.output, result.output


def test_a_model_file_with_the_old_layers_key_says_it_was_renamed(tmp_path: Path) -> None:
    from meshtune.errors import SpecError

    text = (Path(__file__).parents[1] / "models" / "gpt3.toml").read_text(encoding="utf-8")
    path = tmp_path / "old.toml"
    path.write_text(text.replace("blocks = ", "layers = "), encoding="utf-8")
    with pytest.raises(SpecError, match="'layers' is now called 'blocks'"):
        load_model(path)
