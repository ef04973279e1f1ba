"""Planner speed, as ratios measured in one run (issue 2's goals).

1. Search core for GPT-3 at 256 chips (phase 1 + phase 2, no I/O): goal <= 20 ms.
2. Search core for GPT-3 at 65,536 chips: goal <= 0.5 s.
3. Whole process ``meshtune plan gpt3 --chips 256`` versus ``python -c "import numpy"`` in the
   same run, interleaved: goal <= 2x.

4. With ``--before SRC`` (the ``src`` folder of an older checkout, e.g. ``git worktree add
   /tmp/base COMMIT``): the same plan process run by that code, interleaved with the others
   (issue 19: the step model keeps the default plan within 1.5x of its time before).

Run: ``python bench/bench_plan.py [--before OLD/src] [--cpu]`` (prints a Markdown table for
BENCHMARKS.md; ``--cpu`` times the processes on CPU, what a loaded machine disturbs least).
Timings are medians over repeats; this machine is shared, so compare ratios, not absolute
numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from common import children_cpu, interleaved_walls, machine_line, median_seconds
from meshtune.catalog import load_model, load_profile
from meshtune.model.layers import fc_layers
from meshtune.search import search

FLOOR_PROGRAM = """
import typer, rich.console, rich.table
from pydantic import BaseModel
class Probe(BaseModel):
    x: int
Probe(x=1)
"""


def search_core(chips: int, model_name: str = "gpt3") -> Callable[[], object]:
    """A closure running phase 1 + phase 2 for ``model_name`` at ``chips`` (weak scaling)."""
    model, profile = load_model(model_name), load_profile("tpuv4")
    layers = fc_layers(model, max(1, chips // 2), model.seq_len)
    return lambda: search(layers, profile, chips, blocks=model.blocks)


PLAN_ARGS = ["-m", "meshtune", "plan", "gpt3", "--chips", "256"]


def process_walls(
    repeats: int, before: Path | None = None, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    """Median walls of the plan process, ``import numpy`` and the bare framework imports.

    The third process is the smallest typer + rich + pydantic program that defines and
    validates one model: the floor under any CLI built on the project's required stack. The
    three (four with ``before``: the plan process of that ``src`` folder) run interleaved.
    """
    cmds = [
        [sys.executable, *PLAN_ARGS],
        [sys.executable, "-c", "import numpy"],
        [sys.executable, "-c", FLOOR_PROGRAM],
    ]
    if before is not None:
        cmds.append(["env", f"PYTHONPATH={before.resolve()}", sys.executable, *PLAN_ARGS])
    return interleaved_walls(cmds, repeats, clock=clock)


def main() -> None:
    """Run the measurements and print them as a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="src folder of the code to compare with")
    parser.add_argument(
        "--cpu", action="store_true", help="time the processes on CPU, not wall (a loaded machine)"
    )
    args = parser.parse_args()
    before = args.before
    core_256 = median_seconds(search_core(256), repeats=50)
    core_64k = median_seconds(search_core(65_536), repeats=5)
    # Llama 3.1 405B keeps the most shapes feasible at 65,536 chips of the shipped models.
    core_64k_405b = median_seconds(search_core(65_536, "llama3-405b"), repeats=5)
    clock = children_cpu if args.cpu else time.perf_counter
    plan_s, numpy_s, floor_s, *old = process_walls(repeats=15, before=before, clock=clock)
    print(machine_line() + (", processes timed on CPU" if args.cpu else ""))
    print()
    print("| measurement | median | goal | ratio to goal |")
    print("|---|---|---|---|")
    print(
        f"| search core, GPT-3 @ 256 chips | {core_256 * 1e3:.2f} ms | 20 ms | "
        f"{core_256 / 0.020:.2f} |"
    )
    print(
        f"| search core, GPT-3 @ 65,536 chips | {core_64k * 1e3:.1f} ms | 500 ms | "
        f"{core_64k / 0.5:.2f} |"
    )
    print(
        f"| search core, Llama 3.1 405B @ 65,536 chips | {core_64k_405b * 1e3:.1f} ms | 500 ms | "
        f"{core_64k_405b / 0.5:.3f} |"
    )
    print(
        f"| `meshtune plan gpt3 --chips 256` process / `import numpy` process | "
        f"{plan_s * 1e3:.0f} ms / {numpy_s * 1e3:.0f} ms = {plan_s / numpy_s:.2f}x | 2x | "
        f"{plan_s / numpy_s / 2:.2f} |"
    )
    print(
        f"| floor: minimal typer + rich + pydantic program / `import numpy` process | "
        f"{floor_s * 1e3:.0f} ms / {numpy_s * 1e3:.0f} ms = {floor_s / numpy_s:.2f}x | - | - |"
    )
    if old:
        print(
            f"| `meshtune plan gpt3 --chips 256` process / the same with `{before}` | "
            f"{plan_s * 1e3:.0f} ms / {old[0] * 1e3:.0f} ms = {plan_s / old[0]:.2f}x | 1.5x | "
            f"{plan_s / old[0] / 1.5:.2f} |"
        )


if __name__ == "__main__":
    main()
