"""nccl-tests / rccl-tests stdout: ``all_gather_perf``, ``reduce_scatter_perf``, ``sendrecv_perf``,
``all_reduce_perf`` (and their ``*_perf_mpi`` builds).

The layout, in its current form (older releases lack ``redop``/``root``, call the last column
``error`` and print ``N/A`` there; rccl-tests prints the same table)::

    # nThread 1 nGpus 8 minBytes 8 maxBytes 536870912 step: 2(factor) warmup iters: 5 iters: 20
    #  Rank  0 Group  0 Pid 4242 on node01 device  0 [0x07] NVIDIA A100-SXM4-80GB
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)
         8388608       2097152     float    none      -1    121.8   68.87   60.26      0    119.5

Columns are found by name in the header line, so layouts with more or fewer columns read the
same. The time used is the out-of-place ``time`` (the first one), in the unit of the units line
(µs in every release). Launcher prefixes (``srun -l``, OpenMPI ``--tag-output``), ``NCCL INFO``
chatter and summary lines are ignored; a row-shaped line that does not parse is skipped and
reported.

Sizes (nccl-tests doc/PERFORMANCE.md): ``size`` is the total buffer S = P × shard for
all_gather (the gathered output) and for reduce_scatter (each rank's input, ``recvcount·n``), and
the message each rank sends for sendrecv; so shard = S / P, or S for sendrecv. Bus bandwidth
folds in the ring: busbw = algbw·(P−1)/P for all-gather and reduce-scatter, = algbw for
sendrecv, 2(P−1)/P for all-reduce (whose ``size`` is the reduced buffer: P shards, each
reduce-scattered then all-gathered). Only ``time`` enters the fit; the busbw/algbw ratio is used
to check that the op and the rank count were read right.

Quirks: a row whose ``#wrong`` (or old ``error``) count is not 0 comes from a run that
corrupted data and is dropped with a note; ``NCCL INFO`` / ``WARN`` lines between rows are
ignored, also when one cuts a row in two (the two halves are joined); OpenMPI
``--tag-output`` tags are removed wherever they appear. One file may hold several benchmarks
run back to back (cluster acceptance scripts): each table takes the op of the benchmark that
printed it, an ``alltoall_perf`` table is read too (its fit is kept for expert parallelism), and
a benchmark the cost model has no use for (broadcast, reduce, gather, ...) is skipped with a
note; a file of nothing but such benchmarks is unusable.

The op comes from a ``*_perf`` command line or ``Collective test starting`` line, else from
``--op``, else from the file name. The rank count P comes from the ``Rank`` device lines (one per
rank, also in multi-node runs that print ``nGpus 1``; with ``NCCL_TESTS_SPLIT`` the ranks of one
group), else ``nThread × nGpus`` when above 1, else ``-t × -g`` of a ``*_perf`` command line
not run under a launcher, else ``--ranks``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePath

import numpy as np

from meshtune.calibrate.formats.lines import (
    MAX_SECONDS,
    MIN_SECONDS,
    LineReport,
    clean_line,
    clean_lines,
    feed_checked,
    plausible_time,
    to_float,
    to_int,
    wrong_rows_note,
)
from meshtune.calibrate.formats.log_units import TIME_UNITS
from meshtune.calibrate.formats.nccl_state import (
    CHATTER,
    COMMAND_LINE,
    HEADER_LINE,
    LAUNCHER,
    RANK_LINE,
    START_LINE,
    THREADS,
    TIME_UNIT,
    UNITS_LINE,
    WRONG,
    ResultTable,
    TestState,
    command_ranks,
    log_ranks,
    placement,
)
from meshtune.calibrate.formats.ops import (
    busbw_factor,
    op_from_filename,
    op_from_name,
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
from meshtune.calibrate.formats.rows import (
    Block,
    RowColumns,
    feed_plain_runs,
    read_block,
    text_pieces,
)
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp

_TableKey = tuple[MeasuredOp, int, "int | None", "str | None"]
"""(op, ranks, hosts, system): rows of one size under one key are one point."""

_RATIO_TOLERANCE = 0.02


def looks_like(text: str) -> bool:
    """Whether ``text`` has a nccl-tests column header or ``nThread ... nGpus`` line."""
    return any(
        HEADER_LINE.match(line) or (line.startswith("#") and THREADS.search(line))
        for _, line in clean_lines(text)
    )


class _Parser:
    def __init__(
        self,
        path: str,
        report: LineReport,
        ranks: int | None,
        op: MeasuredOp | None,
    ) -> None:
        self.path = path
        self.report = report
        self.ranks_option = ranks
        self.op_option = op
        self.state = TestState()
        self.table: ResultTable | None = None
        self.rows = RowColumns()
        self.keys: dict[_TableKey, int] = {}
        self.notes: list[str] = []
        self.zero_rows = 0
        self.wrong_rows: list[int] = []
        self.unused_rows: dict[str, int] = {}
        self.pending = ""
        self.partial: tuple[int, list[str]] | None = None

    # ------------------------------------------------------------------ table set-up

    def _resolve_op(self, line: int) -> MeasuredOp:
        if self.state.op is not None:
            return self.state.op
        if self.op_option is not None:
            return self.op_option
        from_name = op_from_filename(self.path)
        if from_name is not None:
            return from_name
        raise LogFormatError(
            f"{self.path}:{line}: cannot tell which collective this log measured (no *_perf "
            "command line, no 'Collective test starting' line, no op in the file name); pass "
            f"--op {PurePath(self.path).name}=all_gather|reduce_scatter|send_recv|all_reduce"
        )

    def _resolve_ranks(self, line: int) -> int:
        logged = log_ranks(self.state)
        ranks = logged if logged is not None else self.ranks_option
        if ranks is None:
            raise LogFormatError(
                f"{self.path}:{line}: cannot tell the number of ranks (no 'Rank' device lines, no "
                "nThread/nGpus header, no *_perf command line); pass "
                f"--ranks {PurePath(self.path).name}=P"
            )
        if ranks < 2:
            raise LogFormatError(f"{self.path}:{line}: {ranks} rank moves no data; need P >= 2")
        return ranks

    def _start_table(self, number: int, line: str) -> None:
        self._check_ratios()
        columns = line.lstrip("#").split()
        if "time" not in columns:
            raise LogFormatError(f"{self.path}:{number}: column header without a 'time' column")
        if self.state.unused is not None:
            self.table = ResultTable(columns, None, 0, number)
            return
        op, ranks = self._resolve_op(number), self._resolve_ranks(number)
        table = ResultTable(columns, op, ranks, number)
        table.hosts, table.system = placement(self.state)
        where = (op, ranks, table.hosts, table.system)
        table.key = self.keys.setdefault(where, len(self.keys))
        self.table = table

    def _set_op(self, name: str, number: int) -> None:
        """The benchmark now running: its op, or (a file of several) one to skip."""
        try:
            self.state.op = op_from_name(name, f"{self.path}:{number}")
            self.state.unused = None
        except UnusableFileError:
            self.state.op, self.state.unused = None, name.removesuffix("_perf")
            self.unused_rows.setdefault(self.state.unused, 0)

    def _units(self, number: int, line: str) -> None:
        found = {m.group(1) for t in line.lstrip("#").split() if (m := TIME_UNIT.match(t))}
        self.state.units |= {"us" if unit == "µs" else unit for unit in found}
        if len(self.state.units) > 1:
            units = ", ".join(sorted(self.state.units))
            raise LogFormatError(f"{self.path}:{number}: mixed time units ({units})")
        if found:
            self.state.time_scale = TIME_UNITS[found.pop()]

    # ------------------------------------------------------------------ lines

    def command(self, number: int, line: str) -> None:
        match = COMMAND_LINE.search(line)
        if match is None:
            return
        self._set_op(match.group(1) + "_perf", number)
        launched = LAUNCHER.search(line[: match.start(1)]) is not None
        self.state.command_ranks = command_ranks(match.group(2), launched)

    def comment(self, number: int, line: str) -> None:
        if HEADER_LINE.match(line):
            self._start_table(number, line)
        elif UNITS_LINE.match(line):
            self._units(number, line)
        elif rank := RANK_LINE.match(line):
            self.state.rank_groups[int(rank.group(1))] = int(rank.group(2) or 0)
            if rank.group(3):
                device = rank.group(4).strip()
                self.state.rank_hosts[int(rank.group(1))] = (rank.group(3), device)
        elif threads := THREADS.search(line):
            self._check_ratios()
            self.table = None
            self.state.rank_groups = {}
            self.state.rank_hosts = {}
            count = int(threads.group(1)) * int(threads.group(2))
            self.state.threads_gpus = count if count > 1 else None
        elif start := START_LINE.search(line):
            self._set_op(start.group(1), number)

    def _corrupted(self, table: ResultTable, tokens: list[str]) -> bool:
        """Whether a ``#wrong`` / ``error`` cell of the row counts wrong values (N/A: unknown)."""
        counts = [to_int(tokens[i]) for i, c in enumerate(table.columns) if c.lower() in WRONG]
        return any(count is not None and count != 0 for count in counts)

    def row(self, number: int, tokens: list[str]) -> None:
        table = self.table
        if table is None:
            self.report.skip(number, "data row before any nccl-tests column header")
            return
        if len(tokens) < len(table.columns) and self.partial is None:
            self.partial = (number, tokens)  # a row cut by NCCL chatter: joined with the rest
            return
        if table.op is None:
            unused = self.state.unused or "?"
            self.unused_rows[unused] = self.unused_rows.get(unused, 0) + 1
            return
        if len(tokens) != len(table.columns):
            self.report.skip(
                number,
                f"expected {len(table.columns)} columns as in the header, found {len(tokens)}",
            )
            return
        size_token = tokens[table.columns.index("size")]
        time_token = tokens[table.columns.index("time")]  # the first, out-of-place, time
        size = to_int(size_token)
        time = to_float(time_token)
        if size is None or size < 0:
            self.report.skip(number, f"size '{size_token}' is not a byte count")
            return
        if time is None:
            self.report.skip(number, f"time '{time_token}' is not a number")
            return
        if size == 0:
            self.zero_rows += 1
            return
        if self._corrupted(table, tokens):
            self.wrong_rows.append(number)
            return
        seconds = plausible_time(time * self.state.time_scale, "time", self.report, number)
        if seconds is None:
            return
        if "algbw" in table.columns and "busbw" in table.columns:
            algbw = to_float(tokens[table.columns.index("algbw")])
            busbw = to_float(tokens[table.columns.index("busbw")])
            if algbw is not None and busbw is not None and algbw >= 1.0:
                table.ratios.append(busbw / algbw)
        self.rows.add(table.key, size, seconds, number)

    def _plain_block(self, lines: list[str]) -> Block | None:
        """The cells of a run of plain rows of the current table, when it can be read as
        columns: a table of a used op whose first column is ``size``."""
        table = self.table
        if table is None or table.op is None:
            return None
        columns = table.columns
        if columns[0] != "size":
            return None
        wrong = [i for i, c in enumerate(columns) if c.lower() in WRONG]
        ratio = [columns.index(c) for c in ("algbw", "busbw") if c in columns]
        floats = [columns.index("time"), *(ratio if len(ratio) == 2 else [])]
        return read_block(lines, len(columns), [0, *wrong], floats)

    def block(self, first: int, lines: list[str]) -> None:
        """A run of plain rows (:mod:`~meshtune.calibrate.formats.rows`), numbered from
        ``first``: read as columns when it is a clean stretch of the current table, else line by
        line (a row cut by chatter before the run first takes the run's first line). Its rows are
        taken exactly as :meth:`row` takes them one at a time: zero-byte rows counted, ``#wrong``
        rows noted; a row that :meth:`row` would skip or refuse sends the whole run line by
        line, so that it is skipped or refused there."""
        skip = 0
        while skip < len(lines) and (self.partial is not None or self.pending):
            feed_checked(self.report, self.feed, first + skip, lines[skip].strip())  # cut row
            skip += 1
        if skip:
            first, lines = first + skip, lines[skip:]
        parsed = self._plain_block(lines)
        table = self.table
        if parsed is None or table is None:
            for offset, line in enumerate(lines):
                feed_checked(self.report, self.feed, first + offset, line.strip())
            return
        columns = table.columns
        size = parsed.ints[0]
        numbers = np.arange(first, first + len(lines), dtype=np.int64)
        zero = size == 0
        counts = [parsed.ints[i] for i in parsed.ints if i != 0]
        corrupted = ~zero & np.any(np.array(counts) != 0, axis=0) if counts else np.zeros_like(zero)
        keep = ~zero & ~corrupted
        seconds = parsed.floats[columns.index("time")][keep] * self.state.time_scale
        with np.errstate(invalid="ignore"):
            plausible = (seconds >= MIN_SECONDS) & (seconds <= MAX_SECONDS)
        if not (bool(np.all(size >= 0)) and bool(np.all(plausible))):  # said line by line
            for offset, line in enumerate(lines):
                feed_checked(self.report, self.feed, first + offset, line.strip())
            return
        self.zero_rows += int(zero.sum())
        self.wrong_rows.extend(numbers[corrupted].tolist())
        if "algbw" in columns and "busbw" in columns:
            algbw = parsed.floats[columns.index("algbw")][keep]
            busbw = parsed.floats[columns.index("busbw")][keep]
            counted = algbw >= 1.0
            table.ratio_blocks.append(busbw[counted] / algbw[counted])
        self.rows.extend(table.key, size[keep].astype(np.float64), seconds, numbers[keep])

    def _check_ratios(self) -> None:
        """busbw/algbw must be what nccl-tests prints for the op on P ranks."""
        table = self.table
        if table is None or table.op is None:
            return
        ratios = np.concatenate([np.array(table.ratios, dtype=np.float64), *table.ratio_blocks])
        if not len(ratios):
            return
        ratio = float(np.median(ratios))
        p = table.ranks
        expected = busbw_factor(table.op, p)
        if abs(ratio - expected) <= _RATIO_TOLERANCE * expected:
            return
        where = f"{self.path}:{table.line}"
        meant = [
            op.value
            for op in MeasuredOp
            if abs(ratio - busbw_factor(op, p)) <= _RATIO_TOLERANCE * busbw_factor(op, p)
        ]
        hint = f" (it is that of {' or '.join(meant)})" if meant else ""
        raise LogFormatError(
            f"{where}: busbw/algbw = {ratio:.3f}, but {table.op.value} on {p} ranks gives "
            f"{expected:.3f}{hint}; check the op (--op) and the rank count (--ranks)"
        )

    def feed(self, number: int, line: str) -> None:
        if self.pending or line.endswith("\\"):
            self.pending += " " + line.rstrip("\\")
            if line.endswith("\\"):
                return
            line, self.pending = self.pending.strip(), ""
        if "NCCL" in line:
            line = CHATTER.sub("", line).strip()
        if not line:
            return
        if self.partial is not None:
            self._join(number, line)
            return
        if line.startswith("#"):
            self.comment(number, line)
            return
        tokens = line.split()
        if to_int(tokens[0]) is not None:
            self.row(number, tokens)
        elif "_perf" in line:
            self.command(number, line)

    def _join(self, number: int, line: str) -> None:
        """The rest of a row cut in two, or (the next line is no continuation) the cut row is
        skipped as it stands and ``line`` read on its own."""
        start, head = self.partial or (number, [])
        self.partial = None
        tokens = line.split()
        table = self.table
        if (
            table is not None
            and not line.startswith("#")
            and len(head) + len(tokens) == len(table.columns)
        ):
            self.row(start, head + tokens)
            return
        self.row_short(start, head)
        self.feed(number, line)

    def row_short(self, number: int, tokens: list[str]) -> None:
        """A row with fewer cells than the header and no continuation: skipped and reported."""
        table = self.table
        if table is None or table.op is None:
            return
        self.report.skip(
            number, f"expected {len(table.columns)} columns as in the header, found {len(tokens)}"
        )

    def chunk(self, before: int, text: str) -> int:
        """Read the lines of ``text`` (a piece of the log that ends at a line end), numbered
        after line ``before``; returns the number of the last line read."""
        return before + feed_plain_runs(text, before + 1, self.block, self._raw)

    def _raw(self, number: int, raw: str) -> None:
        feed_checked(self.report, self.feed, number, clean_line(raw))

    def _measurements(self) -> list[Measurement]:
        """One measurement per (table key, size): its rows merged (:class:`RowColumns`)."""
        tables = {key: where for where, key in self.keys.items()}
        points = self.rows.merged()
        result = []
        for key, size, seconds, count, line in points:
            op, ranks, hosts, system = tables[key]
            result.append(
                Measurement(
                    op=op,
                    ranks=ranks,
                    shard_bytes=shard_bytes_of(op, size, ranks),
                    seconds=seconds,
                    source=self.path,
                    line=line,
                    repeats=count,
                    hosts=hosts,
                    system=system,
                )
            )
        if len(points) < self.rows.rows:
            self.notes.append(
                f"{self.path}: {self.rows.rows:,} rows give {len(points)} points: the rows of "
                "one size on one ring are one point, their mean time, weighted by their count"
            )
        return result

    def finish(self) -> list[Measurement]:
        if self.partial is not None:
            self.row_short(*self.partial)
            self.partial = None
        self._check_ratios()
        if self.zero_rows:
            self.notes.append(f"{self.path}: {self.zero_rows} zero-byte rows ignored")
        if self.wrong_rows:
            self.notes.append(wrong_rows_note(self.path, "#wrong", self.wrong_rows))
        for name, count in self.unused_rows.items():
            self.notes.append(
                f"{self.path}: benchmark '{name}' skipped ({count} rows): not one the cost "
                "model uses"
            )
        return self._measurements()


