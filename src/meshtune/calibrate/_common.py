"""Records shared by the log parsers, and the small line-level helpers they all use.

Every parser turns a log into :class:`Measurement` rows in the units of the MeshSlice cost model
(§3.2.2): the ring size ``P``, the per-rank shard ``sizeof(shard)`` in bytes and the time of one
operation in seconds. Conversions from what a tool prints (a total buffer, microseconds, KB)
happen in the parser of that tool, next to the documentation of its columns.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePath
from typing import TypeVar

from meshtune.errors import LogFormatError
from meshtune.specs import CollectiveKind

T = TypeVar("T")


class LogFormat(str, Enum):
    """The log formats ``meshtune calibrate`` reads."""

    NCCL = "nccl"
    OSU = "osu"
    ARTIFACT = "artifact"
    CANONICAL = "canonical"
    GEMM = "gemm"


class UnusableFileError(LogFormatError):
    """A whole file cannot be used: empty, not text, of no known format, or of a benchmark the
    cost model has no use for (all-reduce, alltoall, bandwidth)."""


@dataclass(frozen=True)
class Measurement:
    """One timed collective, in the cost model's terms.

    ``seconds`` is the time of one ``op`` on a ring of ``ranks`` chips whose per-rank shard is
    ``shard_bytes``; ``axis`` is the mesh axis (0 or 1) when the log says which, else ``None``.
    ``repeats`` weights the point in the fit (how many timings it averages).
    """

    op: CollectiveKind
    ranks: int
    shard_bytes: float
    seconds: float
    source: str
    line: int
    axis: int | None = None
    repeats: int = 1


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


def clean_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` with launcher prefixes and surrounding blanks removed."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw
        for prefix in _PREFIXES:
            line = prefix.sub("", line, count=1)
        yield number, line.strip()


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


def to_float(token: str) -> float | None:
    """``float(token)`` or ``None`` when the token is not a number."""
    try:
        return float(token)
    except ValueError:
        return None


def to_int(token: str) -> int | None:
    """``int(token)`` or ``None`` when the token is not an integer."""
    try:
        return int(token)
    except ValueError:
        return None


_OP_NAMES = {
    "allgather": CollectiveKind.ALL_GATHER,
    "reducescatter": CollectiveKind.REDUCE_SCATTER,
    "sendrecv": CollectiveKind.SEND_RECV,
}
_UNUSABLE_IN_NAMES = ("allreduce", "alltoall")

ALL_REDUCE_HINT = (
    "all-reduce timings cannot calibrate the MeshSlice model: it has no all-reduce, and one "
    "all-reduce time mixes reduce-scatter and all-gather parameters; time all_gather_perf and "
    "reduce_scatter_perf instead"
)


def collective_from_name(name: str, where: str) -> CollectiveKind:
    """The op a benchmark name means (``all_gather_perf``, ``Allgather``, ``send_recv``, ...).

    Raises :class:`UnusableFileError` for a collective the cost model has no use for.
    """
    key = re.sub(r"[^a-z]", "", name.lower()).removesuffix("perf")
    if key in _OP_NAMES:
        return _OP_NAMES[key]
    if key == "allreduce":
        raise UnusableFileError(f"{where}: {ALL_REDUCE_HINT}")
    known = ", ".join(kind.value for kind in CollectiveKind)
    raise UnusableFileError(
        f"{where}: benchmark '{name}' is not one the cost model uses (use {known})"
    )


def collective_from_filename(path: str) -> CollectiveKind | None:
    """The op a file name mentions (``nccl_allgather.log``), or ``None`` if it names none or two.

    A name that mentions only an unusable collective (``allreduce``) raises
    :class:`UnusableFileError` via :func:`collective_from_name`.
    """
    key = re.sub(r"[^a-z]", "", PurePath(path).stem.lower())
    found = [op for name, op in _OP_NAMES.items() if name in key]
    if len(found) == 1:
        return found[0]
    if not found:
        for name in _UNUSABLE_IN_NAMES:
            if name in key:
                collective_from_name(name, path)
    return None


def shard_bytes_of(op: CollectiveKind, reported_bytes: float, ranks: int) -> float:
    """Per-rank shard from a size that counts the whole buffer (nccl-tests, OSU reduce-scatter).

    An all-gather's total is the gathered output, P shards; a reduce-scatter's total is each
    rank's input, P output shards; a send/recv message is one shard.
    """
    if op is CollectiveKind.SEND_RECV:
        return float(reported_bytes)
    return reported_bytes / ranks


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?$", re.IGNORECASE)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> float | None:
    """Bytes in ``8KB``, ``1 MiB``, ``512M`` or ``4096`` (binary multiples), else ``None``."""
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    return float(match.group(1)) * _UNIT[match.group(2).upper()]


def format_bytes(value: float) -> str:
    """``value`` bytes as B, KiB, MiB or GiB with up to 4 significant digits."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value:.4g} B"


