"""``meshtune verify``: execute a plan on a NumPy virtual mesh at reduced sizes.

NumPy and the executor are imported inside the command, so that importing the CLI (and so
``meshtune plan``'s start-up) stays light.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from meshtune.cli._app import app, handle_errors
from meshtune.errors import PlanFileError

EXIT_VERIFY_FAILED = 1


@app.command()
@handle_errors
def verify(
    plan_file: Path = typer.Argument(..., help="A plan file written by `meshtune plan -o`."),
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
    from rich.console import Console

    from meshtune.plan import read_plan
    from meshtune.report.verify import render_verify
    from meshtune.verify import verify_plan

    try:
        text = plan_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PlanFileError(f"{plan_file}: cannot read: {reason}") from None
    report = verify_plan(read_plan(text, str(plan_file)), seed=seed, max_chips=max_chips)
    if as_json:
        typer.echo(report.to_json(), nl=False)
    else:
        Console().print(render_verify(report))
    if not report.ok:
        failures = report.failures()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        sys.stderr.write(f"meshtune: verify failed: {failures[0]}{more}\n")
        raise typer.Exit(EXIT_VERIFY_FAILED)
