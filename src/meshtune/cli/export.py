"""``meshtune export``: a plan as a standalone program for an engine (JAX ``shard_map``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from meshtune.cli._app import app, handle_errors, wrote
from meshtune.io import check_writable, read_text, write_atomic


class ExportTarget(str, Enum):
    """``--to`` choices."""

    jax = "jax"


@app.command()
@handle_errors
def export(
    plan_file: Path = typer.Argument(..., help="A plan file written by `meshtune plan -o`."),
    to: ExportTarget = typer.Option(ExportTarget.jax, "--to", help="Target engine."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the module here (atomic); else print it on stdout."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --output file."),
) -> None:
    """Write the plan as a standalone JAX module: mesh, PartitionSpecs, one function per pass."""
    from meshtune.engines.export import export_jax
    from meshtune.verify import load_plan

    if output is not None:
        check_writable(output, force=force)
    text = export_jax(load_plan(read_text(plan_file), str(plan_file)), str(plan_file))
    if output is None:
        typer.echo(text, nl=False)
        return
    write_atomic(output, text, force=force)
    wrote(output)
