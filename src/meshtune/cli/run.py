"""``meshtune run``: execute a plan on a real engine (JAX ``shard_map``), check and time it.

With ``--distributed`` it first starts JAX's distributed runtime (one process per host; process
0 prints and writes). When JAX has not been imported yet, the command adds
``--xla_force_host_platform_device_count=P_r·P_c`` to ``XLA_FLAGS`` *before* importing it, so
that a machine without accelerators gets one virtual CPU device per chip of the plan's mesh. The
flag concerns the host platform only: where accelerators are present JAX still uses them.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from meshtune.cli._app import app, fail, handle_errors, one_line, wrote
from meshtune.io import check_writable, read_text, write_atomic, writes_through

if TYPE_CHECKING:
    from meshtune.engines.jax_engine import RunReport
    from meshtune.engines.passes import LayerPass
    from meshtune.plan.models import Plan

EXIT_RUN_FAILED = 1
_DEVICE_FLAG = "--xla_force_host_platform_device_count"
MAX_HOST_DEVICES = 4096  # virtual CPU devices meshtune asks for at most (each has a thread pool)


class EngineName(str, Enum):
    """``--engine`` choices."""

    jax = "jax"


class SizeName(str, Enum):
    """``--size`` choices."""

    reduced = "reduced"
    full = "full"


class DtypeName(str, Enum):
    """``--dtype`` choices."""

    float32 = "float32"
    bfloat16 = "bfloat16"


def ensure_host_devices(count: int) -> None:
    """Ask XLA for ``count`` virtual CPU devices, unless JAX started, the flag is set, or
    ``count`` exceeds :data:`MAX_HOST_DEVICES` (then the engine reports too few devices)."""
    if "jax" in sys.modules or count > MAX_HOST_DEVICES:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if re.search(rf"{_DEVICE_FLAG}=\d+", flags):
        return
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_FLAG}={count}".strip()


@contextlib.contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    """While active, file descriptor 1 (what native libraries print to) goes to stderr."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def gemm_log_path(path: Path) -> Path:
    """Where ``--emit-log FILE`` puts the GeMM timings: ``.gemm`` inserted before the suffix.

    Only beside a file: ``FILE`` that is standard output, a device or a FIFO is refused
    (``/dev/null.gemm.csv`` or ``-.gemm.csv`` would be a new regular file nobody asked for).
    """
    if writes_through(path):
        raise fail(
            f"--emit-log {path}: not a file (standard output, a device or a FIFO), and the GeMM "
            "timings go to a file beside it: give the path of a file"
        )
    return path.with_name(f"{path.stem}.gemm{path.suffix or '.csv'}")


_PASS_LABELS = {"forward": "fwd", "backward_data": "bwd-d", "backward_weight": "bwd-w"}


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.3f}"


_PLAN_FILE = typer.Argument(..., help="A plan file written by `meshtune plan -o`.")
_ENGINE = typer.Option(EngineName.jax, "--engine", help="Execution engine.")
_SIZE = typer.Option(
    SizeName.reduced,
    "--size",
    help="reduced: the smallest sizes that keep the plan's divisibility (as verify); "
    "full: the plan's sizes (for real accelerators).",
)
_REPEAT = typer.Option(5, "--repeat", help="Timed calls per pass after one warm-up.")
_DTYPE = typer.Option(DtypeName.float32, "--dtype", help="Operand type.")
_SEED = typer.Option(0, "--seed", help="Seed of the random operands.")
_JSON = typer.Option(False, "--json", help="Print the report as JSON on stdout.")
_EMIT_LOG = typer.Option(
    None,
    "--emit-log",
    help="Also time each collective and local GeMM on its own and write them for "
    "`meshtune calibrate`: collectives to FILE (canonical CSV), GeMMs to FILE.gemm.csv.",
)
_FORCE = typer.Option(False, "--force", help="Overwrite existing --emit-log files.")
_DISTRIBUTED = typer.Option(
    False,
    "--distributed",
    help="Start JAX's distributed runtime first, for one process per host (TPU pod slice, "
    "SLURM or Open MPI job: detected; else give the next three options). Process 0 prints.",
)
_COORDINATOR = typer.Option(
    None, "--coordinator", help="HOST:PORT of process 0 (with --distributed)."
)
_NUM_PROCESSES = typer.Option(
    None, "--num-processes", help="Number of processes (with --distributed)."
)
_PROCESS_ID = typer.Option(
    None, "--process-id", help="This process's index, 0 … N−1 (with --distributed)."
)
_PROFILE = typer.Option(
    None,
    "--profile",
    help="The plan's profile as a TOML file, for the model times (a plan names catalog "
    "profiles only).",
)
_NO_CHECK = typer.Option(
    False,
    "--no-check",
    help="Time the passes only, without the dense NumPy check (for --size full passes "
    "whose check does not fit the host).",
)


