"""``meshtune plan`` (``schema``, ``models``, ``profiles``: :mod:`meshtune.cli.plan_inputs`)."""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from pathlib import Path

import typer
from rich.markup import escape

from meshtune.algorithms.registry import DEFAULT_ALGORITHM, algorithm_names, comparison_families
from meshtune.calibrate.warnings import range_warnings
from meshtune.catalog import load_model, load_profile
from meshtune.cli._app import app, fail, handle_errors, warn, wrote
from meshtune.compare.alternatives import alternatives
from meshtune.errors import MeshtuneError
from meshtune.hardware.mesh import MAX_CHIPS
from meshtune.hardware.profile import HardwareProfile
from meshtune.io import check_writable, read_text, write_atomic, writes_stdout
from meshtune.plan import MAX_DIMENSION, MAX_TOP, Plan
from meshtune.planner.make import make_plan
from meshtune.report.alternatives import advice, alternatives_table
from meshtune.report.console import make_console
from meshtune.report.plan import render_plan
from meshtune.report.progress import working
from meshtune.search.space import sharing
from meshtune.step.options import DEFAULT_HEADROOM, ClusterOptions


class DataflowOption(str, Enum):
    """``--dataflow`` choices."""

    auto = "auto"
    ystn = "ystn"
    xstn = "xstn"
    wstn = "wstn"


class RecomputeOption(str, Enum):
    """``--recompute`` choices (meshtune.memory)."""

    none = "none"
    selective = "selective"
    full = "full"


class AttentionOption(str, Enum):
    """``--attention`` choices (meshtune.step.work)."""

    fused = "fused"
    plain = "plain"


class GradAccumulationOption(str, Enum):
    """``--grad-accumulation`` choices (meshtune.step.options.StepOptions)."""

    fused = "fused"
    separate = "separate"


class CpCommOption(str, Enum):
    """``--cp-comm`` choices (meshtune.step.cp)."""

    ring = "ring"
    all_gather = "all-gather"


class ScheduleOption(str, Enum):
    """``--schedule`` choices (meshtune.step.pipeline)."""

    one_f_one_b = "1f1b"
    dualpipe = "dualpipe"


class PrecisionOption(str, Enum):
    """``--precision`` choices (meshtune.step.options.StepOptions)."""

    bf16 = "bf16"
    fp8 = "fp8"


