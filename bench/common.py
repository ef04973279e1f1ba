"""What every benchmark script shares: medians of wall times, and the machine they ran on.

This machine is shared and noisy: benchmarks report medians and ratios measured in one run, and
processes being compared run interleaved so that load affects them alike.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence


def median_seconds(func: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``func`` over ``repeats`` calls."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def interleaved_walls(commands: Sequence[Sequence[str]], repeats: int) -> list[float]:
    """Median wall time of each command's process, the commands run interleaved ``repeats``
    times (stdout discarded; a failing command raises)."""
    walls: list[list[float]] = [[] for _ in commands]
    for _ in range(repeats):
        for cmd, out in zip(commands, walls, strict=True):
            start = time.perf_counter()
            subprocess.run(list(cmd), check=True, stdout=subprocess.DEVNULL)
            out.append(time.perf_counter() - start)
    return [statistics.median(w) for w in walls]


def machine_line() -> str:
    """``machine: x86_64, CPython 3.11.7, Linux`` for the report's header."""
    return (
        f"machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()}"
    )
