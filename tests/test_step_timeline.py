"""``meshtune timeline PLAN --step`` (issue 15, item 4): the whole step, stage by stage; its
total is the plan's step time; the trace is valid trace-event JSON."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshtune.catalog import catalog_dir, load_model, load_profile
from meshtune.cli import app
from meshtune.errors import MeshtuneError
from meshtune.plan import Plan
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions, StepOptions
from meshtune.timeline.step import (
    _order,
    _schedule,
    draw_step,
    step_events,
    step_total,
    step_trace,
)
from meshtune.timeline.trace import validate_trace

SPLITS = {
    "pp1": (256, {}),
    "pp4-1f1b": (1024, {"pp": 4, "dp": 8, "micro_batches": 8, "vpp": 1}),
    "pp4-v2": (1024, {"pp": 4, "dp": 8, "micro_batches": 8, "vpp": 2}),
    "pp8-v3": (1024, {"pp": 8, "dp": 4, "micro_batches": 16, "vpp": 3}),
}


@cache
def _plan(name: str) -> Plan:
    chips, pins = SPLITS[name]
    return make_plan(
        load_model("gpt3"),
        load_profile("tpuv4"),
        chips,
        batch=512 if chips == 1024 else None,
        cluster=ClusterOptions(**pins, step=StepOptions(headroom=0.0)),
    )


@pytest.mark.parametrize("name", SPLITS)
def test_total_is_the_plans_step_time(name: str) -> None:
    plan = _plan(name)
    assert plan.cluster is not None
    events = step_events(plan)
    assert step_total(events) == pytest.approx(plan.cluster.step.step_s, rel=1e-12)
    # every stage runs every micro-batch's forward and backward chunks once
    c = plan.cluster
    for kind in ("forward", "backward"):
        assert len([e for e in events if e.kind == kind]) == c.pp * c.vpp * c.micro_batches


def test_hand_worked_1f1b() -> None:
    """pp 2, m 2, F 1, B 2, no sends: (m + pp − 1)(F + B) = 9; stage 1 runs F0 B0 F1 B1."""
    done = _schedule(2, 2, 1, 1.0, 2.0, 0.0)
    assert max(end for _, end in done.values()) == 9.0
    assert done[("F", 1, 0, 0)] == (1.0, 2.0)
    assert done[("B", 1, 0, 0)] == (2.0, 4.0)
    assert done[("B", 0, 0, 0)] == (4.0, 6.0)  # waits for stage 1's backward
    assert [op[0] for op in _order(1, 2, 2, 1)] == ["F", "B", "F", "B"]
    assert [op[0] for op in _order(0, 2, 2, 1)] == ["F", "F", "B", "B"]


def test_interleaved_bubble_is_divided_by_v() -> None:
    """Uniform chunks, no sends: the bubble is (pp − 1)(F + B) / v (SC'21 §2.2.2)."""
    pp, m, fwd, bwd = 4, 8, 1.0, 2.0
    for v in (1, 2, 4):
        done = _schedule(pp, m, v, fwd / v, bwd / v, 0.0)
        end = max(e for _, e in done.values())
        assert end == pytest.approx(m * (fwd + bwd) + (pp - 1) * (fwd + bwd) / v)


def test_trace_is_valid_with_a_process_per_stage() -> None:
    plan = _plan("pp4-v2")
    trace = step_trace(plan, step_events(plan))
    assert validate_trace(trace) == []
    assert json.loads(json.dumps(trace)) == trace
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {"stage 0", "stage 1", "stage 2", "stage 3"}
    layers = [e for e in trace["traceEvents"] if e.get("cat") == "layer"]
    assert {e["name"] for e in layers} >= {"qkv forward", "mlp_down backward weight"}


def test_drawing_shows_the_bubble() -> None:
    plan = _plan("pp4-1f1b")
    lines = draw_step(step_events(plan), 4, 60)
    assert [line[:10] for line in lines] == [f"stage   {i} " for i in range(4)]
    assert lines[0][10] == "0" and "·" in lines[0]  # stage 0 starts, then waits
    assert lines[3][10] == "·"  # the last stage waits for the first forward
    tail = [e for e in step_events(plan) if e.kind in ("dp", "optimizer")]
    assert {e.stage for e in tail} == {0, 1, 2, 3}  # each stage ends with its DP tail


def test_cli_step(tmp_path: Path) -> None:
    runner = CliRunner()
    plan_file = tmp_path / "p.json"
    plan_file.write_text(_plan("pp4-1f1b").to_json(), encoding="utf-8")
    out = tmp_path / "trace.json"
    result = runner.invoke(app, ["timeline", str(plan_file), "--step", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "stage   3 " in result.output
    assert validate_trace(json.loads(out.read_text(encoding="utf-8"))) == []
    mesh_only = runner.invoke(app, ["timeline", "plans/gpt3-256.json", "--step"])
    assert mesh_only.exit_code == 2
    assert "the plan has no step (made with --mesh-only)" in mesh_only.output
    both = runner.invoke(app, ["timeline", str(plan_file), "--step", "--layer", "qkv"])
    assert both.exit_code == 2 and "drop --layer" in both.output


def test_cli_step_honours_the_profile(tmp_path: Path) -> None:
    """`--step --profile FILE` ignored the file (a missing one exited 0): a profile named is
    read and must be the plan's, as without --step."""
    runner = CliRunner()
    plan_file = tmp_path / "p.json"
    plan_file.write_text(_plan("pp4-1f1b").to_json(), encoding="utf-8")
    profiles = catalog_dir("profiles")
    step = ["timeline", str(plan_file), "--step", "--profile"]
    missing = runner.invoke(app, [*step, str(tmp_path / "missing.toml")])
    assert missing.exit_code == 2
    assert missing.stderr.startswith(f"meshtune: error: {tmp_path / 'missing.toml'}: ")
    other = runner.invoke(app, [*step, str(profiles / "h100-8gpu-nodes.toml")])
    assert other.exit_code == 2
    assert "changed since the plan was made" in other.stderr
    assert len(other.stderr.splitlines()) == 1 and other.stdout == ""
    own = runner.invoke(app, [*step, str(profiles / "tpuv4.toml")])
    assert own.exit_code == 0, own.output
    assert own.stdout == runner.invoke(app, step[:-1]).stdout


def test_a_dualpipe_plan_is_refused_in_one_line() -> None:
    plan = make_plan(
        load_model("gpt3"),
        load_profile("tpuv4"),
        256,
        cluster=ClusterOptions(pp=8, step=StepOptions(schedule="dualpipe")),
    )
    with pytest.raises(MeshtuneError, match="runs the dualpipe schedule: --step lays out 1F1B"):
        step_events(plan)


@cache
def _comm_plan(name: str) -> Plan:
    """A MoE plan with expert parallelism over the network, and a long-context plan with
    context parallelism, both pipelined (1F1B, uneven or interleaved where the search says)."""
    if name == "ep":
        model, chips, pins = "mixtral-8x7b", 256, {"ep": 8, "pp": 2}
    else:
        model, chips, pins = "llama3-70b", 512, {"cp": 4, "pp": 4}
    return make_plan(
        load_model(model),
        load_profile("h100-8gpu-nodes"),
        chips,
        seq_len=32768 if name == "cp" else None,
        cluster=ClusterOptions(**pins, step=StepOptions(headroom=0.0)),
    )


@pytest.mark.parametrize("name", ["ep", "cp"])
def test_exposed_ep_and_cp_lanes_hold_the_recorded_time(name: str) -> None:
    plan = _comm_plan(name)
    c = plan.cluster
    assert c is not None
    recorded = c.step.ep_exposed_s if name == "ep" else c.step.cp_exposed_s
    assert recorded > 0
    events = step_events(plan)
    assert step_total(events) == pytest.approx(c.step.step_s, rel=1e-12)
    lane = [e for e in events if e.kind == name]
    # micro-batch 0's share on the pace stage, m times, is the recorded time: every stage
    # draws its chunks' share over its own blocks, so each stage's lane sums alike
    for stage in range(c.pp):
        mine = sum(e.end_s - e.start_s for e in lane if e.stage == stage)
        assert mine * c.micro_batches == pytest.approx(recorded, rel=1e-9)
    blocks = [e for e in events if e.kind == "block"]
    for e in lane:  # each lane event ends its block, inside it
        assert e.micro_batch == 0
        inside = [b for b in blocks if b.stage == e.stage and b.chunk == e.chunk]
        assert any(b.start_s <= e.start_s < e.end_s <= b.end_s for b in inside)
    trace = step_trace(plan, events)
    assert validate_trace(trace) == []
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert "exposed EP / CP communication" in tracks
    assert {e["tid"] for e in trace["traceEvents"] if e.get("cat") == name} == {4}
    assert draw_step(events, c.pp, 40)  # the text drawing skips the lanes


def test_a_plan_without_ep_or_cp_has_no_lane_events() -> None:
    events = step_events(_plan("pp4-1f1b"))
    assert not [e for e in events if e.kind in ("ep", "cp")]
