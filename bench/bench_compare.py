"""`meshtune compare` speed against `meshtune plan`, as ratios measured in one run (issue 7).

Goal: the whole ``meshtune compare gpt3 --chips 16,32,64,128,256`` process within 3× the
``meshtune plan gpt3 --chips 256`` process. The processes run interleaved, so machine noise hits
both alike; medians over repeats. Also reported: the same comparison with every view
(``--view all``), and the library call alone (no process start-up, no rendering).

Run: ``python bench/bench_compare.py`` (prints a Markdown table for BENCHMARKS.md).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence

from common import interleaved_walls, machine_line
from meshtune.compare import VIEWS, View, compare_models
from meshtune.specs import load_model, load_profile

CHIPS = "16,32,64,128,256"
GOAL = 3.0
# The algorithms of the paper's evaluation (§4.2, §4.3), the ones issue 7 registered.
ISSUE7 = "meshslice,collective,wang,summa,cannon,1d_tp,fsdp"


def library_seconds(views: Sequence[View], repeats: int) -> float:
    """Median time of ``compare_models`` for GPT-3 over :data:`CHIPS` with ``views``."""
    model, profile = load_model("gpt3"), load_profile("tpuv4")
    sizes = [int(c) for c in CHIPS.split(",")]
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        compare_models(model, profile, sizes, views=views)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    """Measure and print the Markdown table."""
    meshtune = [sys.executable, "-m", "meshtune"]
    plan_s, compare_s, all_s, baselines_s = interleaved_walls(
        [
            [*meshtune, "plan", "gpt3", "--chips", "256"],
            [*meshtune, "compare", "gpt3", "--chips", CHIPS],
            [*meshtune, "compare", "gpt3", "--chips", CHIPS, "--view", "all"],
            [*meshtune, "compare", "gpt3", "--chips", CHIPS, "--algorithms", ISSUE7],
        ],
        repeats=11,
    )
    lib_scaling = library_seconds(("scaling",), repeats=11)
    lib_all = library_seconds(VIEWS, repeats=5)
    print(machine_line())
    print()
    print("| measurement | median | goal | ratio to goal |")
    print("|---|---|---|---|")
    print(
        f"| `meshtune compare gpt3 --chips {CHIPS}` process / `meshtune plan gpt3 --chips 256` "
        f"process | {compare_s * 1e3:.0f} ms / {plan_s * 1e3:.0f} ms = {compare_s / plan_s:.2f}x "
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
    print(f"| `compare_models` library call, scaling view | {lib_scaling * 1e3:.1f} ms | - | - |")
    print(f"| `compare_models` library call, every view | {lib_all * 1e3:.1f} ms | - | - |")


if __name__ == "__main__":
    main()
