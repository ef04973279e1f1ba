"""Speed of the one-sided partition exploration (issue 11, item 4), ratios measured in one run.

Goal: ``meshtune gemm 32768 49152 12288 --chips 16 --algorithms onesided`` ranks every
partitioning × replication factor c ≤ 4 × stationary matrix in ≤ 1 s. Measured: the whole
process (start-up, the ranking, rendering the 252-row table) and ``--json``, interleaved, and the
library call ``gemm_study(..., rank=True)`` alone, cold (fresh cost caches) and warm; medians.

Run: ``python bench/bench_onesided.py`` (prints a Markdown table for BENCHMARKS.md).
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import sys
import time

from meshtune.catalog import load_profile
from meshtune.compare.gemm import gemm_study
from meshtune.cost import onesided

ARGS = ["gemm", "32768", "49152", "12288", "--chips", "16", "--algorithms", "onesided"]
GOAL_S = 1.0


def process_walls(commands: list[list[str]], repeats: int) -> list[float]:
    """Median wall time of each command, run interleaved ``repeats`` times."""
    walls: list[list[float]] = [[] for _ in commands]
    for _ in range(repeats):
        for cmd, out in zip(commands, walls, strict=True):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            out.append(time.perf_counter() - start)
    return [statistics.median(w) for w in walls]


def library_seconds(repeats: int, *, cold: bool) -> tuple[float, int]:
    """Median time of the ranking call, and how many configurations it ranked."""
    profile = load_profile("tpuv4")
    samples, ranked = [], 0
    for _ in range(repeats):
        if cold:
            onesided._summary.cache_clear()
            onesided._shared.cache_clear()
        start = time.perf_counter()
        study = gemm_study(32768, 49152, 12288, 16, profile, ["onesided"], rank=True)
        samples.append(time.perf_counter() - start)
        ranked = len(study.ranking)
    return statistics.median(samples), ranked


def main() -> None:
    """Measure and print the Markdown table."""
    meshtune = [sys.executable, "-m", "meshtune"]
    table_s, json_s, start_s = process_walls(
        [[*meshtune, *ARGS], [*meshtune, *ARGS, "--json"], [*meshtune, "--help"]], repeats=7
    )
    cold_s, ranked = library_seconds(7, cold=True)
    warm_s, _ = library_seconds(7, cold=False)
    print(f"{platform.machine()}, CPython {platform.python_version()}, {ranked} configurations")
    print("| measurement | median | goal | ratio to goal |")
    print("|---|---|---|---|")
    command = f"`meshtune {' '.join(ARGS)}` process"
    print(f"| {command} | {table_s * 1e3:.0f} ms | 1 s | {table_s / GOAL_S:.2f} |")
    print(f"| the same with `--json` | {json_s * 1e3:.0f} ms | 1 s | {json_s / GOAL_S:.2f} |")
    print(f"| `meshtune --help` process (start-up alone) | {start_s * 1e3:.0f} ms | - | - |")
    print(f"| `gemm_study(..., rank=True)`, cold caches | {cold_s * 1e3:.0f} ms | - | - |")
    print(f"| the same, warm caches | {warm_s * 1e3:.0f} ms | - | - |")


if __name__ == "__main__":
    main()
