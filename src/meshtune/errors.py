"""Exception hierarchy.

The library raises only :class:`MeshtuneError` subclasses for bad input; each message names the
offending file, field or value and, where it helps, the allowed ones. The CLI prints the message
as one line on stderr and exits with code 2.
"""

from __future__ import annotations


class MeshtuneError(Exception):
    """Base class of every error meshtune raises on purpose."""


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


class EngineError(MeshtuneError):
    """A plan cannot run on an execution engine (engine missing, devices, algorithm)."""
