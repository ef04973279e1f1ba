"""The canonical measurement format: CSV or JSONL rows already in the cost model's terms.

For timings from any tool the other parsers do not read. One row per timed operation:

=========  ========  =======================================================================
column     required  meaning
=========  ========  =======================================================================
op         yes       ``all_gather``, ``reduce_scatter``, ``send_recv`` or ``all_reduce``
ranks      yes       ring size P (chips taking part), an integer >= 2
bytes      yes       per-rank shard, ``sizeof(shard)`` of §3.2.2, in bytes: the all-gather
                     input, the reduce-scatter output, the send/recv message, the
                     all-reduce buffer / P
seconds    yes       time of one operation, in seconds (plain numbers, no units)
axis       no        mesh axis: 0 (ring of a mesh column, P_r) or 1 (ring of a mesh row,
                     P_c); empty when unknown (then ``--axis-map`` decides)
repeats    no        how many timings the row averages (fit weight), default 1
=========  ========  =======================================================================

:data:`TEMPLATE` is what ``meshtune calibrate --template`` prints.
"""

from __future__ import annotations

import json
import re

from meshtune.calibrate.formats.lines import (
    LineReport,
    csv_fields,
    plausible_time,
    require_positive,
    to_float,
    to_int,
)
from meshtune.calibrate.formats.records import FileLog, LogFormat, Measurement, ParseOptions, Parser
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp
from meshtune.io import MAX_JSON_DEPTH, json_too_deep

REQUIRED = frozenset({"op", "ranks", "bytes", "seconds"})
OPTIONAL = frozenset({"axis", "repeats"})

TEMPLATE = """\
# meshtune calibrate: canonical measurement format (CSV; JSONL takes the same keys per line).
# One row per timed operation, in the cost model's terms (MeshSlice §3.2.2):
#   time = t_launch + steps * (t_sync + bytes / bw)
#   steps = ranks - 1 for all_gather / reduce_scatter; 2 * (ranks - 1) for all_reduce;
#           1 for send_recv (one ring shift)
# Columns:
#   op       all_gather | reduce_scatter | send_recv | all_reduce
#   ranks    ring size P (chips in the ring), integer >= 2
#   bytes    per-rank shard in bytes: all-gather input, reduce-scatter output, send/recv message,
#            all-reduce buffer / ranks
#            (NOT the gathered total that nccl-tests prints as 'size')
#   seconds  time of one operation in seconds, plain number
#   axis     optional: 0 = ring of a mesh column (P_r), 1 = ring of a mesh row (P_c); empty =
#            unknown, then --axis-map decides
#   repeats  optional: how many timings the row averages (fit weight), default 1
# Lines starting with '#' are comments. Use two or more ring sizes per op and axis so that
# t_sync and t_launch can be told apart, and shards from 8 KiB to 512 MiB (§4.5).
op,axis,ranks,bytes,seconds,repeats
all_gather,0,2,8192,2.05e-05,20
all_gather,0,4,8192,3.43e-05,20
all_gather,0,2,536870912,0.0196,20
reduce_scatter,1,4,1048576,9.1e-05,20
send_recv,1,4,1048576,4.2e-05,20
# JSONL: {"op": "all_gather", "axis": 0, "ranks": 2, "bytes": 8192, "seconds": 2.05e-05}
#
# GeMM timings (effective FLOPS, per-GeMM overhead and efficiency curve; §3.2.2, §5.3.1),
# CSV, JSONL or a Markdown table with these columns:
#   m, n, k  GeMM (m x k) @ (k x n), integers   -- or --   size  a square GeMM, m = n = k
#   dtype    optional operand type (bf16, fp16, fp32, fp8, ...); one dtype per calibration
#   seconds  time of one GeMM in seconds (or 'time (us)', 'time_ms', ...)
#            -- or --   tflops  achieved TFLOP/s (2*m*n*k/time)
#   repeats  optional fit weight, default 1
# Time several sizes, from small (1024^3) to large (8192^3): small GeMMs are less efficient.
#
# Other result tables (rccl-tests CSV/JSON, Markdown or CSV sweeps with a message-size column
# and a time or bandwidth column) are read as they are: see docs/calibration.md.
m,n,k,dtype,seconds
8192,8192,8192,bf16,0.00412
1024,1024,1024,bf16,2.3e-05
"""


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
            if json_too_deep(line):
                report.skip(number, f"not a JSON object: nested over {MAX_JSON_DEPTH} deep")
                continue
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


def looks_like(text: str) -> bool:
    """Whether the first data line is a CSV header or JSON object with ``op`` and ``ranks``."""
    return {"op", "ranks", "bytes", "seconds"} <= csv_keys(text)


def parse(path: str, text: str, options: ParseOptions = ParseOptions()) -> FileLog:
    """Read a canonical CSV / JSONL file (columns in the module doc) into measurements."""
    report = LineReport(path, strict=options.strict)
    measurements = []
    known = ", ".join(op.value for op in MeasuredOp)
    for number, row in read_rows(path, text, report, required=REQUIRED, optional=OPTIONAL):
        name = row["op"].strip().lower()
        if name not in {op.value for op in MeasuredOp}:
            report.skip(number, f"op '{row['op']}' is not one of {known}")
            continue
        axis_text = row.get("axis", "")
        if axis_text not in ("", "0", "1"):
            report.skip(number, f"axis '{axis_text}' is not 0, 1 or empty")
            continue
        ranks = count_field(row, "ranks", report, number, minimum=2)
        repeats = (
            count_field(row, "repeats", report, number, minimum=1) if row.get("repeats") else 1
        )
        shard = number_field(row, "bytes", report, number)
        seconds = number_field(row, "seconds", report, number)
        if seconds is not None:
            seconds = plausible_time(seconds, "seconds", report, number)
        if ranks is None or repeats is None or shard is None or seconds is None:
            continue
        measurements.append(
            Measurement(
                op=MeasuredOp(name),
                ranks=ranks,
                shard_bytes=shard,
                seconds=seconds,
                source=path,
                line=number,
                axis=int(axis_text) if axis_text else None,
                repeats=repeats,
            )
        )
    return report.file_log(
        LogFormat.CANONICAL,
        measurements=measurements,
        empty="no usable rows (see --template for the columns)",
    )


PARSER = Parser(LogFormat.CANONICAL, "canonical CSV/JSONL", looks_like, parse)