_UNIT_SUFFIX = re.compile(r"^[-+]?[\d.]+(?:[eE][-+]?\d+)?\s*[A-Za-zµ/]+$")


def read_rows(
    path: str,
    text: str,
    report: LineReport,
    *,
    required: frozenset[str],
    optional: frozenset[str],
) -> list[tuple[int, dict[str, str]]]:
    """The rows of a CSV file (header line first) or a JSONL file, as ``(line, {column: text})``.

    Blank lines and lines starting with ``#`` are comments. A CSV header with an unknown or a
    missing column is an error; a row with the wrong number of fields, or a JSONL line that is
    not an object of known keys, is skipped and reported. JSON ``null`` reads as an empty field.
    """
    allowed = required | optional
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    lines = [(n, line) for n, line in lines if not line.lstrip().startswith("#")]
    if not lines:
        raise LogFormatError(f"{path}: no header or rows (only comments)")
    rows: list[tuple[int, dict[str, str]]] = []
    if lines[0][1].lstrip().startswith("{"):
        for number, line in lines:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                report.skip(number, f"not a JSON object: {exc.msg}")
                continue
            if not isinstance(obj, dict):
                report.skip(number, "not a JSON object")
                continue
            unknown = sorted(set(obj) - allowed)
            missing = sorted(required - set(obj))
            if unknown or missing:
                what = f"unknown keys {unknown}" if unknown else f"missing keys {missing}"
                report.skip(number, f"{what}; keys are {sorted(allowed)}")
                continue
            rows.append((number, {k: "" if v is None else str(v) for k, v in obj.items()}))
        return rows
    header_line, header = lines[0]
    columns = [c.strip().lower() for c in next(csv.reader([header]))]
    unknown = sorted(set(columns) - allowed)
    missing = sorted(required - set(columns))
    if unknown or missing:
        what = f"unknown columns {unknown}" if unknown else f"missing columns {missing}"
        raise LogFormatError(
            f"{path}:{header_line}: {what}; columns are {sorted(required)} and optionally "
            f"{sorted(optional)}"
        )
    for number, line in lines[1:]:
        fields = next(csv.reader([line]))
        if len(fields) != len(columns):
            report.skip(
                number, f"expected {len(columns)} fields as in the header, found {len(fields)}"
            )
            continue
        rows.append((number, {c: f.strip() for c, f in zip(columns, fields, strict=True)}))
    return rows


def number_field(row: dict[str, str], column: str, report: LineReport, line: int) -> float | None:
    """The positive finite number in ``row[column]``.

    ``None`` (the line is skipped and reported) when the field is not a number; an error when
    it is a number with a unit (``12us``: the column's unit is fixed) or is NaN, infinite, zero
    or negative.
    """
    text = row.get(column, "")
    value = to_float(text)
    if value is None:
        if _UNIT_SUFFIX.match(text):
            raise report.error(line, f"{column} '{text}' carries a unit; give plain {column}")
        report.skip(line, f"{column} '{text}' is not a number")
        return None
    return require_positive(value, column, report, line)


def count_field(
    row: dict[str, str], column: str, report: LineReport, line: int, *, minimum: int
) -> int | None:
    """The integer ``>= minimum`` in ``row[column]``, else ``None`` (skipped and reported)."""
    text = row.get(column, "")
    value = to_int(text)
    if value is None or value < minimum:
        report.skip(line, f"{column} '{text}' is not an integer >= {minimum}")
        return None
    return value


WILDCARD = "*"


def key_matches_file(key: str, path: str) -> bool:
    """Whether an option key (``run1.log=...``) names the log file ``path``.

    A key names a file by the path as given, by an equivalent path, or by its base name.
    """
    if key in (path, PurePath(path).name):
        return True
    return os.path.normpath(key) == os.path.normpath(path)


def file_value(mapping: Mapping[str, T], path: str) -> T | None:
    """The value of the first key of ``mapping`` that names the file ``path`` (not ``"*"``)."""
    return next(
        (v for k, v in mapping.items() if k != WILDCARD and key_matches_file(k, path)), None
    )


def check_keys(
    option: str, mapping: Mapping[str, T], paths: Sequence[str], extra: Collection[str] = ()
) -> None:
    """Every key of ``mapping`` must be ``"*"``, one of ``extra`` or name one of ``paths``."""
    for key in mapping:
        if key == WILDCARD or key in extra:
            continue
        if not any(key_matches_file(key, p) for p in paths):
            also = f" nor one of {', '.join(sorted(extra))}" if extra else ""
            raise LogFormatError(f"{option}: '{key}' names none of the log files{also}")