def parse(path: str, text: str, options: ParseOptions = ParseOptions()) -> FileLog:
    """Read a nccl-tests / rccl-tests log into per-shard measurements (see the module doc).

    ``options.ranks`` and ``options.op`` are used only where the log does not state them.
    """
    return parse_chunks(path, text_pieces(text), options)


def parse_chunks(
    path: str, chunks: Iterable[str], options: ParseOptions = ParseOptions()
) -> FileLog:
    """:func:`parse` of a log given in pieces that each end at a line end (a large file read
    as a stream: only one piece is held at a time)."""
    report = LineReport(path, strict=options.strict)
    parser = _Parser(path, report, options.ranks, options.op)
    number = 0
    for chunk in chunks:
        number = parser.chunk(number, chunk)
    measurements = parser.finish()
    if not measurements and parser.unused_rows:
        names = ", ".join(parser.unused_rows)
        raise UnusableFileError(
            f"{path}: benchmark(s) {names} are not ones the cost model uses (use all_gather, "
            "reduce_scatter, send_recv, all_reduce, all_to_all)"
        )
    return report.file_log(
        LogFormat.NCCL,
        measurements=measurements,
        notes=parser.notes,
        empty="no measurements (a nccl-tests table is a '#  size  count  type ...' header "
        "followed by rows of non-zero sizes)",
    )


PARSER = Parser(LogFormat.NCCL, "nccl-tests/rccl-tests", looks_like, parse, parse_chunks)
