"""``meshtune plan`` (``schema``, ``models``, ``profiles``: :mod:`meshtune.cli.plan_inputs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from meshtune.algorithms.registry import DEFAULT_ALGORITHM, algorithm_names, comparison_families
from meshtune.calibrate.warnings import range_warnings
from meshtune.catalog import load_model, load_profile
from meshtune.cli._app import app, fail, handle_errors, warn, wrote
from meshtune.cli._options import cluster_options, pinned_levels, step_options, with_options
from meshtune.compare.alternatives import alternatives
from meshtune.dataflow import DataflowMode
from meshtune.errors import MeshtuneError
from meshtune.hardware.mesh import MAX_CHIPS
from meshtune.hardware.profile import HardwareProfile
from meshtune.io import check_writable, read_text, write_atomic, writes_stdout
from meshtune.plan import MAX_DIMENSION, MAX_TOP, Plan
from meshtune.planner.make import make_plan
from meshtune.report.alternatives import advice, alternatives_table
from meshtune.report.console import json_text, make_console, printable_lines, shown
from meshtune.report.plan import render_plan
from meshtune.report.progress import working
from meshtune.search.space import sharing
from meshtune.step.options import DEFAULT_OPTIONS, ClusterOptions

ModelArgument = Annotated[
    str | None,
    typer.Argument(help="Model name from `meshtune models`, or a path to a model TOML file."),
]
Chips = Annotated[
    int,
    typer.Option("--chips", "-n", min=1, max=MAX_CHIPS, help="Number of chips in the 2D mesh."),
]
Batch = Annotated[
    int | None,
    typer.Option(
        "--batch",
        "-b",
        min=1,
        max=MAX_DIMENSION,
        help="Sequences [default: chips/2, as in §5.1.1].",
    ),
]
Seq = Annotated[
    int | None,
    typer.Option(
        "--seq",
        "-s",
        min=1,
        max=MAX_DIMENSION,
        help="Sequence length [default: the model's seq_len].",
    ),
]
Profile = Annotated[
    str,
    typer.Option("--profile", "-p", help="Profile name from `meshtune profiles`, or a TOML path."),
]
ModelFile = Annotated[
    Path | None,
    typer.Option("--model-file", help="Plan a model spec from this TOML file instead of MODEL."),
]
Shapes = Annotated[
    str | None,
    typer.Option("--shapes", help="Restrict the search to these shapes, e.g. 32x8,16x16."),
]
Dataflow = Annotated[
    DataflowMode,
    typer.Option(
        "--dataflow",
        help="auto: keep the largest matrix stationary; ystn / xstn / wstn: that matrix "
        "stationary everywhere.",
    ),
]
AlgorithmName = Annotated[
    str,
    typer.Option(
        "--algorithm",
        "-a",
        help=f"Distributed GeMM algorithm: {', '.join(algorithm_names())}, or auto (the fastest "
        "that an engine runs).",
    ),
]
AllAlgorithms = Annotated[
    bool,
    typer.Option(
        "--all-algorithms",
        help="With --algorithm auto, also search the algorithms no engine runs yet.",
    ),
]
MeshShape = Annotated[str | None, typer.Option("--mesh", help="Pin the TP mesh, e.g. 8x4.")]
CapacityFactor = Annotated[
    float | None,
    typer.Option(
        "--capacity-factor",
        min=1.0,
        max=1e3,
        help="A mixture of experts' load imbalance: the busiest expert's tokens over the "
        "balanced share [default: the model's, 1.0 = balanced routing].",
    ),
]
Engine = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="Training engine whose host time per block and micro-batch the step adds, as "
        "measured in validation/engines/engines.toml (bigscience-megatron-deepspeed: "
        "Megatron-DeepSpeed with DeepSpeed's pipeline engine); default: none, the host work "
        "hides behind the GPU's (Megatron-LM).",
    ),
]
MeshOnly = Annotated[
    bool,
    typer.Option(
        "--mesh-only", help="One mesh of every chip, no DP/PP/memory (the paper's setup)."
    ),
]
Top = Annotated[
    int, typer.Option("--top", "-k", min=1, max=MAX_TOP, help="How many shapes to list.")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the plan as JSON on stdout.")]
Output = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the versioned plan file here (atomic; '-' is stdout, instead of the report).",
    ),
]
Force = Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")]
Alternatives = Annotated[
    bool,
    typer.Option(
        "--alternatives/--no-alternatives",
        help="End the report with the best plan of each algorithm family "
        f"({', '.join(comparison_families())}) and lead with the faster one's advice.",
    ),
]
Check = Annotated[
    Path | None,
    typer.Option(
        "--check",
        help="Re-derive the plan and compare it with this committed plan file: exit 0 when "
        "identical, 1 with a diff when stale.",
    ),
]
FromSetup = Annotated[
    tuple[str, Path] | None,
    typer.Option(
        "--from",
        help="FRAMEWORK FILE: price the split a megatron (arguments), maxtext (YAML), "
        "torchtitan (TOML) or deepspeed (JSON) configuration describes, beside the best plan.",
    ),
]


@app.command()
@handle_errors
@sharing()
@with_options(before="engine")
def plan(
    model: ModelArgument = None,
    *,
    chips: Chips,
    batch: Batch = None,
    seq: Seq = None,
    profile: Profile = "tpuv4",
    model_file: ModelFile = None,
    shapes: Shapes = None,
    dataflow: Dataflow = "auto",
    algorithm: AlgorithmName = DEFAULT_ALGORITHM,
    all_algorithms: AllAlgorithms = False,
    mesh: MeshShape = None,
    capacity_factor: CapacityFactor = None,
    engine: Engine = None,
    mesh_only: MeshOnly = False,
    top: Top = 5,
    as_json: AsJson = False,
    output: Output = None,
    force: Force = False,
    compare_alternatives: Alternatives = True,
    check: Check = None,
    from_setup: FromSetup = None,
    **options: Any,
) -> None:
    """Pick each FC layer's dataflow, the mesh shape and the slice counts; print the plan."""
    if (model is None) == (model_file is None):
        raise fail("give exactly one of MODEL or --model-file")
    if check is not None and output is not None:
        raise fail("--check compares with a committed plan and writes nothing; drop --output")
    if output is not None:
        check_writable(output, force=force)  # before the search: a refusal comes first
    spec = load_model(model_file if model_file is not None else str(model))
    if capacity_factor is not None:
        from meshtune.model.moe import with_capacity_factor

        spec = with_capacity_factor(spec, capacity_factor)
    hardware = load_profile(profile)
    pinned = pinned_levels(options)
    if mesh_only:
        _refuse_mesh_only(options, engine, pinned)
    if mesh is not None and shapes is not None:
        raise fail("give --mesh (one shape) or --shapes (a list), not both")
    shape_list = [s for s in shapes.split(",") if s.strip()] if shapes is not None else None
    committed = read_text(check) if check is not None else None  # unreadable: fail first
    step = step_options(options, block_overhead_s=_engine_host_time(engine))
    if from_setup is not None:
        if mesh_only or pinned or (mesh, shapes, check) != (None, None, None):
            raise fail(
                "--from pins the split its file describes; drop --dp, --pp, --mesh, "
                "--shapes, --micro-batches, --zero, --zero1, --vpp, --ep, --cp, --mesh-only, "
                "--check"
            )
        from meshtune.cli._plan_from import plan_from

        pinned_plan, gain = plan_from(
            from_setup,
            spec,
            hardware,
            chips,
            batch=batch,
            seq_len=seq,
            mode=dataflow,
            algorithm=algorithm,
            levels=ClusterOptions(step=step),
        )
        _emit(pinned_plan, output, force=force, as_json=as_json, extra=gain, profile=hardware)
        return
    with working(f"planning {spec.name} on {chips} chips ({algorithm})"):
        result = make_plan(
            spec,
            hardware,
            chips,
            batch=batch,
            seq_len=seq,
            mode=dataflow,
            algorithm=algorithm,
            shapes=[mesh] if mesh is not None else shape_list,
            top=top,
            cluster=None if mesh_only else cluster_options(options, step),
            all_algorithms=all_algorithms,
        )
    for warning in range_warnings(hardware, result.mesh.rows, result.mesh.cols):
        warn(warning)
    if check is not None and committed is not None:
        from meshtune.verify.drift import drift_report, plan_drift

        drifts = plan_drift(committed, str(check), result)
        typer.echo(printable_lines(drift_report(drifts, str(check))), nl=False)
        raise typer.Exit(1 if drifts else 0)
    _emit(
        result,
        output,
        force=force,
        as_json=as_json,
        alternatives_on=hardware if compare_alternatives else None,
        profile=hardware,
    )


