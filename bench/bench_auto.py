"""``plan --algorithm auto`` against one algorithm's plan, as ratios measured in one run
(issue 14's goal: auto at most 3x one plan).

Times :func:`meshtune.planner.make.make_plan` (the cluster plan, as ``meshtune plan`` runs it) for
GPT-3 at 256 chips on tpuv4 with MeshSlice, with ``auto`` (the algorithms an engine runs) and with
``auto`` over every registered algorithm, interleaved so that the machine's load affects them
alike.

Run: ``python bench/bench_auto.py [--repeats N]`` (prints a Markdown table). Timings are
medians over repeats; this machine is shared, so compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from common import machine_line
from meshtune.algorithms.registry import algorithm_names, engine_names
from meshtune.catalog import load_model, load_profile
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions

REPEATS = 5
GOAL = 3.0


def planner(algorithm: str, all_algorithms: bool = False) -> Callable[[], object]:
    """A closure making GPT-3's 256-chip cluster plan with ``algorithm``."""
    model, profile = load_model("gpt3"), load_profile("tpuv4")
    return lambda: make_plan(
        model,
        profile,
        256,
        algorithm=algorithm,
        cluster=ClusterOptions(),
        all_algorithms=all_algorithms,
    )


def main() -> None:
    """Run the measurements and print them as a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs of each (median)")
    repeats = parser.parse_args().repeats
    runs = {
        "meshslice": planner("meshslice"),
        f"auto ({len(engine_names())} algorithms)": planner("auto"),
        f"auto --all-algorithms ({len(algorithm_names())})": planner("auto", True),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(s) for name, s in samples.items()}
    one = medians["meshslice"]
    print(machine_line())
    print()
    print("| plan gpt3 --chips 256 (tpuv4) | median | ratio to one plan | goal |")
    print("|---|---|---|---|")
    for name, seconds in medians.items():
        goal = "-" if name == "meshslice" else f"<= {GOAL:g}x"
        print(f"| {name} | {seconds:.2f} s | {seconds / one:.2f}x | {goal} |")


if __name__ == "__main__":
    main()
