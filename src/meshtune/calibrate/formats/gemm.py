"""GeMM timings for the compute model (§3.2.2, §4.5, §5.3.1): effective FLOPS, per-GeMM
overhead and the efficiency curve over GeMM size.

A table (CSV, Markdown or JSON / JSONL records), one row per timed GeMM ``(m × k) · (k × n)``;
columns are recognised by name, the unit in parentheses or as a suffix:

============================  =====================================================  ========
column                        meaning                                                 required
============================  =====================================================  ========
``m``, ``n``, ``k``           GeMM dimensions, integers >= 1                          one of
``size`` / ``dim`` /          a square GeMM, m = n = k
``matrix_size`` / ``matrix_dim``
``seconds`` / ``time (us)``   time of one GeMM (ns, us, ms, s)                        one of
``tflops`` / ``tflop/s``      achieved TFLOP/s (``gflops``: GFLOP/s; any name
                              starting so, e.g. ``TFLOP/s per device``),
                              converted as seconds = 2·m·n·k / rate
``dtype`` / ``type``          operand type (``bf16``, ``fp16``, ``fp32``, ``fp8``)    no
``repeats``                   how many timings the row averages (fit weight)          no
============================  =====================================================  ========

A table without a dtype column is read as ``unspecified`` (then ``bytes_per_element`` must
come from elsewhere).
"""

from __future__ import annotations

from meshtune.calibrate.formats.lines import LineReport, plausible_time, to_float, to_int
from meshtune.calibrate.formats.log_units import TIME_UNITS
from meshtune.calibrate.formats.records import (
    FileLog,
    GemmMeasurement,
    LogFormat,
    ParseOptions,
    Parser,
    UnusableFileError,
)
from meshtune.calibrate.formats.tabular import Table, column_name, read_tables
from meshtune.errors import LogFormatError

SQUARE = ("size", "dim", "matrix_size", "matrix_dim", "n_dim")
TIME = ("seconds", "time", "avg_time", "average_time", "mean_time", "latency")
RATE = {"tflops": 1e12, "tflop": 1e12, "tflop_s": 1e12, "gflops": 1e9, "gflop_s": 1e9}
DTYPE = ("dtype", "type", "datatype", "data_type", "precision")

UNSPECIFIED = "unspecified"


def _roles(table: Table) -> dict[str, tuple[int, str]]:
    found: dict[str, tuple[int, str]] = {}
    for index, header in enumerate(table.headers):
        name, unit = column_name(header)
        if name in ("m", "n", "k", "repeats"):
            found.setdefault(name, (index, unit))
        elif name in SQUARE:
            found.setdefault("square", (index, unit))
        elif name in TIME:
            found.setdefault("time", (index, unit or ("s" if name == "seconds" else "")))
        elif name in RATE or unit.replace("/", "_") in RATE:
            key = name if name in RATE else unit.replace("/", "_")
            found.setdefault("rate", (index, key))
        elif name.startswith(("tflop", "gflop")):  # "TFLOP/s per device", "tflops_per_chip"
            found.setdefault("rate", (index, name[:1] + "flops"))
        elif name in DTYPE:
            found.setdefault("dtype", (index, unit))
    return found


def _usable(table: Table) -> bool:
    roles = _roles(table)
    dims = {"m", "n", "k"} <= set(roles) or "square" in roles
    return dims and ("rate" in roles or ("time" in roles and "square" not in roles))


def looks_like(text: str) -> bool:
    """Whether ``text`` holds a table with GeMM dimensions and a time or TFLOP/s column."""
    return any(_usable(t) for t in read_tables(text))


def _read(table: Table, path: str, report: LineReport) -> list[GemmMeasurement]:
    roles = _roles(table)
    gemms: list[GemmMeasurement] = []
    if "time" in roles and roles["time"][1] not in TIME_UNITS:
        raise LogFormatError(
            f"{path}:{table.header_line}: time column '{table.headers[roles['time'][0]]}' has "
            f"no unit meshtune knows; name it like 'time (us)' or 'seconds'"
        )
    for line, cells in table.rows:
        if len(cells) != len(table.headers):
            report.skip(line, f"expected {len(table.headers)} cells, found {len(cells)}")
            continue
        if "square" in roles:
            side = to_int(cells[roles["square"][0]])
            dims = [side, side, side]
        else:
            dims = [to_int(cells[roles[c][0]]) for c in ("m", "n", "k")]
        if any(d is None or d < 1 for d in dims):
            report.skip(line, "GeMM dimensions are not integers >= 1")
            continue
        m, n, k = (int(d) for d in dims if d is not None)
        repeat_cell = cells[roles["repeats"][0]] if "repeats" in roles else ""
        repeats = to_int(repeat_cell) if repeat_cell else 1
        if repeats is None or repeats < 1:
            report.skip(line, "repeats is not an integer >= 1")
            continue
        role = "time" if "time" in roles and cells[roles["time"][0]] else "rate"
        if role not in roles:
            report.skip(line, "no time and no throughput")
            continue
        index, unit = roles[role]
        value = to_float(cells[index])
        if value is None:
            report.skip(line, f"{table.headers[index]} '{cells[index]}' is not a number")
            continue
        flops = 2.0 * m * n * k
        if role == "time":
            seconds = value * TIME_UNITS[unit]
        else:
            rate = value * RATE[unit]
            seconds = flops / rate if rate > 0 else value
        checked = plausible_time(seconds, role if role == "time" else "derived time", report, line)
        if checked is None:
            continue
        dtype = cells[roles["dtype"][0]].strip().lower() if "dtype" in roles else UNSPECIFIED
        gemms.append(GemmMeasurement(m, n, k, dtype or UNSPECIFIED, checked, path, line, repeats))
    return gemms


def parse(path: str, text: str, options: ParseOptions = ParseOptions()) -> FileLog:
    """Read a GeMM table (columns in the module doc) into GeMM timings."""
    report = LineReport(path, strict=options.strict)
    tables = [t for t in read_tables(text, path) if _usable(t)]
    if not tables:
        raise UnusableFileError(f"{path}: no table of GeMM sizes with a time or TFLOP/s column")
    gemms = [g for table in tables for g in _read(table, path, report)]
    return report.file_log(
        LogFormat.GEMM, gemms=gemms, empty="no usable GeMM rows (see --template for the columns)"
    )


PARSER = Parser(LogFormat.GEMM, "GeMM timings", looks_like, parse)
