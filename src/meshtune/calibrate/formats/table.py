"""Result tables with recognisable columns: rccl-tests ``--output_format csv|json`` files,
Markdown or CSV tables such as the JAX accelerator microbenchmarks publish for TPUs.

A table is a Markdown pipe table, a CSV file or JSON / JSONL records (a list of objects, or an
object holding one). Columns are recognised by name, case and punctuation aside, with the unit
in parentheses or as a suffix (``time (us)``, ``time_ms``, ``algBw (GB/s)``):

==============  =============================================================  ===============
what            column names                                                   unit
==============  =============================================================  ===============
message size    ``size``, ``bytes``, ``message_size``, ``matrix_size``, ``nbytes`` bytes (B, KiB,
                (the whole buffer, as nccl-tests' ``size``); ``shard_bytes``,   MiB, GiB)
                ``bytes_per_rank`` (already one rank's shard); or ``count`` /
                ``elements`` with a ``type`` / ``dtype`` column
time            ``time``, ``latency``, ``avg_latency``, ``avg_time``,             ns, us, ms, s
                ``average_time``, ``mean_time``, ``seconds``                    (required,
                                                                               else the one
                                                                               that makes
                                                                               algbw = size /
                                                                               time hold)
bandwidth       ``algbw``, ``bandwidth``, ``bw``, ``achieved_bw``; ``busbw``      GB/s, GiB/s,
                (used only when there is no time column)                       MB/s, Gbps
ranks           ``ranks``, ``nranks``, ``world_size``, ``num_devices``, ``gpus``   –
op              ``op``, ``collective``, ``name``, ``test``, ``operation``         –
shapes          ``input_shape`` and ``output_shape`` with a ``dtype`` (JAX        elements
                tables; they give P and the shard, :mod:`.shapes`)
transferred     ``transferred_data``, ``bytes_transferred``: with a bandwidth    B, KB, MB, GB,
                and no time, time = transferred / bandwidth                     KiB, MiB, GiB
optional        ``inplace`` / ``in_place`` (only out-of-place rows are read),    –
                ``axis`` (0 or 1), ``wrong`` / ``#wrong`` (not 0: the row is
                dropped with a note, a corrupted run)
==============  =============================================================  ===============

The op comes from the op column, else from the last Markdown heading above the table that names
one, else ``--op``, else the file name; the ranks from their column, else ``--ranks``. With no
time column the time is derived from the bandwidth as nccl-tests defines it: algbw = size /
time, busbw = algbw · (P − 1)/P (all-gather, reduce-scatter), · 2(P − 1)/P (all-reduce), · 1
(send/recv); the file's notes say so. Shards follow nccl-tests: size / P, or size for send/recv.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from meshtune.calibrate.formats import shapes
from meshtune.calibrate.formats.lines import (
    LineReport,
    plausible_time,
    to_float,
    to_int,
    wrong_rows_note,
)
from meshtune.calibrate.formats.log_units import BYTES_PER_ELEMENT, TIME_UNITS, parse_size
from meshtune.calibrate.formats.ops import (
    OP_NAMES,
    busbw_factor,
    op_from_filename,
    op_from_name,
    op_key,
    shard_bytes_of,
)
from meshtune.calibrate.formats.records import (
    FileLog,
    LogFormat,
    Measurement,
    ParseOptions,
    Parser,
    UnusableFileError,
)
from meshtune.calibrate.formats.tabular import Table, column_name, read_tables
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp

SIZE = (
    "size",
    "bytes",
    "message_size",
    "msg_size",
    "nbytes",
    "size_bytes",
    "buffer_size",
    "matrix_size",
    "data_size",
)
SHARD = ("shard_bytes", "bytes_per_rank", "per_rank_bytes", "shard_size")
ELEMENTS = ("count", "elements", "num_elements", "nelems")
DTYPE = ("type", "dtype", "datatype", "data_type")
TIME = ("time", "latency", "avg_latency", "avg_time", "average_time", "mean_time", "seconds")
ALGBW = ("algbw", "alg_bw", "bandwidth", "bw", "achieved_bw", "algorithm_bandwidth")
BUSBW = ("busbw", "bus_bw", "bus_bandwidth")
RANKS = (
    "ranks",
    "nranks",
    "world_size",
    "num_devices",
    "ngpus",
    "num_gpus",
    "gpus",
    "nprocs",
    "np",
)
OP = ("op", "collective", "name", "test", "operation", "coll")
INPLACE = ("inplace", "in_place")
AXIS = ("axis",)
WRONG = ("wrong", "errors", "error")
TRANSFERRED = (
    "transferred",
    "transferred_data",
    "transferred_bytes",
    "bytes_transferred",
    "data_transferred",
)

BYTE_UNITS = {
    "": 1.0,
    "b": 1.0,
    "bytes": 1.0,
    "kb": 1e3,
    "kib": 2.0**10,
    "mb": 1e6,
    "mib": 2.0**20,
    "gb": 1e9,
    "gib": 2.0**30,
}
"""Bytes per unit of a transferred-data column (decimal GB, as bandwidths in GB/s)."""

BANDWIDTH_UNITS = {
    "gb/s": 1e9,
    "gbs": 1e9,
    "gib/s": 2.0**30,
    "mb/s": 1e6,
    "mib/s": 2.0**20,
    "gbps": 1e9 / 8,
    "gbit/s": 1e9 / 8,
    "b/s": 1.0,
}
"""Bytes per second of each bandwidth unit."""


@dataclass(frozen=True)
class _Columns:
    """Index and unit of each recognised column of one table (None: absent)."""

    found: dict[str, tuple[int, str]]

    @classmethod
    def of(cls, table: Table) -> _Columns:
        named = [column_name(h) for h in table.headers]
        found: dict[str, tuple[int, str]] = {}
        for role, names in (
            ("shard", SHARD),
            ("size", SIZE),
            ("elements", ELEMENTS),
            ("dtype", DTYPE),
            ("time", TIME),
            ("algbw", ALGBW),
            ("busbw", BUSBW),
            ("ranks", RANKS),
            ("op", OP),
            ("inplace", INPLACE),
            ("axis", AXIS),
            ("wrong", WRONG),
            ("transferred", TRANSFERRED),
            ("in_shape", shapes.INPUT),
            ("out_shape", shapes.OUTPUT),
        ):
            for index, (name, unit) in enumerate(named):
                if (
                    name in names
                    and role not in found
                    and index not in {i for i, _ in found.values()}
                ):
                    found[role] = (index, unit)
        return cls(found)

    def has_size(self) -> bool:
        return (
            "shard" in self.found
            or "size" in self.found
            or "elements" in self.found
            or ("in_shape" in self.found and "out_shape" in self.found)
        )

    def has_time(self) -> bool:
        return any(k in self.found for k in ("time", "algbw", "busbw"))


def _shape_elements(cells: tuple[str, ...], columns: _Columns) -> tuple[int, int] | None:
    """Elements of the row's input and output shapes, when it has both."""
    if "in_shape" not in columns.found or "out_shape" not in columns.found:
        return None
    given = shapes.elements(cells[columns.found["in_shape"][0]])
    result = shapes.elements(cells[columns.found["out_shape"][0]])
    return (given, result) if given and result else None


