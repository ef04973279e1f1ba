"""``meshtune verify`` through typer's CliRunner: exit 0 / 1 / 2 and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from meshtune.cli import app
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan
from meshtune.planner.make import make_plan


@pytest.fixture(scope="module")
def plan_text(gpt3: ModelSpec, tpuv4: HardwareProfile) -> str:
    return make_plan(gpt3, tpuv4, 16).to_json()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(text, encoding="utf-8")
    return path


def one_error_line(result: Result, prefix: str, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def test_a_good_plan_passes(runner: CliRunner, tmp_path: Path, plan_text: str) -> None:
    result = runner.invoke(app, ["verify", str(write(tmp_path, plan_text))])
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stderr == ""
    assert "verify on a 2x8 virtual mesh (seed 0): passed" in result.stdout
    assert result.stdout.count(" OK ") == 12


def test_json_output(runner: CliRunner, tmp_path: Path, plan_text: str) -> None:
    result = runner.invoke(
        app, ["verify", str(write(tmp_path, plan_text)), "--json", "--seed", "3"]
    )
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["ok"] is True
    assert data["seed"] == 3


def test_bad_json_is_one_line_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path, "{not json")
    line = one_error_line(runner.invoke(app, ["verify", str(path)]), "meshtune: error: ", 2)
    assert "invalid JSON" in line
    assert str(path) in line


def test_a_missing_file_is_one_line_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    line = one_error_line(
        runner.invoke(app, ["verify", str(tmp_path / "nope.json")]), "meshtune: error: ", 2
    )
    assert "cannot read" in line


def test_too_many_chips_is_exit_2(runner: CliRunner, tmp_path: Path, plan_text: str) -> None:
    result = runner.invoke(app, ["verify", str(write(tmp_path, plan_text)), "--max-chips", "8"])
    line = one_error_line(result, "meshtune: error: ", 2)
    assert "more than the limit of 8" in line
    assert result.stdout == ""


def test_a_failing_plan_is_exit_1(runner: CliRunner, tmp_path: Path, plan_text: str) -> None:
    data = json.loads(plan_text)
    data["layers"][0]["config"] = {"slices": 7}
    path = write(tmp_path, Plan.model_validate(data).to_json())
    line = one_error_line(runner.invoke(app, ["verify", str(path)]), "meshtune: verify failed: ", 1)
    assert "layer qkv: configuration S=7 is not legal for meshslice" in line


def test_verify_does_not_import_numpy_at_cli_import() -> None:
    import subprocess
    import sys

    code = "import sys, meshtune.cli; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- hardening (issue)
# Each of these crashed, hung or exited 1 before: now one line and exit 2 (bad input) or exit 1
# (a plan that contradicts itself), at once.


def _edit(plan_text: str, edit: str) -> str:
    data = json.loads(plan_text)
    layer = data["layers"][0]
    if edit == "huge-in":
        layer["in_features"] = 1e30
    elif edit == "negative-in":
        layer["in_features"] = -12288
    elif edit == "negative-out":
        layer["out_features"] = -1
    elif edit == "zero-tokens":
        layer["tokens"] = 0
    elif edit == "negative-tokens":
        layer["tokens"] = -16384
    return json.dumps(data)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("huge-in", "layers.0.in_features"),
        ("negative-in", "layers.0.in_features"),
        ("negative-out", "layers.0.out_features"),
        ("zero-tokens", "layers.0.tokens"),
        ("negative-tokens", "layers.0.tokens"),
    ],
)
def test_bad_layer_sizes_are_exit_2(
    runner: CliRunner, tmp_path: Path, plan_text: str, edit: str, message: str
) -> None:
    result = runner.invoke(app, ["verify", str(write(tmp_path, _edit(plan_text, edit)))])
    line = one_error_line(result, "meshtune: error: ", 2)
    assert message in line


def test_deeply_nested_json_is_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["verify", str(write(tmp_path, "[" * 100_000 + "]" * 100_000))])
    one_error_line(result, "meshtune: error: ", 2)


def test_a_5000_digit_integer_is_exit_2(runner: CliRunner, tmp_path: Path, plan_text: str) -> None:
    text = plan_text.replace('"chips": 16', '"chips": ' + "9" * 5000, 1)
    result = runner.invoke(app, ["verify", str(write(tmp_path, text))])
    one_error_line(result, "meshtune: error: ", 2)


@pytest.mark.parametrize(
    ("args", "flag"), [(["--seed", "-1"], "--seed"), (["--max-chips", "0"], "--max-chips")]
)
def test_bad_options_are_exit_2(
    runner: CliRunner, tmp_path: Path, plan_text: str, args: list[str], flag: str
) -> None:
    result = runner.invoke(app, ["verify", str(write(tmp_path, plan_text)), *args])
    assert flag in one_error_line(result, "meshtune: error: ", 2)


@pytest.mark.parametrize(("count", "code"), [(2, 1), (4, 1)])
def test_a_layer_with_2_or_4_passes_is_exit_1(
    runner: CliRunner, tmp_path: Path, plan_text: str, count: int, code: int
) -> None:
    data = json.loads(plan_text)
    passes = data["layers"][0]["passes"]
    data["layers"][0]["passes"] = (passes * 2)[:count]
    result = runner.invoke(app, ["verify", str(write(tmp_path, json.dumps(data)))])
    line = one_error_line(result, "meshtune: verify failed: ", code)
    assert f"has {count} passes" in line


def test_a_tampered_mesh_is_exit_1_naming_the_field(
    runner: CliRunner, tmp_path: Path, plan_text: str
) -> None:
    data = json.loads(plan_text)
    data["mesh"] = {"rows": 4, "cols": 4, "depth": 1}
    result = runner.invoke(app, ["verify", str(write(tmp_path, json.dumps(data)))])
    line = one_error_line(result, "meshtune: verify failed: ", 1)
    assert "field 'mesh'" in line or "layer qkv" in line


def test_absurd_chip_counts_answer_at_once(runner: CliRunner) -> None:
    for chips in ("99999999999999999999999", "10000000000000000"):
        result = runner.invoke(app, ["plan", "gpt3", "--chips", chips])
        assert "--chips" in one_error_line(result, "meshtune: error: ", 2)
