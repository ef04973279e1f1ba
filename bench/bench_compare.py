"""`meshtune compare` speed against `meshtune plan`, as ratios measured in one run (issue 7).

Goal (issue 7, then issue 17 item 4): the whole ``meshtune compare gpt3 --chips 16,32,64,128,256``
process, every registered algorithm, within 3× the ``meshtune plan gpt3 --chips 256`` process.
The processes run interleaved, so machine noise hits both alike; medians over repeats. Also
reported: the same comparison with every view (``--view all``), with the paper's seven
algorithms, and the library call alone (no process start-up, no rendering). ``--cpu`` times
the processes (and the library call) on CPU, which a loaded shared machine disturbs least.

Run: ``python bench/bench_compare.py [--cpu] [--repeats N]`` (prints a Markdown table for
BENCHMARKS.md, headed by the machine and its load average before and after).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence

from common import children_cpu, interleaved_walls, machine_line, median_seconds
from meshtune.catalog import load_model, load_profile
from meshtune.compare.model import compare_models
from meshtune.compare.records import VIEWS, View

CHIPS = "16,32,64,128,256"
GOAL = 3.0
# The algorithms of the paper's evaluation (§4.2, §4.3), the ones issue 7 registered.
ISSUE7 = "meshslice,collective,wang,summa,cannon,1d_tp,fsdp"


def library_seconds(views: Sequence[View], repeats: int, clock: Callable[[], float]) -> float:
    """Median time on ``clock`` of ``compare_models`` for GPT-3 over :data:`CHIPS` with
    ``views`` (every call after the first finds the cost caches warm)."""
    model, profile = load_model("gpt3"), load_profile("tpuv4")
    sizes = [int(c) for c in CHIPS.split(",")]
    return median_seconds(
        lambda: compare_models(model, profile, sizes, views=views), repeats, clock=clock
    )


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    """Measure and print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cpu", action="store_true", help="time on CPU, not wall (a loaded machine)"
    )
    parser.add_argument("--repeats", type=int, default=11, help="interleaved process repeats")
    args = parser.parse_args()
    load_before = _load()
    meshtune = [sys.executable, "-m", "meshtune"]
    plan_s, compare_s, all_s, baselines_s = interleaved_walls(
        [
            [*meshtune, "plan", "gpt3", "--chips", "256"],
            [*meshtune, "compare", "gpt3", "--chips", CHIPS],
            [*meshtune, "compare", "gpt3", "--chips", CHIPS, "--view", "all"],
            [*meshtune, "compare", "gpt3", "--chips", CHIPS, "--algorithms", ISSUE7],
        ],
        repeats=args.repeats,
        clock=children_cpu if args.cpu else time.perf_counter,
    )
    clock = time.process_time if args.cpu else time.perf_counter
    lib_scaling = library_seconds(("scaling",), 11, clock)
    lib_all = library_seconds(VIEWS, 5, clock)
    print(
        f"{machine_line()}, {'CPU' if args.cpu else 'wall'} times; load average "
        f"(1/5/15 min) {load_before} before, {_load()} after"
    )
    print()
    print("| measurement | median | goal | ratio to goal |")
    print("|---|---|---|---|")
    print(
        f"| `meshtune compare gpt3 --chips {CHIPS}` (every algorithm) process / "
        f"`meshtune plan gpt3 --chips 256` process | {compare_s * 1e3:.0f} ms / "
        f"{plan_s * 1e3:.0f} ms = {compare_s / plan_s:.2f}x "
        f"| {GOAL:g}x | {compare_s / plan_s / GOAL:.2f} |"
    )
    print(
        f"| the same with `--view all` / plan process | {all_s * 1e3:.0f} ms / "
        f"{plan_s * 1e3:.0f} ms = {all_s / plan_s:.2f}x | - | - |"
    )
    print(
        f"| the same, the paper's seven algorithms (`--algorithms {ISSUE7}`) / plan process | "
        f"{baselines_s * 1e3:.0f} ms / {plan_s * 1e3:.0f} ms = {baselines_s / plan_s:.2f}x "
        f"| {GOAL:g}x | {baselines_s / plan_s / GOAL:.2f} |"
    )
    print(
        f"| `compare_models` library call, scaling view (warm caches) | "
        f"{lib_scaling * 1e3:.1f} ms | - | - |"
    )
    print(
        f"| `compare_models` library call, every view (warm caches) | {lib_all * 1e3:.1f} ms "
        "| - | - |"
    )


if __name__ == "__main__":
    main()
