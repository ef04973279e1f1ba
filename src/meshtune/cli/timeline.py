"""``meshtune timeline``: replay each pass's schedule; Perfetto trace and a terminal view (Fig. 4).

Plans of every registered algorithm replay (each entry's task graph,
:mod:`meshtune.timeline.graphs`). The terminal view draws, per pass, one line per resource
(compute, the axis-0 ring, the axis-1 ring and, on a [q, q, d] mesh, the axis-2 depth ring) scaled
to the pass's makespan; every event is drawn with the digit of its loop iteration (mod 10), so the
software pipelining of Figure 5 shows as the digits of one line running ahead of the next, and idle
time as ``·``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from meshtune.cli._app import app, fail, handle_errors, wrote
from meshtune.io import check_writable, read_text, write_atomic, writes_stdout

if TYPE_CHECKING:
    from rich.text import Text

    from meshtune.hardware.profile import HardwareProfile
    from meshtune.plan import Plan
    from meshtune.timeline.trace import PassTimeline

_STYLES = {
    "gemm": "green",
    "all_gather": "cyan",
    "reduce_scatter": "magenta",
    "send_recv": "yellow",
}
_LABELS = {"compute": "compute", "axis0": "axis 0 ", "axis1": "axis 1 ", "axis2": "axis 2 "}


def render_pass(timeline: PassTimeline, width: int) -> list[Text]:
    """Title and one line per resource of one pass, ``width`` cells for the makespan."""
    from rich.text import Text

    total = timeline.total_s
    lines = [
        Text.assemble(
            (f"{timeline.layer} {timeline.pass_name.replace('_', ' ')}", "bold"),
            f"  {total * 1e3:.3f} ms",
        )
    ]
    for resource, label in _LABELS.items():
        events = [e for e in timeline.events if e.task.resource == resource]
        if resource == "axis2" and not events:
            continue  # a 2D mesh has no depth ring
        line = Text(f"  {label} ")
        for cell in range(width):
            middle = (cell + 0.5) / width * total
            hit = next((e for e in events if e.start_s <= middle < e.end_s), None)
            if hit is None:
                line.append("·", style="dim")
            else:
                line.append(str(hit.task.iteration % 10), style=_STYLES.get(hit.task.kind, ""))
        lines.append(line)
    return lines


@app.command()
@handle_errors
def timeline(
    plan_file: Path = typer.Argument(..., help="A plan file written by `meshtune plan -o`."),
    layer: str | None = typer.Option(None, "--layer", help="Only this layer (e.g. qkv)."),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Write a trace-event JSON here (open it in ui.perfetto.dev or chrome://tracing).",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --output file."),
    width: int = typer.Option(64, "--width", help="Cells per pass in the terminal view."),
    profile: Path | None = typer.Option(
        None,
        "--profile",
        help="The plan's profile as a TOML file (a plan names catalog profiles only).",
    ),
    step: bool = typer.Option(
        False,
        "--step",
        help="The whole step of a cluster plan: pipeline stages, 1F1B micro-batches, bubbles, "
        "sends, the DP tail; its total is the plan's step time.",
    ),
) -> None:
    """Replay each pass's schedule (compute and every ring) with its algorithm's cost model;
    --step: the whole training step, stage by stage."""
    from meshtune.report.console import make_console, shown
    from meshtune.timeline.trace import chrome_trace, plan_timelines
    from meshtune.verify.run import load_plan

    if not 8 <= width <= 1000:
        raise typer.BadParameter(f"--width must be between 8 and 1000, got {width}")
    if output is not None:
        check_writable(output, force=force)
    plan = load_plan(read_text(plan_file), str(plan_file))
    if step and layer is not None:
        raise fail("--step draws the whole step; drop --layer")
    if step:
        if profile is not None:  # the step draws recorded times; a profile named must be the plan's
            _profile(plan, plan_file, profile)
        _step(plan, plan_file, output, force=force, width=width)
        return
    hardware = _profile(plan, plan_file, profile)
    passes = plan_timelines(plan, hardware, layer)
    if output is not None:
        write_atomic(output, json.dumps(chrome_trace(passes)) + "\n", force=force)
        if writes_stdout(output):
            return  # the trace is the output: no drawing, no status line
    console = make_console(highlight=False)
    console.print(
        f"{shown(str(plan_file))}: {plan.mesh.to_mesh().label} mesh, "
        f"{', '.join(dict.fromkeys(layer.algorithm for layer in plan.layers))}, profile "
        f"{shown(plan.inputs.profile)}; digits are loop iterations (mod 10), · is idle",
        soft_wrap=True,
    )
    for item in passes:
        for line in render_pass(item, width):
            console.print(line, crop=False, overflow="ignore")
    wrote(output)


def _profile(plan: Plan, plan_file: Path, profile: Path | None) -> HardwareProfile:
    """The profile to replay ``plan`` with: the file the user named (``--profile``), else the
    catalog profile the plan names; either must have the plan's content hash (one line if not)."""
    from meshtune.catalog import load_profile
    from meshtune.errors import ProfileError
    from meshtune.verify.run import profile_for

    hardware, why = profile_for(plan, load_profile(profile) if profile is not None else None)
    if hardware is None:
        raise ProfileError(f"{plan_file}: {why}")
    return hardware


def _step(plan: Plan, plan_file: Path, output: Path | None, *, force: bool, width: int) -> None:
    """``timeline --step``: the trace file and the terminal drawing of the step."""
    from meshtune.report.console import make_console, shown
    from meshtune.timeline.step import draw_step, step_events, step_total, step_trace

    events = step_events(plan)
    if output is not None:
        write_atomic(output, json.dumps(step_trace(plan, events)) + "\n", force=force)
        if writes_stdout(output):
            return
    cluster = plan.cluster
    if cluster is None:  # step_events has refused it already
        return
    console = make_console(highlight=False)
    console.print(
        f"{shown(str(plan_file))}: step {step_total(events):.4g} s, PP {cluster.pp} (v "
        f"{cluster.vpp}) x {cluster.micro_batches} micro-batches, DP {cluster.dp}; digits: "
        "forward of micro-batch n (mod 10), letters: its backward (a = 0), > send, = DP tail, "
        "o optimizer, · idle (bubble)",
        soft_wrap=True,
    )
    for line in draw_step(events, cluster.pp, width):
        console.print(line, crop=False, overflow="ignore", markup=False)
    wrote(output)
