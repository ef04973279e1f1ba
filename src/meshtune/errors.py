"""Exception hierarchy.

The library raises only :class:`MeshtuneError` subclasses for bad input; each message names the
offending file, field or value and, where it helps, the allowed ones. The CLI prints the message
as one line on stderr and exits with code 2. Messages quote user input (file names, fields of a
file), so ``str()`` of an error passes it through :func:`printable`: one line that any UTF-8
stream can write, whatever the input held.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped as Python spells it (``\\n``,
    ``\\x00``, ``\\x1b``, ``\\ud800``).

    The result is one line, holds no terminal escape sequence and encodes as UTF-8 (a lone
    surrogate, from JSON ``"\\ud800"`` or an undecodable file name, is escaped too).
    """
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


class MeshtuneError(Exception):
    """Base class of every error meshtune raises on purpose; its text is :func:`printable`."""

    def __str__(self) -> str:
        return printable(super().__str__())


class SpecError(MeshtuneError):
    """A model spec is unknown, unreadable or invalid."""


class ProfileError(MeshtuneError):
    """A hardware profile is unknown, unreadable or invalid."""


class InfeasibleError(MeshtuneError):
    """No mesh shape and slice count satisfies the constraints of the request."""


class PlanFileError(MeshtuneError):
    """A plan file cannot be read, or an output path cannot be written."""


class VerifyError(MeshtuneError):
    """A plan failed numerical verification."""


class LogFormatError(MeshtuneError):
    """A benchmark log cannot be parsed or calibrated from."""


class SetupFileError(MeshtuneError):
    """A framework configuration (``plan --from``) cannot be read or pinned."""


class EngineError(MeshtuneError):
    """A plan cannot run on an execution engine (engine missing, devices, algorithm)."""
