"""The typer application object and the error boundary shared by every command.

Every bad input ends in one line on stderr, ``meshtune: error: ...``, and exit code 2: library
errors (:class:`~meshtune.errors.MeshtuneError`) through :func:`handle_errors`, and command-line
parsing errors (missing option, non-integer value, unknown option) through :class:`_OneLineGroup`,
which replaces typer's multi-line error panel.

The standard streams, handled once in :meth:`_OneLineGroup.main`:

* standard output closed at start (``>&-``): one error line, exit 2 (the data would be lost,
  and a file opened later would take its descriptor);
* standard error closed (``2>&-``): messages are dropped, exit codes stay;
* standard output's reader gone (``meshtune plan ... --json | head -c1``): the command ends
  quietly with exit code 0, the reader having chosen to stop (as ``head`` does; exit codes are
  only 0, 1 and 2, so not the shell's 141);
* text no stream can encode (a lone surrogate ``"\\ud800"`` from a JSON file, an undecodable
  file name) is written escaped (``\\ud800``) instead of raising.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, ParamSpec, TypeVar

import typer

# typer >= 0.29 vendors click; its exception classes are reachable only here (pinned range).
from typer._click.exceptions import BadParameter, ClickException, NoArgsIsHelpError
from typer.core import TyperArgument, TyperGroup, TyperOption

from meshtune._version import __version__
from meshtune.errors import MeshtuneError, printable
from meshtune.io import writes_stdout
from meshtune.report.console import ASCII_SPELLING, can_encode

EXIT_BAD_INPUT = 2

P = ParamSpec("P")
R = TypeVar("R")


# typer labels values by Python type ("<str>", "<list[Path]>"); help shows these words instead.
_TYPE_WORDS = {
    "str": "text",
    "int": "integer",
    "int range": "integer",
    "float": "number",
    "float range": "number",
    "Path": "path",
    "bool": "flag",
}


def _plain_type_label(param: TyperArgument | TyperOption) -> None:
    """Relabel ``param``'s value type in help without Python type names (``<list[Path]>``)."""
    python_label = param.display_type

    def display_type(ctx: Any) -> str:
        label = python_label(ctx)[1:-1]
        if label.startswith("list[") and label.endswith("]"):
            label = label[len("list[") : -1]  # repeatable: the help text says so
        return f"<{_TYPE_WORDS.get(label, label)}>"

    param.display_type = display_type  # type: ignore[method-assign]


def _safe_streams() -> None:
    """Make stdout and stderr write what they cannot encode instead of crashing.

    On a stream that cannot encode the reports' symbols (``PYTHONIOENCODING=ascii``) those are
    replaced (rich reports go through :func:`meshtune.report.console.make_console`, which
    spells them in ASCII); on any other, a lone surrogate is written escaped (``\\ud800``).
    """
    if sys.stderr is None:  # 2>&-: nothing can be shown, but the exit code still tells
        sys.stderr = Path(os.devnull).open("w", encoding="utf-8")  # noqa: SIM115
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace" if can_encode(stream) else "replace")


def _end_on_broken_pipe() -> NoReturn:
    """Standard output's reader has gone: exit 0 without a word (see the module docstring).

    Standard output is pointed at ``/dev/null`` so that Python's final flush cannot fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file descriptor (test runners)
        pass
    sys.exit(0)


def one_line(message: str) -> str:
    """``message`` with line breaks and other control characters escaped (``\\n``, ``\\x0b``).

    Messages quote user input (file names, option values, fields of a file); whatever it
    holds, the message stays one line. On a stderr that cannot encode the message's symbols
    (``PYTHONIOENCODING=ascii``) they are spelled in ASCII.
    """
    if not can_encode(sys.stderr, message):
        message = message.translate(ASCII_SPELLING)
    return printable(message)


def _given_value(args: Sequence[str], opts: Sequence[str]) -> str | None:
    """The last value given on the command line to an option named by ``opts``, if any."""
    value = None
    for i, token in enumerate(args):
        for opt in opts:
            if token == opt and i + 1 < len(args):
                value = args[i + 1]
            elif opt.startswith("--") and token.startswith(opt + "="):
                value = token[len(opt) + 1 :]
    return value


def _plain_parse_error(exc: ClickException, args: Sequence[str]) -> str:
    """The parsing error in plain words: what the value should be, and the value given."""
    message = exc.format_message().replace("Value error, ", "")
    found = re.search(r"Input should be a valid (integer|number)[^(]*$", message)
    if found is None or not isinstance(exc, BadParameter) or exc.param is None:
        return message
    given = _given_value(args, getattr(exc.param, "opts", []))
    got = f", got {given!r}" if given is not None else ""
    return (
        message[: found.start()]
        + f"should be {'an' if found[1] == 'integer' else 'a'} {found[1]}{got}"
    )


class _OneLineGroup(TyperGroup):
    """A typer group whose parsing errors are one stderr line with exit code 2.

    It also relabels every command's value types for help (see :func:`_plain_type_label`) and
    lists the commands without cutting their descriptions.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            for param in command.params:
                if isinstance(param, (TyperArgument, TyperOption)):
                    _plain_type_label(param)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """List each command with its first sentence whole, wrapped (click cuts it with "...")."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: Any) -> Any:
        """Run the command; a reader that has gone ends it here (typer would exit 1)."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _end_on_broken_pipe()

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        _safe_streams()
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        if sys.stdout is None:
            sys.stderr.write(
                "meshtune: error: standard output is closed; redirect it to a file or /dev/null\n"
            )
            sys.exit(EXIT_BAD_INPUT)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(argv, prog_name, complete_var, False, **extra)
            sys.stdout.flush()  # here, not at exit: a reader that has gone shows now
        except BrokenPipeError:
            _end_on_broken_pipe()
        except NoArgsIsHelpError as exc:
            sys.stdout.write(exc.format_message() + "\n")
            sys.exit(0)
        except ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            message = one_line(_plain_parse_error(exc, argv))
            sys.stderr.write(f"meshtune: error: {message}{one_line(where)}\n")
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
    # Plain help: rich markup would eat "[default: ...]" in help texts, and plain click help
    # shows flags as flags and keeps choices whole at 80 columns.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def sub_app(name: str, help_text: str) -> typer.Typer:
    """A command group of ``meshtune`` (``meshtune NAME SUBCOMMAND``) with the same conventions;
    its callback runs when no subcommand is given."""
    group = typer.Typer(
        cls=_OneLineGroup,
        help=help_text,
        invoke_without_command=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.add_typer(group, name=name)
    return group


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"meshtune {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Autotune 2D tensor parallelism (MeshSlice) for LLM training on a 2D accelerator mesh."""


def fail(message: str) -> typer.Exit:
    """Print ``meshtune: error: <message>`` on stderr; return the exit to raise (code 2)."""
    sys.stderr.write(f"meshtune: error: {one_line(message)}\n")
    return typer.Exit(EXIT_BAD_INPUT)


def warn(message: str) -> None:
    """Print ``meshtune: warning: <message>`` on stderr (the command goes on)."""
    sys.stderr.write(f"meshtune: warning: {one_line(message)}\n")


def wrote(path: Path | None) -> None:
    """Print the status line ``wrote PATH`` on stdout; nothing when the data went to stdout."""
    if path is not None and not writes_stdout(path):
        typer.echo(f"wrote {printable(str(path))}")


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn library errors raised by a command into one stderr line and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except MeshtuneError as exc:
            raise fail(str(exc)) from None

    return wrapper
