"""``meshtune verify``: execute a plan on a NumPy virtual mesh at reduced sizes.

NumPy and the executor are imported inside the command, so that importing the CLI (and so
``meshtune plan``'s start-up) stays light.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from meshtune.cli._app import app, handle_errors, one_line, warn
from meshtune.io import is_std_stream, read_text

EXIT_VERIFY_FAILED = 1


@app.command()
@handle_errors
def verify(
    plan_file: Path = typer.Argument(
        ..., help="A plan file written by `meshtune plan -o`; '-' reads it from stdin."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random operands."),
    max_chips: int = typer.Option(
        4096,
        "--max-chips",
        min=1,
        help="Refuse meshes with more chips (work grows as chips × ring × iterations).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="Fail (exit 1) when the recorded times cannot be re-derived (the plan's profile is "
        "not in the catalog and no --profile is given): 'unverified' is not 'passed'.",
    ),
    profile: Path | None = typer.Option(
        None,
        "--profile",
        help="The plan's profile as a TOML file (a plan names catalog profiles only).",
    ),
) -> None:
    """Check a plan agrees with itself, then run its GeMMs on a virtual mesh: numbers, traffic.

    Exit 0 when every check passes (or the plan is unverified, without --strict), 1 when one
    fails, 2 on bad input.
    """
    from meshtune.catalog import load_profile
    from meshtune.report.console import json_text, make_console
    from meshtune.report.verify import render_verify
    from meshtune.verify.run import load_plan, verify_plan

    source = "<stdin>" if is_std_stream(plan_file) else str(plan_file)
    hardware = load_profile(profile) if profile is not None else None
    plan = load_plan(read_text(plan_file), source, check=False)
    report = verify_plan(plan, seed=seed, max_chips=max_chips, profile=hardware, strict=strict)
    if as_json:
        typer.echo(json_text(report.to_json()), nl=False)
    else:
        make_console().print(render_verify(report))
    if not report.ok:
        failures = report.failures()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        sys.stderr.write(f"meshtune: verify failed: {one_line(failures[0])}{more}\n")
        raise typer.Exit(EXIT_VERIFY_FAILED)
    if not report.rederived:
        warn(f"unverified: {report.notes[0]}")
