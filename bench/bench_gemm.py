"""`meshtune gemm` speed and memory on large sizes and chip counts (issue 20, finding 10).

Goal: every size inside the advertised range (dimensions up to 2**40, up to 2**24 chips) answers
in about a second. Each case is the whole ``meshtune gemm`` process; wall = median of
:data:`REPEATS` runs, peak = the child's ``ru_maxrss``. With ``--before SRC`` (the ``src`` folder
of an older checkout, e.g. from ``git archive REV src | tar -x -C DIR``) every case also runs once
on that code, under :data:`BEFORE_LIMIT_S`, and the table shows the ratio.

Run: ``python bench/bench_gemm.py [--before OLD/src]`` (prints a Markdown table for
BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import machine_line

REPEATS = 3
BEFORE_LIMIT_S = 60.0
GOAL_S = 1.0
BIG = str(2**40)

CASES: dict[str, list[str]] = {
    "M = 2^26, 16 chips, meshslice ranked": [
        "67108864",
        "4096",
        "4096",
        "-n",
        "16",
        "-a",
        "meshslice",
    ],
    "2^40 cube, 4,096 chips, meshslice ranked": [BIG, BIG, BIG, "-n", "4096", "-a", "meshslice"],
    "2^40 cube, 4,096 chips, summa ranked": [BIG, BIG, BIG, "-n", "4096", "-a", "summa"],
    "2^40 cube, 2^24 chips, every algorithm": [BIG, BIG, BIG, "-n", str(2**24)],
    # 55,440 = 2^4·3^2·5·7·11 chips and a size it divides: the most SUMMA configurations.
    "55,440 chips, every algorithm": ["1663200", "1663200", "1663200", "-n", "55440"],
}

# The child runs the gemm command and reports its own peak RSS (kB) on its last stderr line.
CHILD = """
import atexit, resource, sys
atexit.register(lambda: print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))
sys.argv = ["meshtune", "gemm", *sys.argv[1:]]
from meshtune.cli import main
main()
"""


def run_gemm(args: list[str], src: Path | None = None, limit: float | None = None) -> str:
    """``wall s, peak MB`` of one ``meshtune gemm`` process (of the code in ``src`` when given),
    or why it gave no answer (time limit, exit status)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
        env["MESHTUNE_PROFILES_DIR"] = str(Path(__file__).resolve().parents[1] / "profiles")
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *args],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        return f"> {limit:.0f} s"
    wall = time.perf_counter() - start
    lines = done.stderr.strip().splitlines()
    if done.returncode != 0:
        why = "MemoryError" if "MemoryError" in done.stderr else f"exit {done.returncode}"
        return f"{why} after {wall:.1f} s"
    return f"{wall:.2f} s, {int(lines[-1]) / 1024:.0f} MB"


def median_run(args: list[str]) -> tuple[float, str]:
    """Median wall of :data:`REPEATS` processes, and the text of the median one."""
    runs = []
    for _ in range(REPEATS):
        text = run_gemm(args)
        runs.append((float(text.split(" s")[0]), text))
    runs.sort()
    return statistics.median(r[0] for r in runs), runs[len(runs) // 2][1]


def main() -> None:
    """Measure and print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="src folder of the code to compare with")
    before = parser.parse_args().before
    print(machine_line())
    print()
    print("| case | before | after | before / after | after / goal (1 s) |")
    print("|---|---|---|---|---|")
    for label, args in CASES.items():
        wall, after = median_run(args)
        old = run_gemm(args, before, BEFORE_LIMIT_S) if before is not None else "-"
        ratio = "-"
        if old[0].isdigit():
            ratio = f"{float(old.split(' s')[0]) / wall:.0f}×"
        elif old.startswith(">"):
            ratio = f"> {BEFORE_LIMIT_S / wall:.0f}×"
        print(
            f"| `gemm {' '.join(args)}` ({label}) | {old} | {after} | {ratio} | "
            f"{wall / GOAL_S:.2f} |"
        )


if __name__ == "__main__":
    main()