def _usable(table: Table) -> bool:
    columns = _Columns.of(table)
    names = {column_name(h)[0] for h in table.headers}
    return columns.has_size() and columns.has_time() and not {"m", "n", "k"} <= names


def looks_like(text: str) -> bool:
    """Whether ``text`` holds a table with a message-size and a time or bandwidth column."""
    return any(_usable(t) for t in read_tables(text))


def _heading_op(heading: str) -> MeasuredOp | None:
    key = op_key(heading)
    found = {op for name, op in OP_NAMES.items() if name != "latency" and name in key}
    return found.pop() if len(found) == 1 else None


class _Reader:
    def __init__(self, path: str, report: LineReport, options: ParseOptions) -> None:
        self.path = path
        self.report = report
        self.options = options
        self.measurements: list[Measurement] = []
        self.notes: list[str] = []
        self.wrong_rows: list[int] = []

    def _time_scale(self, table: Table, columns: _Columns) -> tuple[str, float]:
        """The time (or bandwidth) column's role and its unit's scale."""
        where = f"{self.path}:{table.header_line}"
        if "time" in columns.found:
            index, unit = columns.found["time"]
            if column_name(table.headers[index])[0] == "seconds" and not unit:
                unit = "s"
            if not unit:
                unit = self._unit_from_algbw(table, columns) or ""
            if unit.replace("usec", "us") not in TIME_UNITS:
                raise LogFormatError(
                    f"{where}: time column '{table.headers[index]}' has no unit meshtune "
                    f"knows; name it like 'time (us)' (units: {', '.join(TIME_UNITS)})"
                )
            return "time", TIME_UNITS[unit.replace("usec", "us")]
        role = "algbw" if "algbw" in columns.found else "busbw"
        index, unit = columns.found[role]
        if unit not in BANDWIDTH_UNITS:
            raise LogFormatError(
                f"{where}: bandwidth column '{table.headers[index]}' has no unit meshtune knows "
                f"(units: {', '.join(BANDWIDTH_UNITS)})"
            )
        if "transferred" in columns.found:
            moved, moved_unit = columns.found["transferred"]
            if moved_unit not in BYTE_UNITS:
                raise LogFormatError(
                    f"{where}: transferred-data column '{table.headers[moved]}' has no unit "
                    f"meshtune knows (units: {', '.join(u for u in BYTE_UNITS if u)})"
                )
            self.notes.append(
                f"{self.path}: no time column; time = transferred data / bandwidth "
                f"('{table.headers[moved]}' / '{table.headers[index]}')"
            )
            return "transferred", BANDWIDTH_UNITS[unit]
        self.notes.append(
            f"{self.path}: no time column; times derived from the {role} column "
            f"'{table.headers[index]}' (time = size·factor / {role})"
        )
        return role, BANDWIDTH_UNITS[unit]

    def _unit_from_algbw(self, table: Table, columns: _Columns) -> str | None:
        """The unit of a unitless time column that makes every row's algbw = size / time hold
        (within 5 %), algbw in its stated unit or nccl-tests' GB/s; None if no unit does."""
        if "algbw" not in columns.found or "size" not in columns.found:
            return None
        bw_index, bw_unit = columns.found["algbw"]
        bw_scale = BANDWIDTH_UNITS.get(bw_unit, 1e9 if not bw_unit else 0.0)
        ratios = []
        for _, cells in table.rows:
            if len(cells) != len(table.headers):
                continue
            size = parse_size(cells[columns.found["size"][0]])
            bw = to_float(cells[bw_index])
            time = to_float(cells[columns.found["time"][0]])
            if size and bw and time and bw > 0 and time > 0 and bw_scale > 0:
                ratios.append(size / (bw * bw_scale) / time)
        if not ratios:
            return None
        for unit, scale in TIME_UNITS.items():
            if all(abs(r / scale - 1) <= 0.05 for r in ratios):
                self.notes.append(
                    f"{self.path}: the time column has no unit; {unit} makes algbw = size / "
                    "time hold on every row"
                )
                return unit
        return None

    def _op(self, table: Table, cells: tuple[str, ...], columns: _Columns, line: int) -> MeasuredOp:
        if "op" in columns.found and cells[columns.found["op"][0]]:
            return op_from_name(cells[columns.found["op"][0]], f"{self.path}:{line}")
        op = _heading_op(table.heading) or self.options.op or op_from_filename(self.path)
        if op is None:
            raise LogFormatError(
                f"{self.path}:{table.header_line}: cannot tell which collective this table "
                "measured (no op column, no op in a heading or the file name); pass "
                f"--op {PurePath(self.path).name}=all_gather|reduce_scatter|send_recv|all_reduce"
            )
        return op

    def _ranks(
        self, cells: tuple[str, ...], columns: _Columns, table: Table, op: MeasuredOp
    ) -> int:
        if "ranks" in columns.found:
            value = to_int(cells[columns.found["ranks"][0]])
            if value is not None:
                return value
        sizes = _shape_elements(cells, columns)
        if sizes is not None and (found := shapes.ranks_from_shapes(op, *sizes)) is not None:
            return found
        if self.options.ranks is not None:
            return self.options.ranks
        raise LogFormatError(
            f"{self.path}:{table.header_line}: the table has no ranks column (and no input / "
            f"output shapes that give P for {op.value}); pass "
            f"--ranks {PurePath(self.path).name}=P"
        )

    def _bytes(
        self, cells: tuple[str, ...], columns: _Columns, op: MeasuredOp
    ) -> tuple[float, bool]:
        """(bytes, is a per-rank shard) of a row; raises ValueError when unreadable."""
        if not any(role in columns.found for role in ("shard", "size", "elements")):
            sizes = _shape_elements(cells, columns)
            dtype = cells[columns.found["dtype"][0]] if "dtype" in columns.found else ""
            found = shapes.bytes_from_shapes(op, *sizes, dtype) if sizes is not None else None
            if found is None:
                raise ValueError("no shapes and element type to size the row")
            return found
        for role in ("shard", "size"):
            if role in columns.found:
                index, unit = columns.found[role]
                text = cells[index]
                unit = unit if unit not in ("b", "bytes", "") else ""
                value = parse_size(f"{text}{unit[:1]}" if unit else text)
                if value is None:
                    raise ValueError(f"{role} '{text}' is not a byte count")
                return value, role == "shard"
        index, _ = columns.found["elements"]
        count = to_float(cells[index])
        dtype = cells[columns.found["dtype"][0]].lower() if "dtype" in columns.found else ""
        if count is None:
            raise ValueError(f"count '{cells[index]}' is not a number")
        if dtype not in BYTES_PER_ELEMENT:
            raise ValueError(f"element count without a known element type ('{dtype}')")
        return count * BYTES_PER_ELEMENT[dtype], False

    def read(self, table: Table) -> None:
        columns = _Columns.of(table)
        role, scale = self._time_scale(table, columns)
        bandwidth_role = "algbw" if "algbw" in columns.found else "busbw"
        index = columns.found[bandwidth_role if role == "transferred" else role][0]
        for line, cells in table.rows:
            if len(cells) != len(table.headers):
                self.report.skip(
                    line,
                    f"expected {len(table.headers)} cells as in the header, found {len(cells)}",
                )
                continue
            if "inplace" in columns.found:
                flag = cells[columns.found["inplace"][0]].strip().lower()
                if flag in ("1", "true", "yes", "in-place", "inplace"):
                    continue
            if "wrong" in columns.found:
                wrong = to_int(cells[columns.found["wrong"][0]])
                if wrong is not None and wrong != 0:
                    self.wrong_rows.append(line)
                    continue
            op = self._op(table, cells, columns, line)
            try:
                total, is_shard = self._bytes(cells, columns, op)
            except ValueError as exc:
                self.report.skip(line, str(exc))
                continue
            value = to_float(cells[index])
            if value is None:
                self.report.skip(line, f"{table.headers[index]} '{cells[index]}' is not a number")
                continue
            if total <= 0:
                continue
            ranks = self._ranks(cells, columns, table, op)
            if ranks < 2:
                raise LogFormatError(f"{self.path}:{line}: {ranks} rank moves no data; need P >= 2")
            if role == "time":
                seconds = value * scale
            elif role == "transferred":
                moved_index, moved_unit = columns.found["transferred"]
                moved = to_float(cells[moved_index])
                bandwidth = value * scale
                if moved is None or moved <= 0 or bandwidth <= 0:
                    self.report.skip(line, "transferred data or bandwidth is not a positive number")
                    continue
                seconds = moved * BYTE_UNITS[moved_unit] / bandwidth
            else:
                factor = 1.0 if role == "algbw" else busbw_factor(op, ranks)
                bandwidth = value * scale
                if bandwidth <= 0:
                    self.report.skip(line, f"{role} '{cells[index]}' is not positive")
                    continue
                seconds = total * factor / bandwidth
            checked = plausible_time(seconds, role, self.report, line)
            if checked is None:
                continue
            axis_text = cells[columns.found["axis"][0]] if "axis" in columns.found else ""
            self.measurements.append(
                Measurement(
                    op=op,
                    ranks=ranks,
                    shard_bytes=total if is_shard else shard_bytes_of(op, total, ranks),
                    seconds=checked,
                    source=self.path,
                    line=line,
                    axis=int(axis_text) if axis_text in ("0", "1") else None,
                )
            )


def parse(path: str, text: str, options: ParseOptions = ParseOptions()) -> FileLog:
    """Read every usable table of ``text`` into per-shard measurements (see the module doc)."""
    report = LineReport(path, strict=options.strict)
    reader = _Reader(path, report, options)
    tables = [t for t in read_tables(text, path) if _usable(t)]
    if not tables:
        raise UnusableFileError(
            f"{path}: no table with a message-size column and a time or bandwidth column"
        )
    for table in tables:
        reader.read(table)
    if reader.wrong_rows:
        reader.notes.append(wrong_rows_note(path, "wrong", reader.wrong_rows))
    return report.file_log(
        LogFormat.TABLE,
        measurements=reader.measurements,
        notes=reader.notes,
        empty="no measurements in its tables (rows of non-zero sizes with a time or bandwidth)",
    )


PARSER = Parser(LogFormat.TABLE, "result table (CSV/Markdown/JSON)", looks_like, parse)
