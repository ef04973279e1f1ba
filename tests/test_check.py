"""``meshtune check`` (issue 15, item 3): the shipped plans pass from the repository as it is;
an edited profile or model is named before the field diff; bad input is one line, exit 2."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from dataclasses import fields
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.plan import PlanLevels
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions, StepOptions
from meshtune.verify.check import check_plan, rederive
from meshtune.verify.run import load_plan

REPO = Path(__file__).resolve().parents[1]
PLANS = sorted((REPO / "plans").glob("*.json"))


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # `check` with no argument reads plans/*.json here


def _invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, ["check", *args], env=env)


def test_shipped_plans_pass_with_no_arguments() -> None:
    result = _invoke()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(PLANS)
    for path, line in zip(PLANS, lines, strict=True):
        assert line.startswith(f"plans/{path.name}: ok (up to date, verified: ")


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_rederive_from_recorded_inputs_is_identical(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    plan = load_plan(text, str(path))
    inputs = plan.inputs
    fresh = rederive(plan, load_model(inputs.model.name), load_profile(inputs.profile))
    assert json.loads(fresh.to_json()) | {"tool_version": 0} == json.loads(text) | {
        "tool_version": 0
    }


def test_a_cluster_plan_with_every_step_option_checks_up_to_date() -> None:
    # Regression: check re-derived cluster plans without the step options past `attention`
    # (dropout, gradient path, EP / CP) and with --top guessed from the recorded mesh
    # candidates, so a fresh `plan gpt3 --chips 256 -o p.json` (4 feasible meshes, 5 splits
    # asked for) came out stale.
    options = ClusterOptions(
        zero=1,
        step=StepOptions(
            dropout=True,
            grad_overlap=False,
            fp32_grads=False,
            grad_accumulation="separate",
            grad_all_reduce=True,
        ),
    )
    model, profile = load_model("gpt3"), load_profile("tpuv4")
    plan = make_plan(model, profile, 256, cluster=options)
    assert plan.inputs.top == 5 and len(plan.candidates) < 5  # the case the guess got wrong
    assert plan.inputs.levels is not None and plan.inputs.levels.options() == options
    verdict = check_plan(plan, plan.to_json(), "p.json", verify=False)
    assert verdict.ok, verdict.line()


def test_plan_levels_record_every_search_option() -> None:
    # PlanLevels and ClusterOptions carry the same fields, so a new step option cannot be
    # dropped between the plan file and `check` again.
    levels = {f.name for f in fields(ClusterOptions)} - {"step"}
    recorded = levels | {f.name for f in fields(StepOptions)}
    assert set(PlanLevels.model_fields) == recorded
    options = ClusterOptions(
        dp=2,
        pp=4,
        ep=2,
        cp=2,
        vpp=3,
        step=StepOptions(headroom=0.2, attention="plain", block_overhead_s=0.01),
    )
    assert PlanLevels.of(options).options() == options


def _edited_catalog(tmp_path: Path, kind: str, name: str, pattern: str, new: str) -> Path:
    folder = tmp_path / kind
    shutil.copytree(REPO / kind, folder)
    file = folder / f"{name}.toml"
    text, count = re.subn(pattern, new, file.read_text(encoding="utf-8"), count=1, flags=re.M)
    assert count == 1
    file.write_text(text, encoding="utf-8")
    return folder


def test_an_edited_profile_is_named_first(tmp_path: Path) -> None:
    profiles = _edited_catalog(
        tmp_path,
        "profiles",
        "tpuv4",
        r"^effective_flops_per_s = .*$",
        "effective_flops_per_s = 2e14",
    )
    result = _invoke("plans/gpt3-256.json", env={"MESHTUNE_PROFILES_DIR": str(profiles)})
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("plans/gpt3-256.json: stale: profile tpuv4 changed (content hash")
    assert lines[1].startswith("  input: profile tpuv4 changed")
    assert lines[2].startswith("  inputs.profile_hash: ")
    assert len(lines) <= 2 + 1 + 12 + 1  # verdict, input, at most 12 fields, "… and N more"


def test_an_edited_model_is_named_field_by_field(tmp_path: Path) -> None:
    models = _edited_catalog(tmp_path, "models", "gpt3", r"^hidden = 12288", "hidden = 12800")
    result = _invoke("plans/gpt3-256.json", "--no-verify", env={"MESHTUNE_MODELS_DIR": str(models)})
    assert result.exit_code == 1
    assert "stale: model gpt3 changed: hidden 12288 → 12800;" in result.output.splitlines()[0]


def test_json_verdicts() -> None:
    result = _invoke("plans/gpt3-256.json", "--json", "--no-verify")
    assert result.exit_code == 0
    assert json.loads(result.output) == [
        {
            "source": "plans/gpt3-256.json",
            "verdict": "ok",
            "changed": [],
            "drifts": [],
            "failures": [],
        }
    ]


def test_a_plan_whose_profile_left_the_catalog_fails(tmp_path: Path) -> None:
    path = REPO / "plans" / "gpt3-256.json"
    text = path.read_text(encoding="utf-8")
    plan = load_plan(text, str(path))
    plan = plan.model_copy(update={"inputs": plan.inputs.model_copy(update={"profile": "gone"})})
    result = check_plan(plan, text, "x.json")
    assert result.verdict == "FAILED"
    assert result.line().startswith("x.json: FAILED: input not in the catalog: ")


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    result = _invoke(str(bad), "plans/gpt3-256.json")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"meshtune: error: {bad}:1: invalid JSON: Expecting property name enclosed in double quotes"
    ]
    os.chdir(tmp_path)
    empty = _invoke()
    assert empty.exit_code == 2
    assert "no plan to check" in empty.output


def test_plans_are_checked_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file is read and parsed first (bad input before any verdict), then each is read
    again just before it is checked: no list of every plan's text is held (40 links to one
    large plan ran out of memory)."""
    import meshtune.cli.check as check_cli
    import meshtune.verify.check as check_module

    links = []
    for index in range(3):
        link = tmp_path / f"p{index}.json"
        link.symlink_to(REPO / "plans" / "gpt3-256.json")
        links.append(str(link))
    events: list[str] = []
    read_text, real_check = check_cli.read_text, check_module.check_plan

    def reading(path: Path) -> str:
        events.append(f"read {Path(path).name}")
        return read_text(path)

    def checking(plan: object, text: str, source: str, *, verify: bool) -> object:
        events.append(f"check {Path(source).name}")
        return real_check(plan, text, source, verify=verify)  # type: ignore[arg-type]

    monkeypatch.setattr(check_cli, "read_text", reading)
    monkeypatch.setattr(check_module, "check_plan", checking)
    result = _invoke("--no-verify", *links)
    assert result.exit_code == 0, result.output
    names = [f"p{index}.json" for index in range(3)]
    again = [f"{what} {name}" for name in names for what in ("read", "check")]
    assert events == [f"read {name}" for name in names] + again


def test_a_plan_from_a_fifo_is_read_once(tmp_path: Path) -> None:
    """A FIFO cannot be read twice: its text is the one plan kept from the first reading."""
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    text = (REPO / "plans" / "gpt3-256.json").read_bytes()

    def write() -> None:
        with fifo.open("wb") as handle:
            handle.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result = _invoke("--no-verify", str(fifo))
    writer.join()
    assert result.exit_code == 0, result.output
    assert result.output == f"{fifo}: ok (up to date, not verified)\n"
