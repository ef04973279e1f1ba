"""OSU micro-benchmarks: ``osu_allgather``, ``osu_reduce_scatter``, ``osu_allreduce``,
``osu_alltoall`` and ``osu_latency``.

The layout (``-f`` adds min / max / iterations columns after the average)::

    # OSU MPI Allgather Latency Test v7.3
    # Datatype: MPI_CHAR.
    # Size       Avg Latency(us)
    1024                   12.31
    2048                   14.87

The title line names the benchmark (``MPI``, ``MPI-CUDA``, ``NCCL`` ... flavours alike); the
``# Size`` header gives the unit of the latency column, the second column of every row. Sizes
(OSU sources): ``osu_allgather`` sends ``size`` bytes from every rank, so shard = size;
``osu_reduce_scatter`` reduces a ``size``-byte buffer and leaves size / P on each rank, so
shard = size / P; ``osu_allreduce`` reduces a ``size``-byte buffer on every rank, shard =
size / P over 2(P − 1) ring steps; ``osu_alltoall`` sends ``size`` bytes to every rank, shard =
size; ``osu_latency`` times one ``size``-byte message between two ranks (half the ping-pong
round trip), a send_recv with P = 2.

OSU 7.x (``-f``) adds Min / Max latency and an ``Iterations`` column, whose count drops for
large messages in the middle of the table; each row is weighted by its iteration count (the
variance of a mean of n timings falls as 1/n). A ``# Datatype:`` line is read as a comment.

OSU does not print the number of ranks. It is read from the launch line in the log
(``mpirun -np N``, ``mpiexec -n N``, ``srun -n N`` / ``--ntasks=N``, ``srun -N nodes
--ntasks-per-node=M``), else from the job-script lines around it (``#SBATCH --ntasks=N``,
``#SBATCH --nodes=N`` with ``--ntasks-per-node=M``, ``#PBS -l select=N:mpiprocs=M``), else
taken from ``--ranks``. Bandwidth, non-blocking and one-sided tests are refused: they do not
time one blocking ring operation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath

from meshtune.calibrate.formats.lines import (
    LineReport,
    clean_lines,
    feed_lines,
    plausible_time,
    to_float,
    to_int,
)
from meshtune.calibrate.formats.log_units import TIME_UNITS
from meshtune.calibrate.formats.ops import op_from_name, shard_bytes_of
from meshtune.calibrate.formats.records import (
    FileLog,
    LogFormat,
    Measurement,
    ParseOptions,
    Parser,
    UnusableFileError,
)
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp

_TITLE = re.compile(r"^#\s*OSU\s+(\S+)\s+(.*?)\s*Test\b", re.IGNORECASE)
_HEADER = re.compile(r"^#\s*Size\s+(.*)$")
_LATENCY_UNIT = re.compile(r"Latency\s*\((\w+)\)", re.IGNORECASE)
_NP = re.compile(r"(?:\s-np?|\s--np|\s--ntasks|\s-n)[\s=]+(\d+)\b")
_NODES = re.compile(r"(?:\s-N|\s--nodes)[\s=]+(\d+)\b")
_PER_NODE = re.compile(
    r"(?:--ntasks-per-node|--npernode|-npernode|--tasks-per-node|mpiprocs)[\s=]+(\d+)\b"
)
_LAUNCHER = re.compile(r"\b(?:mpirun|mpiexec|srun|orterun|aprun|jsrun)\b")
_JOB_SCRIPT = re.compile(r"^#\s*(?:SBATCH|PBS)\b")
_SELECT = re.compile(r"select=(\d+):.*?mpiprocs=(\d+)")


def _ranks_in(line: str) -> int | None:
    """The rank count a launch or job-script line gives: ``-np N``, or nodes × tasks per node."""
    if select := _SELECT.search(line):
        return int(select.group(1)) * int(select.group(2))
    padded = " " + line
    if found := _NP.search(padded):
        return int(found.group(1))
    nodes, per_node = _NODES.search(padded), _PER_NODE.search(padded)
    if nodes and per_node:
        return int(nodes.group(1)) * int(per_node.group(1))
    return None


def looks_like(text: str) -> bool:
    """Whether ``text`` has an OSU title line or an OSU ``# Size  ...Latency`` header."""
    for _, line in clean_lines(text):
        if _TITLE.match(line):
            return True
        header = _HEADER.match(line)
        if header and "latency" in header.group(1).lower():
            return True
    return False


def _benchmark(library: str, title: str, where: str) -> MeasuredOp:
    """The op of an OSU title such as ``MPI`` + ``Allgather Latency`` or ``MPI`` + ``Latency``."""
    words = title.split()
    one_sided = "_" in library  # MPI_Put, MPI_Get, MPI_Accumulate
    if one_sided or not words or words[-1].lower() != "latency" or "non-blocking" in title.lower():
        raise UnusableFileError(
            f"{where}: OSU '{library} {title}' test does not time one blocking ring operation; use "
            "osu_allgather, osu_reduce_scatter, osu_allreduce or osu_latency"
        )
    name = " ".join(words[:-1]) or "latency"
    return op_from_name(name, where)


@dataclass
class _Block:
    op: MeasuredOp
    line: int
    scale: float | None = None
    ranks: int | None = None
    iterations: int | None = None  # column of the iteration count (``-f``), when printed


