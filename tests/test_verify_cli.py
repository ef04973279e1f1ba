"""``meshtune verify`` through typer's CliRunner: exit 0 / 1 / 2 and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from meshtune.cli import app
from meshtune.plan import Plan, make_plan
from meshtune.specs import HardwareProfile, ModelSpec


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
