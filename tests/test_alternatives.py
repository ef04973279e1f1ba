"""Every plan names the alternative (issue 14): each family's best plan beside the chosen one,
and the advice line when one an engine runs is faster."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.compare.alternatives import FAMILIES, Alternative, Alternatives, alternatives, replan
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import make_plan
from meshtune.report.alternatives import advice, alternatives_table
from meshtune.step.options import ClusterOptions


def _text(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(renderable)
    return out.getvalue()


def test_each_family_at_its_own_best_mesh(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    plan = make_plan(gpt3, tpuv4, 256)  # one mesh of every chip, the paper's setup
    found = alternatives(plan, tpuv4)
    assert found.metric == "fc"
    assert found.chosen == "meshslice"
    assert [e.family for e in found.entries] == list(FAMILIES)
    by = {e.family: e for e in found.entries}
    assert by["meshslice"].gain == 0.0
    assert by["meshslice"].time_s == plan.fc_time_s
    for entry in found.entries:
        assert entry.time_s is not None and entry.gain is not None, entry
        # gain = alternative / plan − 1, each searched on its own.
        assert entry.gain == pytest.approx(entry.time_s / plan.fc_time_s - 1)
        alone = replan(plan, tpuv4, entry.algorithm or "")
        assert alone.fc_time_s == entry.time_s
    # The megatron family stands for megatron and 1d_tp: the faster of the two.
    fastest = min(replan(plan, tpuv4, n).fc_time_s for n in FAMILIES["megatron"])
    assert by["megatron"].time_s == fastest
    # MeshSlice is the fastest at 256 TPUv4 chips (Figure 9): no advice, and the table lists
    # the plan first with +0.0 %.
    assert found.faster() is None
    assert advice(found) is None
    assert "meshslice ←" in _text(alternatives_table(found))


def _found(time_s: float, entries: list[tuple[str, float, bool]]) -> Alternatives:
    return Alternatives(
        chosen="meshslice",
        metric="step",
        time_s=time_s,
        entries=[
            Alternative(
                family=name,
                algorithm=name,
                engine=engine,
                time_s=t,
                utilization=0.5,
                split="DP 2 × PP 1 × mesh 4x2",
                gain=t / time_s - 1,
                reason=None,
            )
            for name, t, engine in entries
        ],
    )


def test_advice_names_the_fastest_algorithm_an_engine_runs() -> None:
    found = _found(10.0, [("meshslice", 10.0, True), ("megatron", 8.0, False), ("wang", 9.0, True)])
    better = found.faster()
    assert better is not None and better.algorithm == "wang"
    line = advice(found)
    assert line is not None
    assert line.plain.startswith("Faster: wang at DP 2 × PP 1 × mesh 4x2, 9 s per step")
    assert line.plain.endswith("(10.0% less): rerun with -a wang")
    assert "megatron (no engine yet)" in _text(alternatives_table(found))
    assert _found(10.0, [("meshslice", 10.0, True), ("wang", 11.0, True)]).faster() is None
    # 0.5 % faster is a tie: no advice (a DeepSeek-V3 plan advised a rerun for "0.0% less")
    assert _found(10.0, [("meshslice", 10.0, True), ("wang", 9.95, True)]).faster() is None


@pytest.mark.parametrize(
    "args",
    [
        # Issue 14, finding 4: MeshSlice was recommended while a 1D algorithm was faster, and
        # the report did not say so. Which algorithm wins moves with the step model (the
        # llama3-70b case leads with a 1D algorithm; the gpt3 case now plans MeshSlice on a
        # 2x8 mesh ahead of every 1D split): the report must lead with the advice exactly when
        # the library finds a faster runnable algorithm, and always list the families.
        ["llama3-70b", "-n", "1024", "-b", "1024", "-s", "8192", "-p", "h100-8gpu-nodes"],
        ["gpt3", "-n", "1024", "-b", "1536", "-p", "a100-80gb-8gpu-nodes"],
    ],
)
def test_the_finding_4_plans_lead_with_the_faster_algorithm(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["plan", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert "Alternatives: each family at its own best split" in result.stdout
    model, profile = load_model(args[0]), load_profile(args[-1])
    plan = make_plan(
        model,
        profile,
        1024,
        batch=int(args[4]),
        seq_len=int(args[6]) if "-s" in args else None,
        cluster=ClusterOptions(),
    )
    better = alternatives(plan, profile).faster()
    if better is None:
        assert not first.startswith("Faster:"), first
        return
    match = re.match(r"Faster: (\S+) at DP \d+ × PP \d+", first)
    assert match is not None and match.group(1) == better.algorithm, first
    assert first.endswith(f"rerun with -a {better.algorithm}"), first


def test_no_alternatives_skips_them() -> None:
    result = CliRunner().invoke(
        app, ["plan", "gpt3", "-n", "16", "--mesh-only", "--no-alternatives"]
    )
    assert result.exit_code == 0, result.output
    assert "Alternatives" not in result.stdout
