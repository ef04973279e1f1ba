"""Line-level reading shared by the log parsers: launcher prefixes, skipped lines, numbers.

A parser reads a log line by line; a line it cannot use is skipped and reported
(:class:`LineReport`), except a value that must never be skipped (NaN, a negative time), which
is an error naming the line.
"""

from __future__ import annotations

import csv
import math
import re
import sys
from collections.abc import Callable, Iterator, Sequence

from meshtune.calibrate.formats.records import (
    FileLog,
    GemmMeasurement,
    LineIssue,
    LogFormat,
    Measurement,
)
from meshtune.errors import LogFormatError
from meshtune.io import MAX_INPUT_BYTES

# A CSV field may be as long as a whole log (the csv module's default limit is 128 KiB): a
# long field is then a value the parser reports, never a csv.Error.
csv.field_size_limit(MAX_INPUT_BYTES)


class LineReport:
    """Collects skipped lines of one file; under ``strict`` the first one is an error."""

    def __init__(self, source: str, *, strict: bool) -> None:
        self.source = source
        self.strict = strict
        self.issues: list[LineIssue] = []

    def skip(self, line: int, reason: str) -> None:
        """Record ``line`` as unparseable, or raise :class:`LogFormatError` under ``strict``."""
        if self.strict:
            raise LogFormatError(f"{self.source}:{line}: {reason} (--strict)")
        self.issues.append(LineIssue(self.source, line, reason))

    def error(self, line: int, reason: str) -> LogFormatError:
        """The error to raise for a value that must never be skipped (NaN, negative time)."""
        return LogFormatError(f"{self.source}:{line}: {reason}")

    def file_log(
        self,
        fmt: LogFormat,
        *,
        empty: str,
        measurements: Sequence[Measurement] = (),
        gemms: Sequence[GemmMeasurement] = (),
        notes: Sequence[str] = (),
    ) -> FileLog:
        """What the file gave, with the lines skipped so far.

        Raises ``LogFormatError("<file>: <empty>")`` when it gave no measurement at all.
        """
        if not measurements and not gemms:
            raise LogFormatError(f"{self.source}: {empty}")
        return FileLog(
            path=self.source,
            format=fmt,
            measurements=tuple(measurements),
            gemms=tuple(gemms),
            skipped=tuple(self.issues),
            notes=tuple(notes),
        )


# Launcher prefixes: OpenMPI --tag-output "[1,0]<stdout>:", srun -l "0: ", markdown quotes "> ".
_PREFIXES = (
    re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?"),
    re.compile(r"^\s*\d+:\s"),
    re.compile(r"^\s*>\s?"),
)


# OpenMPI's --tag-output tag, which an interleaved write can also put in the middle of a line.
_TAG_ANYWHERE = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")


def clean_line(raw: str) -> str:
    """``raw`` with launcher prefixes and surrounding blanks removed (an OpenMPI
    ``--tag-output`` tag also where it was re-inserted in the middle of the line)."""
    line = raw
    for prefix in _PREFIXES:
        line = prefix.sub("", line, count=1)
    if "<std" in line:
        line = _TAG_ANYWHERE.sub("", line)
    return line.strip()


def clean_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every line of ``text``, cleaned by :func:`clean_line`."""
    for number, raw in enumerate(text.splitlines(), start=1):
        yield number, clean_line(raw)


def feed_lines(text: str, report: LineReport, feed: Callable[[int, str], None]) -> None:
    """Call ``feed(number, line)`` for every :func:`clean_lines` line of ``text``.

    The line parsers convert the digits their patterns match with ``int()``, which refuses a
    number of more than ``sys.get_int_max_str_digits()`` digits (``ValueError``): such a line
    is an error naming it.
    """
    for number, line in clean_lines(text):
        feed_checked(report, feed, number, line)


def feed_checked(
    report: LineReport, feed: Callable[[int, str], None], number: int, line: str
) -> None:
    """``feed(number, line)``, a ``ValueError`` of a too-long number being an error naming the
    line (see :func:`feed_lines`)."""
    try:
        feed(number, line)
    except ValueError:
        raise report.error(
            number, f"a number of more than {sys.get_int_max_str_digits()} digits"
        ) from None


def wrong_rows_note(path: str, column: str, lines: Sequence[int]) -> str:
    """The note for rows dropped because their ``column`` count of wrong values is not 0."""
    shown = ", ".join(str(n) for n in lines[:5])
    more = ", ..." if len(lines) > 5 else ""
    return (
        f"{path}: {len(lines)} row(s) with {column} != 0 (the run corrupted data) dropped, "
        f"not fitted: line(s) {shown}{more}"
    )


def csv_fields(line: str, where: str) -> list[str]:
    """The fields of one CSV ``line``; a line the csv module refuses is an error at ``where``."""
    try:
        return next(csv.reader([line]))
    except csv.Error as exc:
        raise LogFormatError(f"{where}: not a CSV line ({exc})") from None


def require_positive(value: float, what: str, report: LineReport, line: int) -> float:
    """``value`` if it is finite and positive; NaN, infinite, zero or negative is an error."""
    if math.isnan(value):
        raise report.error(line, f"{what} is NaN")
    if math.isinf(value):
        raise report.error(line, f"{what} is infinite")
    if value < 0:
        raise report.error(line, f"{what} is negative ({value:g})")
    if value == 0:
        raise report.error(line, f"{what} is zero")
    return value


MIN_SECONDS = 1e-9
MAX_SECONDS = 1e5
"""Times outside [1 ns, ~28 h] are no timing of one operation: such a point is dropped."""


def plausible_time(seconds: float, what: str, report: LineReport, line: int) -> float | None:
    """A positive finite time (else an error), or ``None`` (skipped and reported) when it lies
    outside [:data:`MIN_SECONDS`, :data:`MAX_SECONDS`], which no real operation takes and which
    would make the relative-residual fit degenerate."""
    value = require_positive(seconds, what, report, line)
    if not MIN_SECONDS <= value <= MAX_SECONDS:
        report.skip(line, f"{what} {value:g} s is not a plausible time (1 ns to 1e5 s); dropped")
        return None
    return value


def to_float(token: str) -> float | None:
    """``float(token)`` or ``None`` when the token is not a number."""
    try:
        return float(token)
    except ValueError:
        return None


def to_int(token: str) -> int | None:
    """``int(token)`` or ``None`` when the token is not an integer (or absurdly long)."""
    if len(token) > 30:
        return None
    try:
        return int(token)
    except ValueError:
        return None
