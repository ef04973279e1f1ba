"""Plan drift (meshtune.verify.drift; `meshtune plan … --check`, issue 9 item 6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.errors import PlanFileError
from meshtune.plan import read_plan
from meshtune.planner.make import make_plan
from meshtune.verify.drift import ABSENT, Drift, diff_json, plan_args, plan_drift

PLAN = Path(__file__).resolve().parents[1] / "plans" / "gpt3-256.json"
TEXT = PLAN.read_text(encoding="utf-8")


def test_diff_json_paths_and_values() -> None:
    a = {"x": 1, "l": [{"s": 6}, {"s": 6}], "gone": True, "f": 1.0}
    b = {"x": 1, "l": [{"s": 6}, {"s": 4}, {"s": 2}], "f": 1, "new": "y"}
    got = diff_json(a, b)
    assert got == [
        Drift("l[1].s", 6, 4),
        Drift("l[2]", ABSENT, {"s": 2}),
        Drift("new", ABSENT, "y"),
        Drift("gone", True, ABSENT),
    ]
    assert str(got[0]) == "l[1].s: 6 → 4"
    assert str(got[1]) == 'l[2]: (absent) → {"s": 2}'
    assert diff_json(True, 1) == [Drift("(plan)", True, 1)]
    assert diff_json({"a": [1, 2]}, {"a": [1, 2]}) == []


def test_committed_plan_is_up_to_date() -> None:
    plan = read_plan(TEXT, str(PLAN))
    inputs = plan.inputs
    fresh = make_plan(
        load_model(inputs.model.name),
        load_profile(inputs.profile),
        inputs.chips,
        batch=inputs.batch,
        seq_len=inputs.seq_len,
        top=len(plan.candidates),
    )
    assert plan_drift(TEXT, "x", fresh) == []
    # tool_version is ignored; every other field counts
    data = json.loads(TEXT)
    data["tool_version"] = "99.0"
    data["layers"][2]["config"] = {"slices": 3}
    data["mesh"]["rows"] = 16
    drifts = plan_drift(json.dumps(data), "x", fresh)
    assert [str(d) for d in drifts] == ["mesh.rows: 16 → 32", "layers[2].config.slices: 3 → 6"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [("{", "x:1: invalid JSON"), ("[1]", "holds a JSON object"), ("[" * 50_000, "nesting")],
)
def test_unreadable_committed_plan(text: str, needle: str) -> None:
    fresh = make_plan(load_model("gpt3"), load_profile("tpuv4"), 16)
    with pytest.raises(PlanFileError, match=needle):
        plan_drift(text, "x", fresh)


def test_plan_args_reproduce_the_plan() -> None:
    data: dict[str, Any] = json.loads(TEXT)
    args = plan_args(data)
    assert args == [
        "gpt3", "--chips", "256", "--batch", "128", "--seq", "2048",
        "--profile", "tpuv4", "--dataflow", "auto", "--algorithm", "meshslice", "--mesh-only",
        "--top", "5",
    ]  # fmt: skip
    with pytest.raises(PlanFileError, match="incomplete"):
        plan_args({"inputs": {}})


def test_cli_check_up_to_date_and_stale(runner: CliRunner, tmp_path: Path) -> None:
    args = ["plan", *plan_args(json.loads(TEXT))]
    got = runner.invoke(app, [*args, "--check", str(PLAN)])
    assert got.exit_code == 0, got.output
    assert "up to date" in got.stdout
    stale = tmp_path / "stale.json"
    data = json.loads(TEXT)
    data["fc_time_s"] = 1.5
    stale.write_text(json.dumps(data), encoding="utf-8")
    got = runner.invoke(app, [*args, "--check", str(stale)])
    assert got.exit_code == 1
    assert "stale, 1 field(s) differ" in got.stdout
    assert "  fc_time_s: 1.5 → " in got.stdout
    # another batch re-derives another plan
    got = runner.invoke(
        app, ["plan", "gpt3", "--chips", "256", "--batch", "64", "--check", str(PLAN)]
    )
    assert got.exit_code == 1
    assert "inputs.batch: 128 → 64" in got.stdout


def test_cli_check_errors_are_one_line(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    got = runner.invoke(app, ["plan", "gpt3", "--chips", "16", "--check", str(missing)])
    assert got.exit_code == 2
    assert got.stderr.startswith(f"meshtune: error: {missing}: cannot read")
    got = runner.invoke(
        app, ["plan", "gpt3", "--chips", "16", "--check", str(PLAN), "-o", str(tmp_path / "o")]
    )
    assert got.exit_code == 2
    assert "drop --output" in got.stderr