@dataclass
class _Parser:
    path: str
    report: LineReport
    ranks_option: int | None
    block: _Block | None = None
    launch_ranks: int | None = None
    script_ranks: int | None = None
    script_nodes: int | None = None
    script_per_node: int | None = None
    units: set[str] = field(default_factory=set)
    measurements: list[Measurement] = field(default_factory=list)
    zero_rows: int = 0

    def _ranks(self, block: _Block, number: int) -> int:
        if block.ranks is not None:
            return block.ranks
        logged = 2 if block.op is MeasuredOp.SEND_RECV else self.launch_ranks
        if logged is None:
            logged = self.script_ranks
        ranks = logged if logged is not None else self.ranks_option
        if ranks is None:
            raise LogFormatError(
                f"{self.path}:{number}: OSU logs do not print the number of ranks and no "
                "launch line ('mpirun -np N', 'srun -n N') or job-script line ('#SBATCH "
                f"--ntasks=N') was found; pass --ranks {PurePath(self.path).name}=P"
            )
        if ranks < 2:
            raise LogFormatError(f"{self.path}:{number}: {ranks} rank moves no data; need P >= 2")
        block.ranks = ranks
        return ranks

    def _job_script(self, line: str) -> None:
        """``#SBATCH`` / ``#PBS`` lines: a task count, or nodes and tasks per node (any order)."""
        padded = " " + line.split(None, 1)[-1]
        if _SELECT.search(line) or _NP.search(padded):
            self.script_ranks = _ranks_in(line)
            return
        if nodes := _NODES.search(padded):
            self.script_nodes = int(nodes.group(1))
        if per := _PER_NODE.search(padded):
            self.script_per_node = int(per.group(1))
        if self.script_nodes and self.script_per_node:
            self.script_ranks = self.script_nodes * self.script_per_node

    def comment(self, number: int, line: str) -> None:
        if _JOB_SCRIPT.match(line):
            self._job_script(line)
            return
        if title := _TITLE.match(line):
            where = f"{self.path}:{number}"
            self.block = _Block(_benchmark(title.group(1), title.group(2), where), number)
        elif header := _HEADER.match(line):
            if self.block is None:
                raise LogFormatError(f"{self.path}:{number}: '# Size' header before an OSU title")
            unit = _LATENCY_UNIT.search(header.group(1))
            if unit is None or unit.group(1).lower() not in TIME_UNITS:
                raise LogFormatError(
                    f"{self.path}:{number}: expected a 'Latency(us)' column, found "
                    f"'{header.group(1).strip()}'"
                )
            self.units.add(unit.group(1).lower())
            if len(self.units) > 1:
                units = ", ".join(sorted(self.units))
                raise LogFormatError(f"{self.path}:{number}: mixed latency units ({units})")
            self.block.scale = TIME_UNITS[unit.group(1).lower()]
            columns = re.sub(r"\s*\(\w+\)", "", header.group(1)).split()
            words = [w.lower() for w in columns if w.lower() != "latency"]
            if "iterations" in words:  # after Size: Avg, Min, Max, Iterations (OSU 7.x -f)
                self.block.iterations = 1 + words.index("iterations")

    def row(self, number: int, tokens: list[str]) -> None:
        block = self.block
        if block is None or block.scale is None:
            self.report.skip(number, "data row before an OSU title and '# Size' header")
            return
        size = to_int(tokens[0])
        latency = to_float(tokens[1]) if len(tokens) > 1 else None
        if size is None or size < 0:
            self.report.skip(number, f"size '{tokens[0]}' is not a byte count")
            return
        if latency is None:
            self.report.skip(number, "no latency value after the size")
            return
        if size == 0:
            self.zero_rows += 1
            return
        ranks = self._ranks(block, number)
        seconds = plausible_time(latency * block.scale, "latency", self.report, number)
        if seconds is None:
            return
        # osu_allgather sends `size` bytes from every rank, osu_alltoall `size` bytes to every
        # rank; the others reduce a `size` buffer.
        per_rank = block.op in (MeasuredOp.ALL_GATHER, MeasuredOp.ALL_TO_ALL)
        total = size * ranks if per_rank else size
        repeats = 1
        if block.iterations is not None and len(tokens) > block.iterations:
            repeats = max(1, to_int(tokens[block.iterations]) or 1)
        self.measurements.append(
            Measurement(
                op=block.op,
                ranks=ranks,
                shard_bytes=shard_bytes_of(block.op, total, ranks),
                seconds=seconds,
                source=self.path,
                line=number,
                repeats=repeats,
            )
        )

    def feed(self, number: int, line: str) -> None:
        if not line:
            return
        if line.startswith("#"):
            self.comment(number, line)
            return
        if _LAUNCHER.search(line) and not line[0].isdigit():
            found = _ranks_in(line)
            if found is not None:
                self.launch_ranks = found
            return
        tokens = line.split()
        if to_int(tokens[0]) is not None:
            self.row(number, tokens)


def parse(path: str, text: str, options: ParseOptions = ParseOptions()) -> FileLog:
    """Read an OSU latency log into per-shard measurements (see the module doc)."""
    report = LineReport(path, strict=options.strict)
    parser = _Parser(path, report, options.ranks)
    feed_lines(text, report, parser.feed)
    notes = (f"{path}: {parser.zero_rows} zero-byte rows ignored",) if parser.zero_rows else ()
    return report.file_log(
        LogFormat.OSU,
        measurements=parser.measurements,
        notes=notes,
        empty="no measurements (an OSU log is a '# OSU ... Test' title, a '# Size  Avg "
        "Latency(us)' header and rows of non-zero sizes)",
    )


PARSER = Parser(LogFormat.OSU, "OSU micro-benchmarks", looks_like, parse)
