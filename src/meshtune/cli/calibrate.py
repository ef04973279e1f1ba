"""``meshtune calibrate``: benchmark logs in, a hardware profile out (MeshSlice §3.2.2, §4.5)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

from meshtune.calibrate.formats.file_keys import WILDCARD
from meshtune.calibrate.formats.log_units import parse_size
from meshtune.calibrate.formats.records import LogFormat
from meshtune.catalog import load_profile
from meshtune.cli._app import app, fail, handle_errors, warn, wrote
from meshtune.hardware.calibration import MeasuredOp
from meshtune.io import check_writable, write_atomic, writes_stdout
from meshtune.report.console import json_text, make_console

if TYPE_CHECKING:
    from meshtune.calibrate.result import CalibrationResult

T = TypeVar("T")

_OPS = ", ".join(op.value for op in MeasuredOp)


def _keyed(option: str, specs: list[str], convert: Callable[[str], T]) -> dict[str, T]:
    """``KEY=VALUE`` option values (a bare ``VALUE`` means ``*=VALUE``) as a dict."""
    values: dict[str, T] = {}
    for spec in specs:
        key, _, value = spec.rpartition("=")
        key = key.strip() or WILDCARD
        try:
            values[key] = convert(value.strip())
        except ValueError as exc:
            raise fail(f"{option} '{spec}': {exc}") from None
    return values


def _axes(text: str) -> tuple[int, ...]:
    choices = {"0": (0,), "1": (1,), "both": (0, 1), "0,1": (0, 1)}
    if text.lower() not in choices:
        raise ValueError("the axis must be 0, 1 or both")
    return choices[text.lower()]


def _ranks(text: str) -> int:
    if not text.isdigit() or int(text) < 2:
        raise ValueError("the ring size must be an integer >= 2")
    return int(text)


def _op(text: str) -> MeasuredOp:
    try:
        return MeasuredOp(text.lower())
    except ValueError:
        raise ValueError(f"the op must be one of {_OPS}") from None


def _positive(option: str, value: float | None, example: str) -> float | None:
    """``value`` when it is a positive finite number (or absent), else a one-line error."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise fail(f"{option} {value:g}: expected a positive finite number, e.g. {example}")
    return value


