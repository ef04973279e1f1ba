"""``meshtune schema``, ``models`` and ``profiles``: the documents a plan is made from.

Their own module, so that ``meshtune plan`` does not register (and typer does not build) these
commands; ``meshtune models import`` adds its subcommand to :data:`models_app`.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from enum import Enum
from typing import Literal, TypeVar

import typer
from rich.table import Table

from meshtune.catalog import (
    catalog_dir,
    catalog_names,
    catalog_problem,
    file_json_schema,
    load_model,
    load_profile,
)
from meshtune.cli._app import app, handle_errors, sub_app, warn
from meshtune.errors import MeshtuneError, printable
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan import plan_json_schema
from meshtune.report.console import make_console, shown

T = TypeVar("T")


class SchemaName(str, Enum):
    """Documents whose JSON Schema ``meshtune schema`` prints."""

    plan = "plan"
    model = "model"
    profile = "profile"


@app.command()
def schema(
    name: SchemaName = typer.Argument(SchemaName.plan, help="Which document."),
) -> None:
    """Print the JSON Schema of a plan file (or of a model / profile TOML)."""
    if name is SchemaName.plan:
        typer.echo(plan_json_schema(), nl=False)
        return
    doc = ModelSpec if name is SchemaName.model else HardwareProfile
    typer.echo(json.dumps(file_json_schema(doc), indent=2, sort_keys=True))


def _catalog(
    kind: Literal["models", "profiles"], load: Callable[[str], T]
) -> list[tuple[str, T | None]]:
    """Every catalog entry, loaded, or None (with a warning line naming the error) if invalid.

    A missing catalog folder is a warning too: the listing is then empty, and exit code 0.
    """
    problem = catalog_problem(kind)
    if problem is not None:
        warn(problem)
    entries: list[tuple[str, T | None]] = []
    for name in catalog_names(kind):
        try:
            entries.append((name, load(name)))
        except MeshtuneError as exc:
            warn(str(exc))
            entries.append((name, None))
    return entries


def _invalid_row(table: Table, name: str) -> None:
    table.add_row(
        shown(name), "INVALID (see the warning on stderr)", *[""] * (len(table.columns) - 2)
    )


models_app = sub_app(
    "models", "List the shipped model specs, or import one from a Hugging Face config.json."
)


@models_app.callback()
@handle_errors
def models(ctx: typer.Context) -> None:
    """List the shipped model specs (invalid files too, marked, with a warning each); `meshtune
    models import CONFIG` imports a Hugging Face config.json."""
    if ctx.invoked_subcommand is not None:
        return
    entries = _catalog("models", load_model)
    table = Table(title=shown(f"Models in {catalog_dir('models')}"))
    table.add_column("name", no_wrap=True, overflow="fold")
    for header in ("model", "blocks", "hidden", "heads/kv", "ffn", "mlp", "seq"):
        table.add_column(header, overflow="fold")
    for name, m in entries:
        if m is None:
            _invalid_row(table, name)
            continue
        table.add_row(
            shown(name),
            shown(m.display_name),
            str(m.blocks),
            str(m.hidden),
            f"{m.heads}/{m.kv_heads}",
            str(m.ffn_hidden),
            m.mlp,
            str(m.seq_len),
        )
    if entries or not catalog_problem("models"):
        make_console().print(table)


PROFILES_WIDE = 120
"""Below this many columns (CI logs, pipes, 80-column terminals) each profile is a block: its
description on lines of its own instead of a narrow table column folded word by word."""


@app.command()
@handle_errors
def profiles() -> None:
    """List the shipped hardware profiles (invalid files too, marked, with a warning each)."""
    entries = _catalog("profiles", load_profile)
    console = make_console()
    title = shown(f"Profiles in {catalog_dir('profiles')}")
    if console.width < PROFILES_WIDE:
        if entries or not catalog_problem("profiles"):
            console.print(f"[bold]{title}[/bold]")
        for name, p in entries:
            if p is None:
                console.print(f"{shown(name)}: INVALID (see the warning on stderr)")
                continue
            console.print(
                f"[bold]{shown(name)}[/bold]: peak {p.peak_flops_per_s / 1e12:.0f} TFLOP/s, "
                f"effective {p.effective_flops_per_s / 1e12:.0f} TFLOP/s, "
                f"calibrated {'yes' if p.calibration else 'no'}"
            )
            indent = "  "
            console.print(
                "\n".join(
                    map(
                        shown,
                        textwrap.wrap(
                            printable(p.description),
                            console.width,
                            initial_indent=indent,
                            subsequent_indent=indent,
                            break_on_hyphens=False,
                        ),
                    )
                )
            )
        return
    table = Table(title=title)
    table.add_column("name", no_wrap=True, overflow="fold")
    table.add_column("description", overflow="fold")  # wraps; the figures keep their width
    for header in ("peak TFLOP/s", "eff. TFLOP/s", "calibrated"):
        table.add_column(header, no_wrap=True, justify="right")
    for name, p in entries:
        if p is None:
            _invalid_row(table, name)
            continue
        table.add_row(
            shown(name),
            shown(p.description),
            f"{p.peak_flops_per_s / 1e12:.0f}",
            f"{p.effective_flops_per_s / 1e12:.0f}",
            "yes" if p.calibration else "no",
        )
    if entries or not catalog_problem("profiles"):
        console.print(table)