def _refuse_mesh_only(options: dict[str, Any], engine: str | None, pinned: list[str]) -> None:
    """Refuse, with ``--mesh-only``, the options that price the training step."""
    if options["precision"] != DEFAULT_OPTIONS.precision:
        raise fail(f"--precision {options['precision']} prices the training step; drop --mesh-only")
    if engine is not None:
        raise fail("--engine prices the training step; drop --mesh-only")
    if pinned:
        raise fail(
            "--dp, --pp, --micro-batches, --zero, --zero1, --vpp, --ep and --cp plan the "
            "cluster; drop --mesh-only"
        )


def _emit(
    result: Plan,
    output: Path | None,
    *,
    force: bool,
    as_json: bool,
    extra: str | None = None,
    alternatives_on: HardwareProfile | None = None,
    profile: HardwareProfile | None = None,
) -> None:
    """Write the plan file, print the JSON or the report (and ``extra`` after it); with
    ``alternatives_on`` the best plan of each other algorithm family on that profile leads
    (when faster) and ends the report; ``profile``, the plan's, names the network tier of
    each level of a cluster split."""
    to_stdout = output is not None and writes_stdout(output)
    if output is not None:
        write_atomic(output, result.to_json(), force=force)
    if to_stdout:
        return
    if as_json:
        typer.echo(json_text(result.to_json()), nl=False)
        return
    console = make_console()
    found = None
    if alternatives_on is not None:
        with working("pricing the other algorithm families"):
            found = alternatives(result, alternatives_on)
        lead = advice(found)
        if lead is not None:
            console.print(lead)
    console.print(render_plan(result, _confidence(result), profile))
    if extra is not None:
        console.print(shown(extra))
    if found is not None:
        console.print(alternatives_table(found))
    wrote(output)


def _engine_host_time(engine: str | None) -> float:
    """``--engine``'s host time per block and micro-batch, seconds (0 without one); the
    engines' table is read only when one is named."""
    if engine is None:
        return 0.0
    from meshtune.validation.engines import engine_overhead_s

    return engine_overhead_s(engine, where="--engine")


def _confidence(plan: Plan) -> str | None:
    """The validated interval of a cluster plan's step, or why there is none."""
    if plan.cluster is None:
        return None
    from meshtune.validation.confidence import step_confidence

    inputs = plan.inputs
    try:
        return step_confidence(inputs.model, inputs.profile, inputs.chips).describe()
    except MeshtuneError as exc:
        return f"step not validated: {exc}"
