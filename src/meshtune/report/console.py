"""The one place a command makes its rich :class:`~rich.console.Console`.

Reports use math notation (×, µ, →, ≠, ·) and rich draws tables with box characters. When the
output stream cannot encode them (``PYTHONIOENCODING=ascii``, a C locale, an old Windows code
page) :func:`make_console` returns an :class:`AsciiConsole`: it spells strings in ASCII (``x``,
``u``, ``->``) before rich lays them out, so table columns stay aligned, and writes through
:class:`AsciiWriter`, which spells what is left (styled ``Text``) and turns anything else into
``?``; rich then also draws its boxes in ASCII, because the writer reports an ASCII encoding.

When the stream's reader has gone (``meshtune plan | head -1``) the console raises
:class:`BrokenPipeError` for the CLI's entry point to end the command quietly, where rich itself
would exit with code 1.
"""

from __future__ import annotations

import re
import sys
from typing import IO, Any

from rich.box import Box
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from meshtune.errors import printable


def shown(value: object) -> str:
    """``str(value)`` as text inside a rich markup string: control and escape characters
    escaped by :func:`~meshtune.errors.printable` (``\\x1b``), markup (``[bold]``, ``[/x]``)
    escaped so rich prints it as written.

    Every string that comes from a file or the command line (names, descriptions, ids, paths,
    notes) goes through it, or through ``printable`` alone where rich reads no markup (a
    :class:`~rich.text.Text`, a plain line); printable text without ``[`` is returned unchanged.
    """
    return escape(printable(str(value)))


def printable_lines(text: str) -> str:
    """``text`` with its line breaks kept and every other control character escaped by
    :func:`~meshtune.errors.printable`, line by line (a report of several lines)."""
    return "\n".join(map(printable, text.split("\n")))


_JSON_CONTROL = re.compile("[\x7f-\x9f]")


def json_text(text: str) -> str:
    """JSON ``text`` (``ensure_ascii=False``) with DEL and the C1 controls, which JSON leaves
    raw, written as ``\\u`` escapes: the same document, and no control byte for a terminal.

    Outside strings a JSON document is ASCII, so every match is inside a string."""
    return _JSON_CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


# Every non-ASCII character the reports and messages use, spelled in ASCII.
ASCII_SPELLING = str.maketrans(
    {
        "×": "x",
        "µ": "u",
        "→": "->",
        "←": "<-",
        "≠": "!=",
        "─": "-",
        "≤": "<=",
        "≥": ">=",
        "−": "-",
        "–": "-",
        "—": "-",
        "·": "*",
        "…": "~",  # one character: rich inserts it after layout, so columns stay aligned
        "§": "Sec. ",
        "Σ": "sum ",
        "∈": " in ",
        "•": "*",
        "√": "sqrt",
        "ᵀ": "^T",
        "²": "^2",
        "±": "+/-",
        "≈": "~",
        "‖": "||",
    }
)

_PROBE = "×µ→≠─│"


def can_encode(stream: IO[str], text: str = _PROBE) -> bool:
    """Whether ``stream``'s encoding can write ``text`` (the report's special characters)."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


HEAD_RULE = Box("    \n    \n ── \n    \n    \n    \n    \n    \n", ascii=True)
"""rich's ``SIMPLE_HEAD`` (one rule under the header, no other lines), marked ASCII-safe: on an
ASCII stream rich keeps it instead of substituting its ``ASCII`` box, whose vertical rules
widen a table laid out for 80 columns past them (its last column then cut); the rule's one
character is spelled ``-`` by :class:`AsciiWriter`."""


class AsciiWriter:
    """A text stream that writes through to ``stream`` in ASCII (see the module docstring)."""

    encoding = "ascii"

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` spelled in ASCII; return the length of ``text``."""
        plain = text.translate(ASCII_SPELLING).encode("ascii", "replace").decode("ascii")
        self._stream.write(plain)
        return len(text)

    def flush(self) -> None:
        """Flush the underlying stream."""
        self._stream.flush()

    def isatty(self) -> bool:
        """Whether the underlying stream is a terminal."""
        return self._stream.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class MeshtuneConsole(Console):
    """A rich console that leaves a closed pipe to the caller (see the module docstring)."""

    def on_broken_pipe(self) -> None:
        """Stop writing and raise :class:`BrokenPipeError` (rich would exit with code 1)."""
        self.quiet = True
        raise BrokenPipeError


class AsciiConsole(MeshtuneConsole):
    """A console whose strings (table cells, headers, titles) are spelled in ASCII before layout."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Spell ``text`` in ASCII, then let rich parse and style it as usual."""
        return super().render_str(text.translate(ASCII_SPELLING), **kwargs)


def make_console(*, stderr: bool = False, highlight: bool = True) -> Console:
    """A console on stdout (or stderr) that falls back to ASCII when the stream needs it.

    Emoji codes are off: a report never means one, so a ``:name:`` in a user's display name
    prints as written (and rich need not load its emoji table at start-up)."""
    stream = sys.stderr if stderr else sys.stdout
    if can_encode(stream):
        return MeshtuneConsole(stderr=stderr, highlight=highlight, emoji=False)
    return AsciiConsole(file=AsciiWriter(stream), highlight=highlight, emoji=False)  # type: ignore[arg-type]
