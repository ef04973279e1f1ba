"""``meshtune calibrate``: benchmark logs in, a hardware profile out (MeshSlice §3.2.2, §4.5)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from meshtune.calibrate.file_keys import WILDCARD
from meshtune.calibrate.log_units import parse_size
from meshtune.calibrate.records import LogFormat
from meshtune.catalog import load_profile
from meshtune.cli._app import app, fail, handle_errors, warn, wrote
from meshtune.hardware.calibration import MeasuredOp
from meshtune.io import check_writable, write_atomic, writes_stdout
from meshtune.report.console import make_console

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


@app.command()
@handle_errors
def calibrate(
    logs: list[Path] | None = typer.Argument(
        None, help="Benchmark logs: files, or folders searched recursively.", show_default=False
    ),
    fmt: LogFormat | None = typer.Option(
        None, "--format", help="Read every log in this format instead of detecting it."
    ),
    axis_map: list[str] = typer.Option(
        [],
        "--axis-map",
        help="Mesh axis of logs that ran on one ring: FILE=AXIS, OP=AXIS or AXIS for all; AXIS "
        "is 0 (ring of a mesh column, P_r), 1 (ring of a mesh row, P_c) or both (the default "
        "for a log that does not say). Repeatable.",
    ),
    ranks: list[str] = typer.Option(
        [],
        "--ranks",
        help="Ring size of logs that do not state it (OSU without a launch line, tables without a "
        "ranks column): FILE=P or P for all. Repeatable.",
    ),
    op: list[str] = typer.Option(
        [],
        "--op",
        help=f"Collective of logs that do not name it: FILE=OP ({_OPS}). Repeatable.",
    ),
    base: str | None = typer.Option(
        None,
        "--base",
        help="Profile (name or TOML path) giving every value the logs do not: compute, "
        "bytes_per_element, slice_block, ops or axes without logs. Writing a profile needs "
        "this or --peak-flops.",
    ),
    peak_flops: float | None = typer.Option(
        None, "--peak-flops", help="Peak FLOP/s per chip, e.g. 312e12 (datasheet)."
    ),
    effective_flops: float | None = typer.Option(
        None,
        "--effective-flops",
        help="Sustained GeMM FLOP/s per chip (else GeMM logs, --base, or assumed = peak).",
    ),
    bytes_per_element: int | None = typer.Option(
        None, "--bytes-per-element", help="Operand width in bytes (else GeMM dtype, --base or 2)."
    ),
    slice_block: int | None = typer.Option(
        None, "--slice-block", help="Algorithm 2's block size B in elements (else --base or 8)."
    ),
    min_bytes: str | None = typer.Option(
        None,
        "--min-bytes",
        help="Fit only shards at least this large (e.g. 512KiB) instead of choosing the "
        "bandwidth-dominated regime automatically.",
    ),
    description: str | None = typer.Option(None, "--description", help="Profile description."),
    source: list[str] = typer.Option(
        [], "--source", help="Provenance to record, e.g. where the logs come from. Repeatable."
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Write the profile TOML here (atomic); its name is the stem. '-' is stdout.",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --output / --plot."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the fits, residuals and profile as JSON on stdout."
    ),
    strict: bool = typer.Option(False, "--strict", help="Fail on the first unparseable line."),
    pool: bool = typer.Option(
        False,
        "--pool",
        help="Fit logs of different systems (their Rank lines name different accelerators) "
        "together instead of refusing them.",
    ),
    template: bool = typer.Option(
        False, "--template", help="Print the canonical CSV/JSONL and GeMM formats, then exit."
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Save a residual plot PNG here (needs the 'plot' extra: matplotlib)."
    ),
) -> None:
    """Fit a hardware profile (t_launch, t_sync, bw per op and axis) from benchmark logs."""
    # Imported here: NumPy and the parsers are not needed by the other commands' start-up.
    from meshtune.calibrate import TEMPLATE, fit_profile, parse_logs, profile_toml
    from meshtune.report.calibration import render_calibration, write_residual_plot

    if template:
        if logs:
            raise fail("--template prints the format and takes no logs")
        typer.echo(TEMPLATE, nl=False)
        return
    if not logs:
        raise fail("no benchmark logs given; pass files or folders (see --template)")
    # Every option is checked before any log is read or fitted.
    peak_flops = _positive("--peak-flops", peak_flops, "312e12")
    effective_flops = _positive("--effective-flops", effective_flops, "250e12")
    if peak_flops is not None and effective_flops is not None and effective_flops > peak_flops:
        raise fail(
            f"--effective-flops {effective_flops:g} exceeds --peak-flops {peak_flops:g}; the "
            "sustained rate cannot beat the peak"
        )
    bytes_per_element = _at_least_one("--bytes-per-element", bytes_per_element)
    slice_block = _at_least_one("--slice-block", slice_block)
    cutoff = None
    if min_bytes is not None:
        cutoff = parse_size(min_bytes)
        if cutoff is None or not 0 < cutoff < math.inf:
            raise fail(f"--min-bytes '{min_bytes}': expected a size such as 524288, 512K or 1MiB")
    ranks_map = _keyed("--ranks", ranks, _ranks)
    ops_map = _keyed("--op", op, _op)
    axes_map = _keyed("--axis-map", axis_map, _axes)
    base_profile = load_profile(base) if base is not None else None
    if output is not None and peak_flops is None and base_profile is None:
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
    # Written before the warnings: a destination that fails (/dev/full) is then the only line.
    if output is not None and text is not None:
        write_atomic(output, text, force=force)
    if plot is not None:
        write_residual_plot(result, plot, force=force)
    for warning in result.warnings:
        warn(warning)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    if to_stdout:
        return
    console = make_console()
    console.print(render_calibration(result))
    for path in (output, plot):
        wrote(path)
    if output is None and not result.missing:
        console.print("pass -o PATH to write the profile")