def _at_least_one(option: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise fail(f"{option} {value}: expected an integer >= 1")
    return value


_LOGS = typer.Argument(
    None, help="Benchmark logs: files, or folders searched recursively.", show_default=False
)
_FORMAT = typer.Option(
    None, "--format", help="Read every log in this format instead of detecting it."
)
_AXIS_MAP = typer.Option(
    [],
    "--axis-map",
    help="Mesh axis of logs that ran on one ring: FILE=AXIS, OP=AXIS or AXIS for all; AXIS "
    "is 0 (ring of a mesh column, P_r), 1 (ring of a mesh row, P_c) or both (the default "
    "for a log that does not say). Repeatable.",
)
_RANKS = typer.Option(
    [],
    "--ranks",
    help="Ring size of logs that do not state it (OSU without a launch line, tables without a "
    "ranks column): FILE=P or P for all. Repeatable.",
)
_OP = typer.Option(
    [],
    "--op",
    help=f"Collective of logs that do not name it: FILE=OP ({_OPS}). Repeatable.",
)
_BASE = typer.Option(
    None,
    "--base",
    help="Profile (name or TOML path) giving every value the logs do not: compute, "
    "bytes_per_element, slice_block, ops or axes without logs. Writing a profile needs "
    "this or --peak-flops.",
)
_PEAK_FLOPS = typer.Option(
    None, "--peak-flops", help="Peak FLOP/s per chip, e.g. 312e12 (datasheet)."
)
_EFFECTIVE_FLOPS = typer.Option(
    None,
    "--effective-flops",
    help="Sustained GeMM FLOP/s per chip (else GeMM logs, --base, or assumed = peak).",
)
_BYTES_PER_ELEMENT = typer.Option(
    None, "--bytes-per-element", help="Operand width in bytes (else GeMM dtype, --base or 2)."
)
_SLICE_BLOCK = typer.Option(
    None, "--slice-block", help="Algorithm 2's block size B in elements (else --base or 8)."
)
_MIN_BYTES = typer.Option(
    None,
    "--min-bytes",
    help="Fit only shards at least this large (e.g. 512KiB) instead of choosing the "
    "bandwidth-dominated regime automatically.",
)
_DESCRIPTION = typer.Option(None, "--description", help="Profile description.")
_SOURCE = typer.Option(
    [], "--source", help="Provenance to record, e.g. where the logs come from. Repeatable."
)
_OUTPUT = typer.Option(
    None,
    "--output",
    "-o",
    help="Write the profile TOML here (atomic); its name is the stem. '-' is stdout.",
)
_FORCE = typer.Option(False, "--force", help="Overwrite an existing --output / --plot.")
_JSON = typer.Option(
    False, "--json", help="Print the fits, residuals and profile as JSON on stdout."
)
_STRICT = typer.Option(False, "--strict", help="Fail on the first unparseable line.")
_POOL = typer.Option(
    False,
    "--pool",
    help="Fit logs of different systems (their Rank lines name different accelerators) "
    "together instead of refusing them.",
)
_TEMPLATE = typer.Option(
    False, "--template", help="Print the canonical CSV/JSONL and GeMM formats, then exit."
)
_PLOT = typer.Option(
    None, "--plot", help="Save a residual plot PNG here (needs the 'plot' extra: matplotlib)."
)


@app.command()
@handle_errors
def calibrate(
    logs: list[Path] | None = _LOGS,
    fmt: LogFormat | None = _FORMAT,
    axis_map: list[str] = _AXIS_MAP,
    ranks: list[str] = _RANKS,
    op: list[str] = _OP,
    base: str | None = _BASE,
    peak_flops: float | None = _PEAK_FLOPS,
    effective_flops: float | None = _EFFECTIVE_FLOPS,
    bytes_per_element: int | None = _BYTES_PER_ELEMENT,
    slice_block: int | None = _SLICE_BLOCK,
    min_bytes: str | None = _MIN_BYTES,
    description: str | None = _DESCRIPTION,
    source: list[str] = _SOURCE,
    output: Path | None = _OUTPUT,
    force: bool = _FORCE,
    as_json: bool = _JSON,
    strict: bool = _STRICT,
    pool: bool = _POOL,
    template: bool = _TEMPLATE,
    plot: Path | None = _PLOT,
) -> None:
    """Fit a hardware profile (t_launch, t_sync, bw per op and axis) from benchmark logs."""
    # Imported here: NumPy and the parsers are not needed by the other commands' start-up.
    from meshtune.calibrate import TEMPLATE, fit_profile, parse_logs, profile_toml

    if template:
        if logs:
            raise fail("--template prints the format and takes no logs")
        typer.echo(TEMPLATE, nl=False)
        return
    if not logs:
        raise fail("no benchmark logs given; pass files or folders (see --template)")
    # Every option is checked before any log is read or fitted.
    peak_flops, effective_flops = _flops(peak_flops, effective_flops)
    bytes_per_element = _at_least_one("--bytes-per-element", bytes_per_element)
    slice_block = _at_least_one("--slice-block", slice_block)
    cutoff = _min_bytes(min_bytes)
    ranks_map = _keyed("--ranks", ranks, _ranks)
    ops_map = _keyed("--op", op, _op)
    axes_map = _keyed("--axis-map", axis_map, _axes)
    base_profile = load_profile(base) if base is not None else None
    peak_known = peak_flops is not None or base_profile is not None
    to_stdout = _check_outputs(output, plot, force=force, as_json=as_json, peak_known=peak_known)
    parsed = parse_logs(logs, fmt, strict=strict, ranks=ranks_map, ops=ops_map)
    result = fit_profile(
        parsed,
        name=output.stem if output is not None and not to_stdout else "calibrated",
        axis_map=axes_map,
        base=base_profile,
        peak_flops_per_s=peak_flops,
        effective_flops_per_s=effective_flops,
        bytes_per_element=bytes_per_element,
        slice_block=slice_block,
        min_shard_bytes=cutoff,
        description=description,
        sources=source,
        pool=pool,
    )
    text = profile_toml(result) if output is not None else None  # what is missing: one line
    _emit(result, text, output, plot, force=force, as_json=as_json, to_stdout=to_stdout)


def _flops(peak: float | None, effective: float | None) -> tuple[float | None, float | None]:
    """``--peak-flops`` and ``--effective-flops``, each positive and finite when given, the
    sustained rate no higher than the peak."""
    peak = _positive("--peak-flops", peak, "312e12")
    effective = _positive("--effective-flops", effective, "250e12")
    if peak is not None and effective is not None and effective > peak:
        raise fail(
            f"--effective-flops {effective:g} exceeds --peak-flops {peak:g}; the "
            "sustained rate cannot beat the peak"
        )
    return peak, effective


def _min_bytes(text: str | None) -> float | None:
    """``--min-bytes`` in bytes (``None`` when not given); one line for anything but a size."""
    if text is None:
        return None
    cutoff = parse_size(text)
    if cutoff is None or not 0 < cutoff < math.inf:
        raise fail(f"--min-bytes '{text}': expected a size such as 524288, 512K or 1MiB")
    return cutoff


def _check_outputs(
    output: Path | None, plot: Path | None, *, force: bool, as_json: bool, peak_known: bool
) -> bool:
    """Whether the profile goes to stdout (``-o -``), after checking that a profile to write
    has its peak FLOP/s (``peak_known``), that ``--plot`` can draw, that only one thing writes
    to stdout and that both destinations can be written."""
    if output is not None and not peak_known:
        raise fail(
            "writing a profile needs the chip's peak FLOP/s, which no log measures: pass "
            "--peak-flops (the datasheet value, e.g. 312e12) or --base PROFILE"
        )
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise fail("--plot needs matplotlib: pip install 'meshtune[plot]'") from None
    to_stdout = output is not None and writes_stdout(output)
    if to_stdout and as_json:
        raise fail("-o - and --json both write to stdout; choose one")
    for path in (output, plot):
        if path is not None:
            check_writable(path, force=force)
    return to_stdout


def _emit(
    result: CalibrationResult,
    text: str | None,
    output: Path | None,
    plot: Path | None,
    *,
    force: bool,
    as_json: bool,
    to_stdout: bool,
) -> None:
    """Write the profile ``text`` and the plot, print the warnings, then the result: as JSON,
    nothing more (the profile went to stdout), or the report on the terminal."""
    from meshtune.report.calibration import render_calibration, write_residual_plot

    # Written before the warnings: a destination that fails (/dev/full) is then the only line.
    if output is not None and text is not None:
        write_atomic(output, text, force=force)
    if plot is not None:
        write_residual_plot(result, plot, force=force)
    for warning in result.warnings:
        warn(warning)
    if as_json:
        typer.echo(json_text(json.dumps(result.to_json(), indent=2)))
        return
    if to_stdout:
        return
    console = make_console()
    console.print(render_calibration(result))
    for path in (output, plot):
        wrote(path)
    if output is None and not result.missing:
        console.print("pass -o PATH to write the profile")
