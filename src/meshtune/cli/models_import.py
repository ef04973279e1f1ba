"""``meshtune models import``: a Hugging Face ``config.json`` in, a model TOML out."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from meshtune.cli._app import handle_errors
from meshtune.cli.plan import models_app
from meshtune.io import check_writable, write_atomic


@models_app.command("import")
@handle_errors
def import_model(
    config: Path = typer.Argument(
        ..., help="A Hugging Face config.json, or a folder holding one.", show_default=False
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Write the model TOML here (atomic); the model's name is the file stem. "
        "Without it the TOML goes to stdout.",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --output file."),
) -> None:
    """Read a Hugging Face config.json into a model spec and write its TOML (no transformers)."""
    from meshtune.hf import read_hf_config, spec_toml

    if output is not None:
        check_writable(output, force=force)
    imported = read_hf_config(config, name=output.stem if output is not None else None)
    text = spec_toml(imported.spec, imported.provenance)
    table = Table(title=f"{escape(imported.spec.display_name)} ({imported.family} naming)")
    table.add_column("field", no_wrap=True)
    table.add_column("value")
    table.add_column("from")
    values = imported.spec.model_dump()
    for key, how in imported.provenance.items():
        table.add_row(key, escape(str(values[key])), escape(how))
    if output is None:
        typer.echo(text, nl=False)
        Console(file=sys.stderr).print(table)
        return
    write_atomic(output, text, force=force)
    console = Console()
    console.print(table)
    console.print(f"wrote {escape(str(output))}")
