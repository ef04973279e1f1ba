"""What every benchmark script shares: medians of wall times, and the machine they ran on.

This machine is shared and noisy: benchmarks report medians and ratios measured in one run, and
processes being compared run interleaved so that load affects them alike.
"""

from __future__ import annotations

import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence


def median_seconds(
    func: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median time of ``func`` over ``repeats`` calls on ``clock`` (wall by default;
    ``time.process_time`` for this process's CPU)."""
    samples = []
    for _ in range(repeats):
        start = clock()
        func()
        samples.append(clock() - start)
    return statistics.median(samples)


def children_cpu() -> float:
    """CPU seconds (user + system) of every finished child process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def interleaved_walls(
    commands: Sequence[Sequence[str]], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    """Median time on ``clock`` of each command's process (wall by default; ``children_cpu``
    for CPU, what a loaded shared machine disturbs least), the commands run interleaved
    ``repeats`` times (stdout discarded; a failing command raises)."""
    samples: list[list[float]] = [[] for _ in commands]
    for _ in range(repeats):
        for cmd, out in zip(commands, samples, strict=True):
            start = clock()
            subprocess.run(list(cmd), check=True, stdout=subprocess.DEVNULL)
            out.append(clock() - start)
    return [statistics.median(w) for w in samples]


def machine_line() -> str:
    """``machine: x86_64, CPython 3.11.7, Linux`` for the report's header."""
    return (
        f"machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()}"
    )
