"""OSU micro-benchmarks: ``osu_allgather``, ``osu_reduce_scatter`` and ``osu_latency``.

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
shard = size / P; ``osu_latency`` times one ``size``-byte message between two ranks (half the
ping-pong round trip), a send_recv with P = 2.

OSU does not print the number of ranks: it is read from an ``mpirun -np N`` / ``srun -n N``
line in the log, else taken from ``--ranks``. Bandwidth, non-blocking and all-reduce tests are
refused: they do not time one blocking ring operation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath

from meshtune.calibrate._common import (
    ALL_REDUCE_HINT,
    FileLog,
    LineReport,
    LogFormat,
    Measurement,
    UnusableFileError,
    clean_lines,
    require_positive,
    to_float,
    to_int,
)
from meshtune.errors import LogFormatError
from meshtune.specs import CollectiveKind

_TITLE = re.compile(r"^#\s*OSU\s+(\S+)\s+(.*?)\s*Test\b", re.IGNORECASE)
_HEADER = re.compile(r"^#\s*Size\s+(.*)$")
_LATENCY_UNIT = re.compile(r"Latency\s*\((\w+)\)", re.IGNORECASE)
_LAUNCH = re.compile(
    r"\b(?:mpirun|mpiexec|srun)\b.*?(?:\s-np?|\s--np|\s--ntasks)[\s=]+(\d+)\b.*\bosu_\w+"
)
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_BENCHMARKS = {
    "allgather": CollectiveKind.ALL_GATHER,
    "reduce_scatter": CollectiveKind.REDUCE_SCATTER,
    "": CollectiveKind.SEND_RECV,
}


def looks_like(text: str) -> bool:
    """Whether ``text`` has an OSU title line or an OSU ``# Size  ...Latency`` header."""
    for _, line in clean_lines(text):
        if _TITLE.match(line):
            return True
        header = _HEADER.match(line)
        if header and "latency" in header.group(1).lower():
            return True
    return False


def _benchmark(library: str, title: str, where: str) -> CollectiveKind:
    """The op of an OSU title such as ``MPI`` + ``Allgather Latency`` or ``MPI`` + ``Latency``."""
    words = title.split()
    one_sided = "_" in library  # MPI_Put, MPI_Get, MPI_Accumulate
    if one_sided or not words or words[-1].lower() != "latency" or "non-blocking" in title.lower():
        raise UnusableFileError(
            f"{where}: OSU '{library} {title}' test does not time one blocking ring operation; use "
            "osu_allgather, osu_reduce_scatter or osu_latency"
        )
    name = " ".join(words[:-1]).lower()
    if name == "allreduce":
        raise UnusableFileError(f"{where}: {ALL_REDUCE_HINT}")
    if name not in _BENCHMARKS:
        raise UnusableFileError(
            f"{where}: OSU '{title}' test is not one the cost model uses; use osu_allgather, "
            "osu_reduce_scatter or osu_latency"
        )
    return _BENCHMARKS[name]


@dataclass
class _Block:
    op: CollectiveKind
    line: int
    scale: float | None = None
    ranks: int | None = None


@dataclass
class _Parser:
    path: str
    report: LineReport
    ranks_option: int | None
    block: _Block | None = None
    launch_ranks: int | None = None
    units: set[str] = field(default_factory=set)
    measurements: list[Measurement] = field(default_factory=list)
    zero_rows: int = 0

    def _ranks(self, block: _Block, number: int) -> int:
        if block.ranks is not None:
            return block.ranks
        logged = 2 if block.op is CollectiveKind.SEND_RECV else self.launch_ranks
        ranks = logged if logged is not None else self.ranks_option
        if ranks is None:
            raise LogFormatError(
                f"{self.path}:{number}: OSU logs do not print the number of ranks and no "
                f"'mpirun -np N' line was found; pass --ranks {PurePath(self.path).name}=P"
            )
        if ranks < 2:
            raise LogFormatError(f"{self.path}:{number}: {ranks} rank moves no data; need P >= 2")
        block.ranks = ranks
        return ranks

    def comment(self, number: int, line: str) -> None:
        if title := _TITLE.match(line):
            where = f"{self.path}:{number}"
            self.block = _Block(_benchmark(title.group(1), title.group(2), where), number)
        elif header := _HEADER.match(line):
            if self.block is None:
                raise LogFormatError(f"{self.path}:{number}: '# Size' header before an OSU title")
            unit = _LATENCY_UNIT.search(header.group(1))
            if unit is None or unit.group(1).lower() not in _SCALE:
                raise LogFormatError(
                    f"{self.path}:{number}: expected a 'Latency(us)' column, found "
                    f"'{header.group(1).strip()}'"
                )
            self.units.add(unit.group(1).lower())
            if len(self.units) > 1:
                units = ", ".join(sorted(self.units))
                raise LogFormatError(f"{self.path}:{number}: mixed latency units ({units})")
            self.block.scale = _SCALE[unit.group(1).lower()]

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
        seconds = require_positive(latency * block.scale, "latency", self.report, number)
        self.measurements.append(
            Measurement(
                op=block.op,
                ranks=ranks,
                shard_bytes=size / ranks if block.op is CollectiveKind.REDUCE_SCATTER else size,
                seconds=seconds,
                source=self.path,
                line=number,
            )
        )

    def feed(self, number: int, line: str) -> None:
        if not line:
            return
        if line.startswith("#"):
            self.comment(number, line)
            return
        if launch := _LAUNCH.search(line):
            self.launch_ranks = int(launch.group(1))
            return
        tokens = line.split()
        if to_int(tokens[0]) is not None:
            self.row(number, tokens)


def parse(path: str, text: str, *, strict: bool = False, ranks: int | None = None) -> FileLog:
    """Read an OSU latency log into per-shard measurements (see the module doc)."""
    report = LineReport(path, strict=strict)
    parser = _Parser(path, report, ranks)
    for number, line in clean_lines(text):
        parser.feed(number, line)
    notes = (f"{path}: {parser.zero_rows} zero-byte rows ignored",) if parser.zero_rows else ()
    return report.file_log(
        LogFormat.OSU,
        measurements=parser.measurements,
        notes=notes,
        empty="no measurements (an OSU log is a '# OSU ... Test' title, a '# Size  Avg "
        "Latency(us)' header and rows of non-zero sizes)",
    )
