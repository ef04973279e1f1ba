"""What every log parser returns, and the registry entry that names a format.

Every parser turns a log into :class:`Measurement` rows in the units of the MeshSlice cost model
(§3.2.2): the ring size ``P``, the per-rank shard ``sizeof(shard)`` in bytes and the time of one
operation in seconds. Conversions from what a tool prints (a total buffer, microseconds, KB)
happen in the parser of that tool, next to the documentation of its columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp
from meshtune.hardware.links import CollectiveKind


class LogFormat(str, Enum):
    """The log formats ``meshtune calibrate`` reads."""

    NCCL = "nccl"
    OSU = "osu"
    ARTIFACT = "artifact"
    CANONICAL = "canonical"
    TABLE = "table"
    GEMM = "gemm"


class UnusableFileError(LogFormatError):
    """A whole file cannot be used: empty, not text, of no known format, or of a benchmark the
    cost model has no use for (broadcast, bandwidth, non-blocking)."""


@dataclass(frozen=True)
class Measurement:
    """One timed collective, in the cost model's terms.

    ``seconds`` is the time of one ``op`` on a ring of ``ranks`` chips whose per-rank shard is
    ``shard_bytes``; ``axis`` is the mesh axis (0 or 1) when the log says which, else ``None``.
    ``repeats`` weights the point in the fit (how many timings it averages). ``hosts`` is the
    number of distinct hosts the ring spans and ``system`` the accelerator the log names, when
    it says (nccl-tests ``Rank`` device lines); they tell tiers and systems apart. A
    :class:`~meshtune.hardware.links.CollectiveKind` given as ``op`` is read as the same
    :class:`~meshtune.hardware.calibration.MeasuredOp`.
    """

    op: MeasuredOp
    ranks: int
    shard_bytes: float
    seconds: float
    source: str
    line: int
    axis: int | None = None
    repeats: int = 1
    hosts: int | None = None
    system: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.op, MeasuredOp):
            object.__setattr__(self, "op", MeasuredOp(CollectiveKind(self.op).value))


@dataclass(frozen=True)
class GemmMeasurement:
    """One timed GeMM ``(m × k) · (k × n)`` of operand type ``dtype``."""

    m: int
    n: int
    k: int
    dtype: str
    seconds: float
    source: str
    line: int
    repeats: int = 1

    @property
    def flops(self) -> float:
        """2·m·n·k: one multiply and one add per term."""
        return 2.0 * self.m * self.n * self.k


@dataclass(frozen=True)
class LineIssue:
    """A line that was skipped, and why."""

    source: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class FileLog:
    """What one file gave: its format, its measurements, the lines skipped and any notes."""

    path: str
    format: LogFormat
    measurements: tuple[Measurement, ...] = ()
    gemms: tuple[GemmMeasurement, ...] = ()
    skipped: tuple[LineIssue, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ParseOptions:
    """What the user said about a file: ``--strict``, its ring size and its op."""

    strict: bool = False
    ranks: int | None = None
    op: MeasuredOp | None = None


@dataclass(frozen=True)
class Parser:
    """One log format: how to recognise it and how to read it; ``parse_chunks``, when the
    format has it, reads a file too large to hold whole from pieces that end at line ends."""

    format: LogFormat
    label: str
    looks_like: Callable[[str], bool]
    parse: Callable[[str, str, ParseOptions], FileLog]
    parse_chunks: Callable[[str, Iterable[str], ParseOptions], FileLog] | None = None
