"""The lines a nccl-tests log prints (their patterns), and what those seen so far say about the
test that is running: its op, rank count, hosts and device
(:mod:`~meshtune.calibrate.formats.nccl`), and the table it prints."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from meshtune.calibrate.formats.lines import to_int
from meshtune.hardware.calibration import MeasuredOp

if TYPE_CHECKING:
    from numpy.typing import NDArray


HEADER_LINE = re.compile(r"^#\s*size\s+count\s+type\b", re.IGNORECASE)
UNITS_LINE = re.compile(r"^#\s*\(B\)")
RANK_LINE = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\b(?:\s+\d+\s+on\s+(\S+)\s+device\s+\d+"
    r"\s+\[[^\]]*\]\s+(.*))?"
)
THREADS = re.compile(r"\bnThread\s+(\d+)\s+nGpus\s+(\d+)")
START_LINE = re.compile(r"Collective test starting:\s*(\S+)")
COMMAND_LINE = re.compile(r"(?:^|[\s/])([A-Za-z_]+?)_perf(?:_mpi)?(?:\s|$)(.*)")
LAUNCHER = re.compile(r"\b(?:mpirun|mpiexec|srun|orterun|jsrun|aprun|torchrun)\b")
TIME_UNIT = re.compile(r"^\((ns|us|µs|ms|s)\)$")
CHATTER = re.compile(r"[A-Za-z][\w.-]*:\d+:\d+\s+\[\d+\]\s+NCCL\s+(?:INFO|WARN)\b.*$")
"""NCCL's ``host:pid:tid [dev] NCCL INFO ...`` debug output, from where it starts on a line
(also glued to the numeric cell a cut row ends with: a host name starts with a letter)."""
WRONG = ("#wrong", "wrong", "error", "errors")


@dataclass
class ResultTable:
    """One results table: its columns, and the op and rank count it measured (``op`` None: a
    benchmark the cost model has no use for, whose rows are counted and skipped)."""

    columns: list[str]
    op: MeasuredOp | None
    ranks: int
    line: int
    ratios: list[float] = field(default_factory=list)
    ratio_blocks: list[NDArray[np.float64]] = field(default_factory=list)
    hosts: int | None = None
    system: str | None = None
    key: int = 0  # rows of one size under the same key are one point (RowColumns)


@dataclass
class TestState:
    """What the lines seen so far say about the test that is running."""

    op: MeasuredOp | None = None
    rank_groups: dict[int, int] = field(default_factory=dict)
    rank_hosts: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> host, device
    threads_gpus: int | None = None
    command_ranks: int | None = None
    time_scale: float = 1e-6
    units: set[str] = field(default_factory=set)
    unused: str | None = None  # the benchmark running, when the cost model has no use for it


def command_ranks(args: str, launched: bool) -> int | None:
    """``-t × -g`` of a ``*_perf`` command line, when that is the whole rank count."""
    if launched:
        return None
    tokens = args.split()
    values = {"threads": 1, "gpus": 1}
    for i, token in enumerate(tokens[:-1]):
        key = {"-t": "threads", "--nthreads": "threads", "-g": "gpus", "--ngpus": "gpus"}.get(token)
        number = to_int(tokens[i + 1])
        if key is not None and number is not None:
            values[key] = number
    count = values["threads"] * values["gpus"]
    return count if count > 1 else None


def log_ranks(state: TestState) -> int | None:
    """The rank count the log states: device lines (of one NCCL_TESTS_SPLIT group), else the
    header's nThread × nGpus, else the command line's -t × -g."""
    if state.rank_groups:
        first_group = min(state.rank_groups.values())
        return sum(1 for g in state.rank_groups.values() if g == first_group)
    if state.threads_gpus is not None:
        return state.threads_gpus
    return state.command_ranks


def placement(state: TestState) -> tuple[int | None, str | None]:
    """(distinct hosts, the device name) of the ranks of the first group, from the ``Rank``
    lines; None where the lines do not say (old layouts without host, several device names)."""
    if not state.rank_hosts or not state.rank_groups:
        return None, None
    first = min(state.rank_groups.values())
    placed = [
        state.rank_hosts[r]
        for r, g in state.rank_groups.items()
        if g == first and r in state.rank_hosts
    ]
    devices = {device for _, device in placed}
    return len({host for host, _ in placed}) or None, devices.pop() if len(devices) == 1 else None
