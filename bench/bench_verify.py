"""Verification speed and memory at 4,096 chips, for every registered algorithm (issue 7's goal).

For each registered algorithm: plan GPT-3 at 4,096 chips with that algorithm (weak scaling), write
the plan file, then run the whole ``meshtune verify`` process on it and record its wall time and
peak resident memory (``ru_maxrss`` of the child). Goal: ≤ 5 s and ≤ 500 MB each. Algorithms
with no feasible mesh at 4,096 chips are listed as such.

Run: ``python bench/bench_verify.py`` (prints a Markdown table for BENCHMARKS.md). With
``--before SRC`` (the ``src`` folder of an older checkout, e.g. from
``git archive REV src | tar -x -C DIR``) every plan is also verified by that code, in the same
run, and the table shows both and their ratios. This machine is shared and noisy: the wall
times are medians of three runs; a run's verify is timed before and after back to back.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshtune.algorithms.registry import algorithm_names
from meshtune.catalog import load_model, load_profile
from meshtune.errors import InfeasibleError
from meshtune.planner.make import make_plan

CHIPS = 4096
REPEATS = 3


# The child runs the verify command and reports its own peak RSS (kB) on its last stderr line.
CHILD = """
import atexit, resource, sys
atexit.register(lambda: print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))
sys.argv = ["meshtune", "verify", sys.argv[1]]
from meshtune.cli import main
main()
"""


def run_verify(path: Path, src: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one ``meshtune verify`` process (of the code in
    ``src`` when given)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"verify failed on {path}: {done.stderr.strip()}")
    return wall, int(done.stderr.strip().splitlines()[-1]) / 1024


def measure(path: Path, src: Path | None) -> tuple[float, float]:
    """(median wall seconds, largest peak RSS in MB) over :data:`REPEATS` processes."""
    runs = [run_verify(path, src) for _ in range(REPEATS)]
    return statistics.median(w for w, _ in runs), max(p for _, p in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="src folder of the code to compare with")
    before = parser.parse_args().before
    model, profile = load_model("gpt3"), load_profile("tpuv4")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), "
        f"{platform.python_implementation()} {platform.python_version()}, {platform.system()}"
    )
    if before is None:
        print("| algorithm | mesh | verify wall (median of 3) | peak RSS | goal |")
        print("|---|---|---|---|---|")
    else:
        print("| algorithm | mesh | before: wall, peak | after: wall, peak | speedup | memory |")
        print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in algorithm_names():
            try:
                plan = make_plan(model, profile, CHIPS, algorithm=name)
            except InfeasibleError as exc:
                print(f"| {name} | - | infeasible: {str(exc)[:60]}… | - | - |")
                continue
            path = Path(tmp) / f"{name}.json"
            path.write_text(plan.to_json(), encoding="utf-8")
            label = plan.mesh.to_mesh().label
            wall, peak = measure(path, None)
            if before is None:
                print(f"| {name} | {label} | {wall:.2f} s | {peak:.0f} MB | ≤ 5 s, ≤ 500 MB |")
                continue
            old_wall, old_peak = measure(path, before)
            print(
                f"| {name} | {label} | {old_wall:.2f} s, {old_peak:.0f} MB | {wall:.2f} s, "
                f"{peak:.0f} MB | {old_wall / wall:.1f}× | {old_peak / peak:.1f}× less |"
            )


if __name__ == "__main__":
    main()
