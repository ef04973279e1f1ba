"""``meshtune run plans/gpt3-256.json --engine jax``: one jitted program per distinct
(algorithm, dataflow, slices, split, transposition) instead of one per pass (issue 15 item 5:
12 compilations become 3; goal: the process at least 1.3x faster).

Both variants run as whole processes in the same run, interleaved (``run_plan`` with
``reuse_programs=False`` is the engine as it was: a program built per pass). Each process
starts JAX with 256 virtual CPU devices, checks every pass against NumPy and times it (repeat
5, the CLI's default).

Run: ``python bench/bench_run.py [--repeats N]``; prints a Markdown table for BENCHMARKS.md.
This machine is shared: compare the ratio, not absolute numbers.
"""

from __future__ import annotations

import argparse
import sys

from common import interleaved_walls, machine_line

PROGRAM = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=256"
from meshtune.engines import jax_engine
from meshtune.engines.passes import plan_passes
from meshtune.verify import load_plan
plan = load_plan(open("plans/gpt3-256.json").read(), "plans/gpt3-256.json")
report = jax_engine.run_plan(plan, plan_passes(plan, "reduced", None), reuse_programs={reuse})
assert report.ok
print(report.programs)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    before = [sys.executable, "-c", PROGRAM.format(reuse=False)]
    after = [sys.executable, "-c", PROGRAM.format(reuse=True)]
    old, new = interleaved_walls([before, after], args.repeats)
    print(machine_line())
    print()
    print("| `run plans/gpt3-256.json --engine jax` process | median s | ratio |")
    print("|---|---|---|")
    print(f"| a program per pass (before: 12 compilations) | {old:.2f} | 1.00 |")
    print(f"| a program per distinct key (3 compilations) | {new:.2f} | {old / new:.2f}x faster |")


if __name__ == "__main__":
    main()
