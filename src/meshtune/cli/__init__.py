"""The ``meshtune`` command: a thin typer skin over the library.

Each command parses its options, calls the library, renders with :mod:`meshtune.report` and maps
:class:`~meshtune.errors.MeshtuneError` to one line on stderr and exit code 2. Importing the
command modules registers their commands on ``app``.
"""

from __future__ import annotations

from meshtune.cli import (
    calibrate,
    check,
    compare,
    export,
    gemm,
    models_import,
    plan,
    run,
    timeline,
    validate,
    verify,
)
from meshtune.cli._app import app

__all__ = [
    "app",
    "calibrate",
    "check",
    "compare",
    "export",
    "gemm",
    "main",
    "models_import",
    "plan",
    "run",
    "timeline",
    "validate",
    "verify",
]


def main() -> None:
    """Console-script entry point."""
    app()
