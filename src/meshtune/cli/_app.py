"""The typer application object and the error boundary shared by every command.

Every bad input ends in one line on stderr, ``meshtune: error: ...``, and exit code 2: library
errors (:class:`~meshtune.errors.MeshtuneError`) through :func:`handle_errors`, and command-line
parsing errors (missing option, non-integer value, unknown option) through :class:`_OneLineGroup`,
which replaces typer's multi-line error panel.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import typer

# typer >= 0.29 vendors click; its exception classes are reachable only here (pinned range).
from typer._click.exceptions import ClickException, NoArgsIsHelpError
from typer.core import TyperGroup

from meshtune.errors import MeshtuneError

EXIT_BAD_INPUT = 2

P = ParamSpec("P")
R = TypeVar("R")


class _OneLineGroup(TyperGroup):
    """A typer group whose parsing errors are one stderr line with exit code 2."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except NoArgsIsHelpError as exc:
            sys.stdout.write(exc.format_message() + "\n")
            sys.exit(0)
        except ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            sys.stderr.write(f"meshtune: error: {exc.format_message()}{where}\n")
            sys.exit(exc.exit_code)
        except typer.Abort:
            sys.stderr.write("meshtune: aborted\n")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="meshtune",
    cls=_OneLineGroup,
    help="Autotune 2D tensor parallelism (MeshSlice) for LLM training on a 2D accelerator mesh.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str) -> typer.Exit:
    """Print ``meshtune: error: <message>`` on stderr; return the exit to raise (code 2)."""
    sys.stderr.write(f"meshtune: error: {message}\n")
    return typer.Exit(EXIT_BAD_INPUT)


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn library errors raised by a command into one stderr line and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except MeshtuneError as exc:
            raise fail(str(exc)) from None

    return wrapper
