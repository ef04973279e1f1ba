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
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePath
from typing import TypeVar

from meshtune.errors import LogFormatError
from meshtune.hardware.profile import CollectiveKind, MeasuredOp
from meshtune.io import MAX_INPUT_BYTES

T = TypeVar("T")

# A CSV field may be as long as a whole log (the csv module's default limit is 128 KiB): a
# long field is then a value the parser reports, never a csv.Error.
csv.field_size_limit(MAX_INPUT_BYTES)


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
    :class:`~meshtune.hardware.profile.CollectiveKind` given as ``op`` is read as the same
    :class:`~meshtune.hardware.profile.MeasuredOp`.
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


# --------------------------------------------------------------------------- the one op table

OP_NAMES: dict[str, MeasuredOp] = {
    "allgather": MeasuredOp.ALL_GATHER,
    "reducescatter": MeasuredOp.REDUCE_SCATTER,
    "sendrecv": MeasuredOp.SEND_RECV,
    "latency": MeasuredOp.SEND_RECV,  # osu_latency: one message between two ranks
    "allreduce": MeasuredOp.ALL_REDUCE,
    "alltoall": MeasuredOp.ALL_TO_ALL,
}
"""Every spelling of a benchmarked op, lower-cased with everything but letters removed and a
trailing ``perf`` / ``perfmpi`` dropped (``all_gather_perf_mpi``, ``Allgather``,
``osu_allreduce``)."""

TIME_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
}
"""Seconds per time unit, as the tools spell them."""


def op_key(name: str) -> str:
    """``name`` lower-cased, letters only, without a benchmark-binary suffix."""
    key = re.sub(r"[^a-z]", "", name.lower())
    for suffix in ("perfmpi", "perf"):
        key = key.removesuffix(suffix)
    return key.removeprefix("osu").removeprefix("nccl").removeprefix("mpi")


def op_from_name(name: str, where: str) -> MeasuredOp:
    """The op a benchmark name means (``all_gather_perf``, ``Allgather``, ``osu_allreduce``).

    Raises :class:`UnusableFileError` for a collective the cost model has no use for.
    """
    key = op_key(name)
    if key in OP_NAMES:
        return OP_NAMES[key]
    inside = {op for n, op in OP_NAMES.items() if n != "latency" and n in key}
    if len(inside) == 1:  # all_gather_ici, nccl_allreduce_bf16
        return inside.pop()
    known = ", ".join(op.value for op in MeasuredOp)
    raise UnusableFileError(
        f"{where}: benchmark '{name}' is not one the cost model uses (use {known})"
    )


def op_from_filename(path: str) -> MeasuredOp | None:
    """The op a file name mentions (``nccl_allgather.log``), or ``None`` if it names none or two."""
    key = re.sub(r"[^a-z]", "", PurePath(path).stem.lower())
    found = {op for name, op in OP_NAMES.items() if name != "latency" and name in key}
    return found.pop() if len(found) == 1 else None


def ring_steps(op: MeasuredOp, ranks: int) -> int:
    """Ring steps of one measured op: P − 1 for all-gather / reduce-scatter (and all-to-all:
    P − 1 exchanges of one shard each), 2(P − 1) for a ring all-reduce (a reduce-scatter then
    an all-gather), 1 for send/recv (one shift)."""
    if op is MeasuredOp.SEND_RECV:
        return 1
    if op is MeasuredOp.ALL_REDUCE:
        return 2 * (ranks - 1)
    return ranks - 1


def busbw_factor(op: MeasuredOp, ranks: int) -> float:
    """busbw / algbw as nccl-tests defines it: (P − 1)/P, 2(P − 1)/P (all-reduce), 1 (sendrecv)."""
    if op is MeasuredOp.SEND_RECV:
        return 1.0
    return ring_steps(op, ranks) / ranks


def shard_bytes_of(op: MeasuredOp, reported_bytes: float, ranks: int) -> float:
    """Per-rank shard from a size that counts the whole buffer (nccl-tests, OSU reduce-scatter).

    An all-gather's total is the gathered output, P shards; a reduce-scatter's total is each
    rank's input, P output shards; an all-reduce's buffer is cut into P shards, each
    reduce-scattered then all-gathered; an all-to-all's buffer holds one shard per rank; a
    send/recv message is one shard.
    """
    if op is MeasuredOp.SEND_RECV:
        return float(reported_bytes)
    return reported_bytes / ranks


BYTES_PER_ELEMENT = {
    "fp8": 1,
    "e4m3": 1,
    "e5m2": 1,
    "int8": 1,
    "uint8": 1,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "half": 2,
    "float16": 2,
    "fp32": 4,
    "tf32": 4,
    "float": 4,
    "float32": 4,
    "int32": 4,
    "int": 4,
    "fp64": 8,
    "double": 8,
    "float64": 8,
    "int64": 8,
}
"""Width of the element types logs name (GeMM dtypes, nccl-tests ``type``)."""


