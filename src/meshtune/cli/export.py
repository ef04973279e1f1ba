"""``meshtune export``: a plan as a framework's configuration (Megatron-LM, MaxText,
torchtitan, DeepSpeed) or a standalone JAX ``shard_map`` module (:mod:`meshtune.export`)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from meshtune.cli._app import app, handle_errors, wrote
from meshtune.io import check_writable, read_text, write_atomic


class ExportTarget(str, Enum):
    """``--to`` choices: the names of :data:`meshtune.export.TARGETS` (a test keeps them equal)."""

    megatron = "megatron"
    maxtext = "maxtext"
    torchtitan = "torchtitan"
    deepspeed = "deepspeed"
    jax = "jax"


@app.command()
@handle_errors
def export(
    plan_file: Path = typer.Argument(..., help="A plan file written by `meshtune plan -o`."),
    to: ExportTarget = typer.Option(
        ExportTarget.jax,
        "--to",
        help="megatron: command-line arguments; maxtext: YAML overrides; torchtitan: TOML; "
        "deepspeed: JSON; jax: a standalone shard_map module.",
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write it here (atomic); else print it on stdout."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --output file."),
) -> None:
    """Write the plan for a training framework, commented with meshtune's prediction and with
    what the framework cannot express (and meshtune's prediction for the nearest it can)."""
    from meshtune.export import export_plan
    from meshtune.verify.run import load_plan

    if output is not None:
        check_writable(output, force=force)
    plan = load_plan(read_text(plan_file), str(plan_file), rederive=True)
    text = export_plan(plan, to.value, str(plan_file))
    if output is None:
        typer.echo(text, nl=False)
        return
    write_atomic(output, text, force=force)
    wrote(output)
