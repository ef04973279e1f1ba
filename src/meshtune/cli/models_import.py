"""``meshtune models import``: a Hugging Face ``config.json`` in, a model TOML out."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from meshtune.cli._app import handle_errors, warn, wrote
from meshtune.cli.plan_inputs import models_app
from meshtune.io import check_writable, write_atomic, writes_stdout
from meshtune.report.console import make_console, shown


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
        "Without it, or with '-', the TOML goes to stdout and the table to stderr.",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --output file."),
) -> None:
    """Read a Hugging Face config.json into a model spec and write its TOML (no transformers)."""
    from meshtune.model.hf import read_hf_config, spec_toml

    to_stdout = output is None or writes_stdout(output)
    if output is not None:
        check_writable(output, force=force)
    imported = read_hf_config(config, name=None if to_stdout or output is None else output.stem)
    notes = [*imported.warnings, *(f"ignored {k}: {why}" for k, why in imported.ignored.items())]
    text = spec_toml(imported.spec, imported.provenance, notes)
    table = Table(title=f"{shown(imported.spec.display_name)} ({imported.family} naming)")
    table.add_column("field", no_wrap=True)
    table.add_column("value")
    table.add_column("from")
    values = imported.spec.model_dump()
    for key, how in imported.provenance.items():
        value = values
        for part in key.split("."):
            value = value[part]
        table.add_row(key, shown(str(value)), shown(how))
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_atomic(output, text, force=force)
    make_console(stderr=to_stdout).print(table)
    for note in notes:
        warn(note)
    wrote(output)