# --------------------------------------------------------------------------- the registry


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


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?$", re.IGNORECASE)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> float | None:
    """Bytes in ``8KB``, ``1 MiB``, ``512M`` or ``4096`` (binary multiples), else ``None``
    (also for a number too large to be finite)."""
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    value = float(match.group(1)) * _UNIT[match.group(2).upper()]
    return value if math.isfinite(value) else None


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
            except ValueError as exc:  # JSONDecodeError, or a number past the digit limit
                report.skip(number, f"not a JSON object: {getattr(exc, 'msg', exc)}")
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
    columns = [c.strip().lower() for c in csv_fields(header, f"{path}:{header_line}")]
    unknown = sorted(set(columns) - allowed)
    missing = sorted(required - set(columns))
    if unknown or missing:
        what = f"unknown columns {unknown}" if unknown else f"missing columns {missing}"
        raise LogFormatError(
            f"{path}:{header_line}: {what}; columns are {sorted(required)} and optionally "
            f"{sorted(optional)}"
        )
    for number, line in lines[1:]:
        fields = csv_fields(line, f"{path}:{number}")
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


# --------------------------------------------------------------------------- generic tables


def _first_data_line(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped
    return ""


def csv_keys(text: str) -> set[str]:
    """Lower-cased keys of the first data line: a CSV header or a JSON object (else empty)."""
    first = _first_data_line(text)
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):  # ValueError: also a number past the digit limit
            return set()
        return {str(k).strip().lower() for k in obj} if isinstance(obj, dict) else set()
    if "," in first:
        return {c.strip().lower() for c in first.split(",")}
    return set()


_UNIT_IN_PARENS = re.compile(r"\(([^)]*)\)|\[([^\]]*)\]")
_UNIT_SUFFIX_NAME = re.compile(r"_(ns|us|ms|s|sec|gbps|gb_s|gib_s|mb_s|tflops|gflops|b|bytes)$")


def column_name(header: str) -> tuple[str, str]:
    """``(name, unit)`` of a table column header: ``'time (us)'`` → ``('time', 'us')``,
    ``'avg_time_ms'`` → ``('avg_time', 'ms')``, ``'algBw (GB/s)'`` → ``('algbw', 'gb/s')``."""
    text = header.strip().strip("#").strip().lower().replace("μ", "µ")
    unit = ""
    found = _UNIT_IN_PARENS.search(text)
    if found:
        unit = (found.group(1) or found.group(2) or "").strip()
        text = _UNIT_IN_PARENS.sub("", text)
    name = re.sub(r"[\s\-./]+", "_", text.strip()).strip("_")
    if not unit and (suffix := _UNIT_SUFFIX_NAME.search(name)):
        unit = suffix.group(1).replace("_", "/")
        name = name[: suffix.start()]
    return name, unit


@dataclass(frozen=True)
class Table:
    """One table of a file: its column headers and its rows, as ``(line, cells)``."""

    header_line: int
    headers: tuple[str, ...]
    rows: tuple[tuple[int, tuple[str, ...]], ...]
    heading: str = ""


def _json_tables(text: str) -> list[Table] | None:
    """Tables of a JSON document (a list of objects, or an object holding one) or JSONL."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    records: list[tuple[int, dict[str, object]]] = []
    try:
        doc = json.loads(stripped)
    except (ValueError, RecursionError):  # ValueError: also a number past the digit limit
        doc = None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                return None
            if isinstance(obj, dict):
                records.append((number, obj))
    if doc is not None:
        items = doc if isinstance(doc, list) else None
        if isinstance(doc, dict):
            items = next((v for v in doc.values() if isinstance(v, list)), [doc])
        records = [(i, r) for i, r in enumerate(items or [], 1) if isinstance(r, dict)]
    if not records:
        return None
    headers: list[str] = []
    for _, record in records:
        headers += [str(k) for k in record if str(k) not in headers]
    rows = tuple(
        (
            number,
            tuple("" if record.get(h) is None else str(record.get(h)) for h in headers),
        )
        for number, record in records
    )
    return [Table(records[0][0], tuple(headers), rows)]


def read_tables(text: str, source: str = "the log") -> list[Table]:
    """Every table in ``text``: Markdown pipe tables, one CSV table, or JSON / JSONL records.

    Launcher prefixes are removed; ``#`` lines before a table are its heading (the last one
    kept); Markdown separator rows (``|---|``) are skipped. ``source`` names the file in errors.
    """
    from_json = _json_tables(text)
    if from_json is not None:
        return from_json
    tables: list[Table] = []
    heading = ""
    lines = list(clean_lines(text))
    if not any(line.startswith("|") for _, line in lines):
        data = [(n, line) for n, line in lines if line and not line.startswith("#")]
        if data and "," in data[0][1]:
            header = csv_fields(data[0][1], f"{source}:{data[0][0]}")
            rows = tuple((n, tuple(csv_fields(line, f"{source}:{n}"))) for n, line in data[1:])
            return [Table(data[0][0], tuple(header), rows)]
        return []
    current: list[tuple[int, tuple[str, ...]]] = []
    header_line = 0
    headers: tuple[str, ...] = ()
    for number, line in [*lines, (0, "")]:
        if line.startswith("|"):
            cells = tuple(c.strip() for c in line.strip().strip("|").split("|"))
            if all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
                continue
            if not headers:
                header_line, headers = number, cells
            else:
                current.append((number, cells))
            continue
        if headers:
            tables.append(Table(header_line, headers, tuple(current), heading))
            headers, current = (), []
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
    return tables
