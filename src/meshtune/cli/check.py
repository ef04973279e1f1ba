"""``meshtune check [PLAN...]``: verify and drift-check committed plans
(:mod:`meshtune.verify.check`)."""

from __future__ import annotations

import stat
from pathlib import Path

import typer

from meshtune.cli._app import app, fail, handle_errors
from meshtune.errors import PlanFileError
from meshtune.io import path_mode, read_text

EXIT_STALE = 1


@app.command()
@handle_errors
def check(
    plan_files: list[Path] | None = typer.Argument(
        None, help="Plan files [default: every plans/*.json under the current folder]."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON on stdout."),
    no_verify: bool = typer.Option(
        False, "--no-verify", help="Drift only: skip running the GeMMs on the virtual mesh."
    ),
) -> None:
    """Re-derive every plan from the inputs it records and verify it: one line per plan.

    A stale plan names the inputs that changed first (model, profile, meshtune version), then
    the fields that differ. Exit 0 when every plan is up to date and verified, 1 when one is
    stale or fails, 2 on bad input.
    """
    from meshtune.errors import printable
    from meshtune.report.console import json_text
    from meshtune.verify.check import check_json, check_plan
    from meshtune.verify.run import load_plan

    paths = list(plan_files) if plan_files else sorted(Path("plans").glob("*.json"))
    if not paths:
        raise fail("no plan to check: give plan files, or run where plans/*.json exist")
    held: dict[int, str] = {}  # a FIFO's text: it cannot be read twice
    for index, path in enumerate(paths):  # every file is read and parsed first: bad input is
        text = read_text(path)  # one line, exit 2; a regular file's text is not kept
        load_plan(text, str(path))
        if not stat.S_ISREG(path_mode(path, PlanFileError) or 0):
            held[index] = text
    results = []
    for index, path in enumerate(paths):  # then one at a time: one plan file in memory
        text = held.pop(index) if index in held else read_text(path)
        result = check_plan(load_plan(text, str(path)), text, str(path), verify=not no_verify)
        results.append(result)
        if not as_json:
            typer.echo(printable(result.line()))
            for detail in result.details():
                typer.echo(printable(detail))
    if as_json:
        typer.echo(json_text(check_json(results)), nl=False)
    if not all(r.ok for r in results):
        raise typer.Exit(EXIT_STALE)
