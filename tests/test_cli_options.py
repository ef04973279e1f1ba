"""``meshtune plan``'s options generated from the options record (meshtune.cli._options): every
option with a flag is on the command line at its default, and the arguments a plan's levels
spell (:func:`meshtune.verify.drift.plan_args`) re-derive it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.planner.make import make_plan
from meshtune.step.options import (
    ClusterOptions,
    StepOptions,
    field_default,
    option_fields,
    option_flags,
)
from meshtune.verify.drift import plan_args


def test_every_option_with_a_help_line_is_a_flag_of_plan(runner: CliRunner) -> None:
    got = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "200"})
    assert got.exit_code == 0
    text = " ".join(got.output.split())
    for record in (ClusterOptions, StepOptions):
        for f, annotation, about in option_fields(record):
            spelling = option_flags(f, annotation, about)
            assert bool(spelling) == (about.help is not None), f.name
            for flag in spelling:
                assert flag.replace("/", " / ") in text, flag
                assert " ".join(str(about.help).split()) in text, f.name
            if spelling and isinstance(field_default(f), str):
                assert f"[default: {field_default(f)}]" in text, f.name


def test_a_plan_of_many_options_rederives_from_its_arguments(
    runner: CliRunner, tmp_path: Path
) -> None:
    options = ClusterOptions(
        zero=1,
        step=StepOptions(
            recompute="full",
            headroom=0.2,
            attention="plain",
            dropout=True,
            grad_overlap=False,
            fp32_grads=False,
            grad_accumulation="separate",
            grad_all_reduce=True,
            cp_comm="all-gather",
        ),
    )
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), 256, cluster=options)
    path = tmp_path / "p.json"
    path.write_text(plan.to_json(), encoding="utf-8")
    args = plan_args(json.loads(path.read_text(encoding="utf-8")))
    assert "--no-fp32-grads" in args and "--zero" in args
    got = runner.invoke(app, ["plan", *args, "--check", str(path)])
    assert got.exit_code == 0, got.output
    assert "up to date" in got.stdout
