"""``meshtune run plans/gpt3-256.json --engine jax``: the process now against the process at
issue 15's filing (goal: at least 1.3x faster).

The "before" process is the command of commit ``FILING`` (the last commit before issue 15's
run work), extracted with ``git archive`` into a temporary folder and run from there; the
"after" process is the command of this working tree. Both run as whole processes (start-up,
JAX with 256 virtual CPU devices, every pass checked against NumPy and timed, repeat 5: the
CLI's defaults, ``--json`` output discarded), interleaved, and each is measured in wall time and
in CPU time (user + system of the child: what a loaded shared machine disturbs least).

Run: ``python bench/bench_run.py [--repeats N]`` from the repository; prints a Markdown table
for BENCHMARKS.md. This machine is shared: compare the ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from common import children_cpu, machine_line

ROOT = Path(__file__).resolve().parents[1]
FILING = "5870a86"  # parent of 7c97d1a, the first commit of issue 15's run work
COMMAND = ["-m", "meshtune", "run", "plans/gpt3-256.json", "--engine", "jax", "--json"]


def extract(commit: str, into: Path) -> None:
    """The ``src``, ``plans``, ``profiles`` and ``models`` folders of ``commit`` under ``into``."""
    archive = subprocess.run(
        ["git", "archive", commit, "src", "plans", "profiles", "models"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def timed(cwd: Path, src: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``meshtune run`` process importing meshtune from ``src``."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(src)
    env["JAX_PLATFORMS"] = "cpu"
    cpu, start = children_cpu(), time.perf_counter()
    subprocess.run(
        [sys.executable, *COMMAND], cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - start, children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "log", "-1", "--format=%h %cs"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    samples: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder:
        old = Path(folder)
        extract(FILING, old)
        for _ in range(args.repeats):
            samples["before"].append(timed(old, old / "src"))
            samples["after"].append(timed(ROOT, ROOT / "src"))
    wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
    print(machine_line())
    print(f"after: `git log -1` {head}; before: {FILING}; medians of {args.repeats} interleaved")
    print()
    print("| `run plans/gpt3-256.json --engine jax` process | wall s | CPU s |")
    print("|---|---|---|")
    print(f"| at the filing ({FILING}) | {wall['before']:.2f} | {cpu['before']:.2f} |")
    print(f"| now | {wall['after']:.2f} | {cpu['after']:.2f} |")
    print(
        f"| ratio | {wall['before'] / wall['after']:.2f}x faster "
        f"| {cpu['before'] / cpu['after']:.2f}x less |"
    )


if __name__ == "__main__":
    main()