@app.command()
@handle_errors
def run(
    plan_file: Path = _PLAN_FILE,
    engine: EngineName = _ENGINE,
    size: SizeName = _SIZE,
    repeat: int = _REPEAT,
    dtype: DtypeName = _DTYPE,
    seed: int = _SEED,
    as_json: bool = _JSON,
    emit_log: Path | None = _EMIT_LOG,
    force: bool = _FORCE,
    distributed: bool = _DISTRIBUTED,
    coordinator: str | None = _COORDINATOR,
    num_processes: int | None = _NUM_PROCESSES,
    process_id: int | None = _PROCESS_ID,
    profile: Path | None = _PROFILE,
    no_check: bool = _NO_CHECK,
) -> None:
    """Run every pass of a plan on JAX, check it against NumPy and time it.

    Exit 0 when every pass matches NumPy, 1 when one does not, 2 on bad input.
    """
    from meshtune.catalog import load_profile
    from meshtune.engines import require_jax
    from meshtune.engines.passes import check_host_memory, plan_passes
    from meshtune.verify.run import load_plan, profile_for

    _check_run_options(repeat, seed, distributed, coordinator, num_processes, process_id)
    if emit_log is not None:
        check_writable(emit_log, force=force)  # first: '' (a folder) has no GeMM log name
    gemm_log = gemm_log_path(emit_log) if emit_log is not None else None
    for path in (emit_log, gemm_log):
        if path is not None:
            check_writable(path, force=force)
    plan = load_plan(read_text(plan_file), str(plan_file))
    hardware, _ = profile_for(plan, load_profile(profile) if profile is not None else None)
    jobs = plan_passes(plan, size.value, hardware)
    if not no_check:
        check_host_memory(jobs)
    require_jax()
    chips = plan.mesh.rows * plan.mesh.cols
    if not distributed:
        ensure_host_devices(chips)
    elif num_processes is not None and chips % num_processes == 0:
        ensure_host_devices(chips // num_processes)
    from meshtune.engines import jax_engine

    if not distributed and chips > MAX_HOST_DEVICES:
        _refuse_beyond_host(chips, plan.mesh.rows, plan.mesh.cols)

    # The distributed runtime's libraries (gloo) print to the process's stdout: keep the
    # report's stdout clean by sending file descriptor 1 to stderr while the engine runs.
    with _stdout_to_stderr(distributed):
        if distributed:
            jax_engine.start_distributed(coordinator, num_processes, process_id)
        with _progress(not as_json and not distributed) as progress:
            report = jax_engine.run_plan(
                plan,
                jobs,
                dtype=dtype.value,
                repeat=repeat,
                seed=seed,
                check=not no_check,
                progress=progress,
            )
        primary = jax_engine.is_primary()
        if emit_log is not None and gemm_log is not None:
            _emit_logs(plan, jobs, dtype.value, repeat, (emit_log, gemm_log), primary, force)
    if not primary:
        raise typer.Exit(0 if report.ok else EXIT_RUN_FAILED)
    if as_json:
        from meshtune.report.console import json_text

        typer.echo(json_text(report.to_json()), nl=False)
    else:
        predicted = any(job.predicted_s is not None for job in jobs)
        _render(report, plan_file, predicted, engine.value)
        for path in (emit_log, gemm_log):
            wrote(path)
    if not report.ok:
        failures = report.failures()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        sys.stderr.write(f"meshtune: run failed: {one_line(failures[0])}{more}\n")
        raise typer.Exit(EXIT_RUN_FAILED)


def _check_run_options(
    repeat: int,
    seed: int,
    distributed: bool,
    coordinator: str | None,
    num_processes: int | None,
    process_id: int | None,
) -> None:
    """One line for ``--repeat`` out of 1 … 10000, a negative ``--seed``, or the three
    distributed-runtime options given without ``--distributed``, partly, or out of range."""
    if repeat < 1 or repeat > 10_000:
        raise fail(f"--repeat must be between 1 and 10000, got {repeat}")
    if seed < 0:
        raise fail(f"--seed must be a non-negative integer, got {seed}")
    cluster = (coordinator, num_processes, process_id)
    if any(v is not None for v in cluster) and not distributed:
        raise fail("--coordinator, --num-processes and --process-id need --distributed")
    if any(v is None for v in cluster) and any(v is not None for v in cluster):
        raise fail("give all of --coordinator, --num-processes and --process-id, or none")
    if (
        num_processes is not None
        and process_id is not None
        and not (1 <= num_processes <= 100_000 and 0 <= process_id < num_processes)
    ):
        raise fail(
            f"--process-id {process_id} must be in 0 … --num-processes − 1 "
            f"(--num-processes {num_processes})"
        )


def _emit_logs(
    plan: Plan,
    jobs: list[LayerPass],
    dtype: str,
    repeat: int,
    paths: tuple[Path, Path],
    primary: bool,
    force: bool,
) -> None:
    """Time each collective and local GeMM of ``jobs`` on its own (every process takes part)
    and, on the primary process, write them for ``meshtune calibrate``: collectives to
    ``paths[0]`` (canonical CSV), GeMMs to ``paths[1]``."""
    from meshtune.engines import jax_engine

    timed = jax_engine.collective_timings(plan, jobs, dtype=dtype, repeat=repeat)
    gemms = jax_engine.gemm_timings(jobs, plan, dtype=dtype, repeat=repeat)
    if primary:
        write_atomic(paths[0], jax_engine.canonical_csv(timed), force=force)
        gemm_text = jax_engine.gemm_csv(gemms, dtype, repeat)
        write_atomic(paths[1], gemm_text, force=force)


def _refuse_beyond_host(chips: int, rows: int, cols: int) -> None:
    """One line when the mesh needs more devices than JAX has and meshtune would start."""
    import jax

    if jax.device_count() < chips:
        raise fail(
            f"mesh {rows}x{cols} needs {chips} devices; JAX sees {jax.device_count()} "
            f"({jax.default_backend()}) and meshtune starts at most {MAX_HOST_DEVICES} virtual "
            f"CPU devices: run it where {chips} accelerators are (--distributed), or verify it "
            "on the NumPy virtual mesh (meshtune verify)"
        )


@contextlib.contextmanager
def _progress(active: bool) -> Iterator[Callable[[int, int, LayerPass], None] | None]:
    """A transient status line on a terminal's stderr (``pass 3/12: qkv backward_data``);
    nothing when stderr is not a terminal or ``active`` is false."""
    if not active or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("starting") as status:

        def show(i: int, total: int, job: LayerPass) -> None:
            status.update(f"pass {i + 1}/{total}: {job.layer} {job.op.pass_.value}")

        yield show


def _render(report: RunReport, plan_file: Path, predicted: bool, engine: str) -> None:
    from rich.table import Table

    from meshtune.engines.jax_engine import TOLERANCE
    from meshtune.report.console import make_console, shown

    title = (
        f"{shown(str(plan_file))} on {engine}: {report.rows}×{report.cols} mesh, "
        f"{report.devices} {report.platform} devices in {report.processes} process(es), "
        f"{report.dtype}, median of {report.repeat}"
    )
    table = Table(title=title)
    table.add_column("layer", no_wrap=True)
    table.add_column("pass", no_wrap=True)
    table.add_column("flow")
    table.add_column("m×n×k", no_wrap=True)
    table.add_column("S", justify="right")
    table.add_column("max err", no_wrap=True)  # "—": timed only (--no-check)
    table.add_column("run ms", justify="right", no_wrap=True)
    table.add_column("model ms", justify="right", no_wrap=True)
    layer_totals: dict[str, tuple[float, float | None]] = {}
    for r in report.runs:
        table.add_row(
            shown(r.layer),
            shown(_PASS_LABELS.get(r.pass_, r.pass_)),
            shown(r.dataflow) + ("ᵀ" if r.transposed else ""),
            f"{r.m}×{r.n}×{r.k}",
            str(r.slices),
            (f"{r.max_abs_error:.1e}" + ("" if r.ok else " ✗")) if r.checked else "—",
            _ms(r.measured_s),
            _ms(r.predicted_s),
        )
        got, want = layer_totals.get(r.layer, (0.0, 0.0))
        pred = None if want is None or r.predicted_s is None else want + r.predicted_s
        layer_totals[r.layer] = (got + r.measured_s, pred)
    table.add_section()
    for name, (got, want) in layer_totals.items():
        table.add_row(shown(name), "layer", "", "", "", "", _ms(got), _ms(want))
    console = make_console()
    console.print(table)
    note = (
        "ms: the plan profile's cost model (§3.2.2) at these sizes"
        if predicted
        else "ms: — (the plan's profile is not available)"
    )
    console.print(
        f"max err: within {TOLERANCE[report.dtype]:g}·√k unless marked ✗ (— not checked); "
        f"{report.programs} program(s) compiled and {report.timed} timed for "
        f"{len(report.runs)} passes (passes with the same program and sizes share a timing)"
    )
    console.print(f"run: median measured time; model {note}")
