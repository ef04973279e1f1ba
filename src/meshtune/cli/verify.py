"""``meshtune verify``: execute a plan on a NumPy virtual mesh at reduced sizes.

NumPy and the executor are imported inside the command, so that importing the CLI (and so
``meshtune plan``'s start-up) stays light.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from meshtune.cli._app import app, handle_errors, one_line
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
) -> None:
    """Check a plan agrees with itself, then run its GeMMs on a virtual mesh: numbers, traffic.

    Exit 0 when every check passes, 1 when one fails, 2 on bad input.
    """
    from meshtune.plan import read_plan
    from meshtune.report.console import make_console
    from meshtune.report.verify import render_verify
    from meshtune.verify import verify_plan

    source = "<stdin>" if is_std_stream(plan_file) else str(plan_file)
    report = verify_plan(read_plan(read_text(plan_file), source), seed=seed, max_chips=max_chips)
    if as_json:
        typer.echo(report.to_json(), nl=False)
    else:
        make_console().print(render_verify(report))
    if not report.ok:
        failures = report.failures()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        sys.stderr.write(f"meshtune: verify failed: {one_line(failures[0])}{more}\n")
        raise typer.Exit(EXIT_VERIFY_FAILED)