@app.command()
@handle_errors
@sharing()
def plan(
    model: str | None = typer.Argument(
        None, help="Model name from `meshtune models`, or a path to a model TOML file."
    ),
    chips: int = typer.Option(
        ..., "--chips", "-n", min=1, max=MAX_CHIPS, help="Number of chips in the 2D mesh."
    ),
    batch: int | None = typer.Option(
        None,
        "--batch",
        "-b",
        min=1,
        max=MAX_DIMENSION,
        help="Sequences [default: chips/2, as in §5.1.1].",
    ),
    seq: int | None = typer.Option(
        None,
        "--seq",
        "-s",
        min=1,
        max=MAX_DIMENSION,
        help="Sequence length [default: the model's seq_len].",
    ),
    profile: str = typer.Option(
        "tpuv4", "--profile", "-p", help="Profile name from `meshtune profiles`, or a TOML path."
    ),
    model_file: Path | None = typer.Option(
        None, "--model-file", help="Plan a model spec from this TOML file instead of MODEL."
    ),
    shapes: str | None = typer.Option(
        None, "--shapes", help="Restrict the search to these shapes, e.g. 32x8,16x16."
    ),
    dataflow: DataflowOption = typer.Option(
        DataflowOption.auto,
        "--dataflow",
        help="auto: keep the largest matrix stationary; ystn / xstn / wstn: that matrix "
        "stationary everywhere.",
    ),
    algorithm: str = typer.Option(
        DEFAULT_ALGORITHM,
        "--algorithm",
        "-a",
        help=f"Distributed GeMM algorithm: {', '.join(algorithm_names())}, or auto (the fastest "
        "that an engine runs).",
    ),
    all_algorithms: bool = typer.Option(
        False,
        "--all-algorithms",
        help="With --algorithm auto, also search the algorithms no engine runs yet.",
    ),
    dp: int | None = typer.Option(None, "--dp", min=1, max=MAX_CHIPS, help="Pin DP replicas."),
    pp: int | None = typer.Option(None, "--pp", min=1, max=MAX_CHIPS, help="Pin PP stages."),
    mesh: str | None = typer.Option(None, "--mesh", help="Pin the TP mesh, e.g. 8x4."),
    micro_batches: int | None = typer.Option(
        None, "--micro-batches", min=1, max=MAX_DIMENSION, help="Pin micro-batches per replica."
    ),
    zero1: bool = typer.Option(False, "--zero1", help="Same as --zero 1."),
    zero: int | None = typer.Option(
        None,
        "--zero",
        min=0,
        max=3,
        help="Pin the ZeRO stage: 0 plain DP, 1 optimizer, 2 + gradients, 3 + weights (FSDP) "
        "sharded over DP [default: the lowest that fits].",
    ),
    vpp: int | None = typer.Option(
        None,
        "--vpp",
        min=1,
        max=MAX_DIMENSION,
        help="Pin the virtual stages per chip (interleaved 1F1B; 1: plain 1F1B).",
    ),
    ep: int | None = typer.Option(
        None,
        "--ep",
        min=1,
        max=MAX_DIMENSION,
        help="Pin the expert-parallel ranks of a mixture of experts (among the DP replicas) "
        "[default: searched over the divisors of DP and the expert count].",
    ),
    capacity_factor: float | None = typer.Option(
        None,
        "--capacity-factor",
        min=1.0,
        max=1e3,
        help="A mixture of experts' load imbalance: the busiest expert's tokens over the "
        "balanced share [default: the model's, 1.0 = balanced routing].",
    ),
    cp: int | None = typer.Option(
        None,
        "--cp",
        min=1,
        max=MAX_DIMENSION,
        help="Pin the context-parallel ranks (ring attention; each holds seq / cp tokens) "
        "[default: searched where each rank keeps at least 8,192 tokens].",
    ),
    headroom: float = typer.Option(
        DEFAULT_HEADROOM,
        "--headroom",
        min=0.0,
        max=0.99,
        help="Fraction of each chip's memory a plan leaves free (fragmentation, workspaces).",
    ),
    attention: AttentionOption = typer.Option(
        AttentionOption.fused,
        "--attention",
        help="Attention kernel: fused (FlashAttention) or plain (scores in memory).",
    ),
    recompute: RecomputeOption = typer.Option(
        RecomputeOption.selective, "--recompute", help="Activations kept for the backward pass."
    ),
    dropout: bool = typer.Option(
        False,
        "--dropout/--no-dropout",
        help="Attention and hidden dropout on (their masks pass through memory).",
    ),
    grad_overlap: bool = typer.Option(
        True,
        "--grad-overlap/--no-grad-overlap",
        help="Overlap the DP gradient reduction with the backward pass (off: reduce after it).",
    ),
    fp32_grads: bool = typer.Option(
        True,
        "--fp32-grads/--no-fp32-grads",
        help="Accumulate and reduce gradients in fp32 (Megatron-LM's default under bf16).",
    ),
    grad_accumulation: GradAccumulationOption = typer.Option(
        GradAccumulationOption.fused,
        "--grad-accumulation",
        help="fused: the weight-gradient GeMMs add into the gradient buffer (Megatron); "
        "separate: a memory pass per micro-batch does (DeepSpeed's BF16 optimizer, autograd).",
    ),
    grad_all_reduce: bool = typer.Option(
        False,
        "--grad-all-reduce/--no-grad-all-reduce",
        help="All-reduce whole gradients even with ZeRO-1/2, then all-gather the weights "
        "(DeepSpeed's pipeline engine with its BF16 optimizer).",
    ),
    zero3_recompute_gather: bool = typer.Option(
        False,
        "--zero3-recompute-gather/--no-zero3-recompute-gather",
        help="Under ZeRO-3 with full recompute, gather the weights again for the recomputed "
        "forward (DeepSpeed ZeRO-3; off: the backward's gather serves it, as PyTorch FSDP).",
    ),
    cp_comm: CpCommOption = typer.Option(
        CpCommOption.ring,
        "--cp-comm",
        help="How context parallelism moves K and V: ring (Megatron-Core, overlapped with "
        "attention) or all-gather (Llama 3, exposed).",
    ),
    schedule: ScheduleOption = typer.Option(
        ScheduleOption.one_f_one_b,
        "--schedule",
        help="Pipeline schedule: 1f1b (interleaved with --vpp > 1) or dualpipe (DeepSeek-V3: "
        "two model copies, all-to-alls and stage sends hidden behind the paired chunk).",
    ),
    precision: PrecisionOption = typer.Option(
        PrecisionOption.bf16,
        "--precision",
        help="bf16: every GeMM in bf16; fp8: the FC GeMMs at the profile's FP8 rate, state and "
        "activations as DeepSeek-V3's FP8 training keeps them (profiles with an fp8 section).",
    ),
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="Training engine whose host time per block and micro-batch the step adds, as "
        "measured in validation/engines/engines.toml (bigscience-megatron-deepspeed: "
        "Megatron-DeepSpeed with DeepSpeed's pipeline engine); default: none, the host work "
        "hides behind the GPU's (Megatron-LM).",
    ),
    mesh_only: bool = typer.Option(
        False, "--mesh-only", help="One mesh of every chip, no DP/PP/memory (the paper's setup)."
    ),
    top: int = typer.Option(5, "--top", "-k", min=1, max=MAX_TOP, help="How many shapes to list."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout."),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Write the versioned plan file here (atomic; '-' is stdout, instead of the report).",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --output file."),
    compare_alternatives: bool = typer.Option(
        True,
        "--alternatives/--no-alternatives",
        help="End the report with the best plan of each algorithm family "
        f"({', '.join(comparison_families())}) and lead with the faster one's advice.",
    ),
    check: Path | None = typer.Option(
        None,
        "--check",
        help="Re-derive the plan and compare it with this committed plan file: exit 0 when "
        "identical, 1 with a diff when stale.",
    ),
    from_setup: tuple[str, Path] | None = typer.Option(
        None,
        "--from",
        help="FRAMEWORK FILE: price the split a megatron (arguments), maxtext (YAML), "
        "torchtitan (TOML) or deepspeed (JSON) configuration describes, beside the best plan.",
    ),
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
    shape_list = [s for s in shapes.split(",") if s.strip()] if shapes is not None else None
    pins = (dp, pp, micro_batches, zero1, zero, vpp, ep, cp)
    if mesh_only and precision is not PrecisionOption.bf16:
        raise fail("--precision fp8 prices the training step; drop --mesh-only")
    if mesh_only and engine is not None:
        raise fail("--engine prices the training step; drop --mesh-only")
    if mesh_only and pins != (None,) * 3 + (False, None, None, None, None):
        raise fail(
            "--dp, --pp, --micro-batches, --zero, --zero1, --vpp, --ep and --cp plan the "
            "cluster; drop --mesh-only"
        )
    if mesh is not None and shapes is not None:
        raise fail("give --mesh (one shape) or --shapes (a list), not both")
    if mesh is not None:
        shape_list = [mesh]
    committed = read_text(check) if check is not None else None  # unreadable: fail first
    asked = ClusterOptions(  # the step's options; the levels are pinned below or by --from
        recompute=recompute.value,
        headroom=headroom,
        attention=attention.value,
        dropout=dropout,
        grad_overlap=grad_overlap,
        fp32_grads=fp32_grads,
        grad_accumulation=grad_accumulation.value,
        grad_all_reduce=grad_all_reduce,
        zero3_recompute_gather=zero3_recompute_gather,
        cp_comm=cp_comm.value,
        schedule=schedule.value,
        precision=precision.value,
        block_overhead_s=_engine_host_time(engine),
    )
    if from_setup is not None:
        from meshtune.cli._plan_from import plan_from

        pinned = (dp, pp, mesh, shapes, micro_batches, zero, vpp, ep, cp, check)
        if mesh_only or zero1 or pinned != (None,) * len(pinned):
            raise fail(
                "--from pins the split its file describes; drop --dp, --pp, --mesh, "
                "--shapes, --micro-batches, --zero, --zero1, --vpp, --ep, --cp, --mesh-only, "
                "--check"
            )
        pinned_plan, gain = plan_from(
            from_setup,
            spec,
            hardware,
            chips,
            batch=batch,
            seq_len=seq,
            mode=dataflow.value,
            algorithm=algorithm,
            levels=asked,
        )
        _emit(pinned_plan, output, force=force, as_json=as_json, extra=gain, profile=hardware)
        return
    levels = replace(
        asked,
        dp=dp,
        pp=pp,
        micro_batches=micro_batches,
        zero1=zero1,
        zero=zero,
        vpp=vpp,
        ep=ep,
        cp=cp,
    )
    with working(f"planning {spec.name} on {chips} chips ({algorithm})"):
        result = make_plan(
            spec,
            hardware,
            chips,
            batch=batch,
            seq_len=seq,
            mode=dataflow.value,
            algorithm=algorithm,
            shapes=shape_list,
            top=top,
            cluster=None if mesh_only else levels,
            all_algorithms=all_algorithms,
        )
    for warning in range_warnings(hardware, result.mesh.rows, result.mesh.cols):
        warn(warning)
    if check is not None and committed is not None:
        from meshtune.verify.drift import drift_report, plan_drift

        drifts = plan_drift(committed, str(check), result)
        typer.echo(drift_report(drifts, str(check)), nl=False)
        raise typer.Exit(1 if drifts else 0)
    _emit(
        result,
        output,
        force=force,
        as_json=as_json,
        alternatives_on=hardware if compare_alternatives else None,
        profile=hardware,
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
        typer.echo(result.to_json(), nl=False)
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
        console.print(escape(extra))
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
