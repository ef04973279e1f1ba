"""The ``meshtune`` command: a thin typer skin over the library.

Each command parses its options, calls the library, renders with :mod:`meshtune.report` and maps
:class:`~meshtune.errors.MeshtuneError` to one line on stderr and exit code 2. Importing a
command module registers its commands on the typer application.

Start-up: :func:`main` imports only the module(s) of the command named on the command line
(:data:`COMMAND_MODULES`), so ``meshtune plan`` never loads calibration, verification, the
executor or the JAX engine; a command line naming no known command (``--help``, a typo) loads
them all so that help lists every command and typer's "no such command" message stays whole.
``meshtune.cli.app`` (the attribute, as tests and embedders use it) is the application with
every command registered.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

# Command (or command group) name -> the cli modules that register it and its subcommands.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "plan": ("plan",),
    "schema": ("plan_inputs",),
    "profiles": ("plan_inputs",),
    "models": ("plan_inputs", "models_import"),
    "calibrate": ("calibrate",),
    "check": ("check",),
    "compare": ("compare",),
    "gemm": ("gemm",),
    "export": ("export",),
    "run": ("run",),
    "timeline": ("timeline",),
    "validate": ("validate",),
    "verify": ("verify",),
}

# Every command module, in the order help lists their commands (alphabetical, but ``plan``
# before ``plan_inputs`` and its ``models import``, whose commands help lists after it).
ALL_MODULES = (
    "calibrate",
    "check",
    "compare",
    "export",
    "gemm",
    "plan",
    "plan_inputs",
    "models_import",
    "run",
    "timeline",
    "validate",
    "verify",
)

__all__ = ["ALL_MODULES", "COMMAND_MODULES", "app", "load_commands", "main"]


def load_commands(args: Sequence[str] | None = None) -> typer.Typer:
    """The application with the commands ``args`` needs registered: those of the first
    argument that is not an option when it names a command, every command otherwise."""
    name = next((a for a in args or () if not a.startswith("-")), None)
    for module in COMMAND_MODULES.get(name or "", ALL_MODULES):
        importlib.import_module(f"meshtune.cli.{module}")
    from meshtune.cli._app import app

    return app


def __getattr__(name: str) -> typer.Typer:
    """``meshtune.cli.app``: the application with every command registered."""
    if name == "app":
        return load_commands()
    raise AttributeError(f"module 'meshtune.cli' has no attribute {name!r}")


def main() -> None:
    """Console-script entry point: register the command named on the command line, run it.

    Start-up: importing the command's modules makes long-lived objects and no
    garbage, so the cyclic garbage collector is paused meanwhile; those objects, like every
    module's imported before, live until the process ends, so they are then frozen out of the
    collector's passes, and its youngest generation is collected every 10,000 net allocations
    instead of 700 (a search allocates many short-lived objects and few cycles). ``meshtune
    plan gpt3 --chips 256`` then spends about 20 ms of CPU in the collector instead of about
    85 ms; what a command computes does not change."""
    import gc
    import sys

    gc.disable()
    app = load_commands(sys.argv[1:])
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    gc.enable()
    app()
