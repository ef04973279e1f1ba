"""The MeshSlice artifact's collective benchmark (``BenchCollectives2D.py``, hwnam831/meshslice).

It prints the mesh, then one section per collective and mesh axis, one line per size::

    Running benchmark on (2, 4) devices.

    Allgather_x: dim=0
    Size: 8KB,	 Time: 0.0312+-0.0011ms
    Size: 16KB,	 Time: 0.0330+-0.0009ms

    ReduceScatter_y: dim=1
    SendRecv_y:

Sections are ``Allgather``, ``ReduceScatter`` or ``SendRecv`` over mesh axis ``x`` (the P_r chips
of a mesh column: cost-model axis 0) or ``y`` (the P_c chips of a mesh row: axis 1); ``dim``
(which tensor dimension is gathered) does not enter the cost model, so both dims are
measurements of the same op and axis. ``Size`` is each chip's local shard (the all-gather
input, the reduce-scatter output, the send/recv buffer) in binary KB/MB/GB; ``Time`` is the mean
± standard deviation of one call. The ring sizes come from ``Running benchmark on (R, C)
devices`` (x ring R, y ring C), else from the global and local device counts (R = global /
local, C = local), else from ``--ranks``. Time units (ms, us, s) may not be mixed in one file.
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
)
from meshtune.calibrate.formats.log_units import TIME_UNITS, parse_size
from meshtune.calibrate.formats.ops import op_from_name
from meshtune.calibrate.formats.records import FileLog, LogFormat, Measurement, ParseOptions, Parser
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp

_SECTION = re.compile(r"^(Allgather|ReduceScatter|SendRecv)_([xy])\b", re.IGNORECASE)
_ROW = re.compile(
    r"^Size:\s*(?P<size>\S+?)\s*,\s*Time:\s*(?P<mean>\S+?)\s*\+-\s*(?P<std>\S+?)\s*"
    r"(?P<unit>ms|us|s)$"
)
_MESH = re.compile(r"Running benchmark on \(\s*(\d+)\s*,\s*(\d+)\s*\)")
_GLOBAL = re.compile(r"Global device count:\s*(\d+)")
_LOCAL = re.compile(r"Local device count:\s*(\d+)")


def looks_like(text: str) -> bool:
    """Whether ``text`` has an artifact section header or a ``Size: ..., Time: ...`` row."""
    return any(
        _SECTION.match(line) or (line.startswith("Size:") and "Time:" in line)
        for _, line in clean_lines(text)
    )


@dataclass
class _Parser:
    path: str
    report: LineReport
    ranks_option: int | None
    mesh: tuple[int, int] | None = None
    global_count: int | None = None
    section: tuple[MeasuredOp, int, int] | None = None
    units: set[str] = field(default_factory=set)
    measurements: list[Measurement] = field(default_factory=list)
    single_chip_sections: int = 0

    def start_section(self, number: int, match: re.Match[str]) -> None:
        op = op_from_name(match.group(1), f"{self.path}:{number}")
        axis = 0 if match.group(2).lower() == "x" else 1
        if self.mesh is not None:
            ranks = self.mesh[axis]
        elif self.ranks_option is not None:
            ranks = self.ranks_option
        else:
            raise LogFormatError(
                f"{self.path}:{number}: no 'Running benchmark on (R, C) devices' or device-count "
                f"lines before this section; pass --ranks {PurePath(self.path).name}=P"
            )
        self.section = (op, axis, ranks)

    def row(self, number: int, line: str) -> None:
        match = _ROW.match(line)
        if match is None:
            self.report.skip(number, "expected 'Size: <n>KB, Time: <mean>+-<std>ms'")
            return
        if self.section is None:
            self.report.skip(number, "size row before any Allgather_/ReduceScatter_/SendRecv_ line")
            return
        size = parse_size(match.group("size"))
        mean = to_float(match.group("mean"))
        if size is None or size <= 0:
            self.report.skip(number, f"size '{match.group('size')}' is not a positive size")
            return
        if mean is None:
            self.report.skip(number, f"time '{match.group('mean')}' is not a number")
            return
        unit = match.group("unit")
        self.units.add(unit)
        if len(self.units) > 1:
            units = ", ".join(sorted(self.units))
            raise LogFormatError(f"{self.path}:{number}: mixed time units ({units})")
        op, axis, ranks = self.section
        if ranks < 2:
            self.single_chip_sections += 1
            return
        seconds = plausible_time(mean * TIME_UNITS[unit], "time", self.report, number)
        if seconds is None:
            return
        self.measurements.append(
            Measurement(
                op=op,
                ranks=ranks,
                shard_bytes=size,
                seconds=seconds,
                source=self.path,
                line=number,
                axis=axis,
            )
        )

    def feed(self, number: int, line: str) -> None:
        if mesh := _MESH.search(line):
            self.mesh = (int(mesh.group(1)), int(mesh.group(2)))
        elif found := _GLOBAL.search(line):
            self.global_count = int(found.group(1))
        elif (found := _LOCAL.search(line)) and self.global_count is not None:
            local = int(found.group(1))
            if local > 0 and self.mesh is None:
                self.mesh = (self.global_count // local, local)
        elif section := _SECTION.match(line):
            self.start_section(number, section)
        elif line.startswith("Size:"):
            self.row(number, line)


def parse(path: str, text: str, options: ParseOptions = ParseOptions()) -> FileLog:
    """Read the artifact benchmark's output into per-shard measurements (see the module doc)."""
    report = LineReport(path, strict=options.strict)
    parser = _Parser(path, report, options.ranks)
    feed_lines(text, report, parser.feed)
    notes = []
    if parser.single_chip_sections:
        notes.append(f"{path}: {parser.single_chip_sections} rows on a 1-chip ring ignored")
    return report.file_log(
        LogFormat.ARTIFACT,
        measurements=parser.measurements,
        notes=notes,
        empty="no measurements (expected 'Allgather_x: ...' sections followed by "
        "'Size: 8KB, Time: 0.1234+-0.0056ms' lines on rings of 2 or more chips)",
    )


PARSER = Parser(LogFormat.ARTIFACT, "MeshSlice artifact BenchCollectives2D", looks_like, parse)
