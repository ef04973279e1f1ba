"""Search and start-up speed, as ratios measured in one run (issue 17's goals).

1. ``meshtune plan gpt3 --chips 256`` process / ``python -c "import typer, rich, pydantic,
   numpy"`` process, CPU time, interleaved: goal <= 1.6.
2. In-process cluster search of GPT-3 at 256 TPUv4 chips, CPU per configuration the search
   had to choose among (every legal configuration of every layer it tuned; pruned ones count,
   as they are decided without scalar pricing): goal <= 20 µs.
3. Llama 3.1 405B cluster search at every chip count of :data:`LLAMA_CHIPS`, the slowest:
   goal <= 0.5 s of CPU.
4. Awkward chip counts (6,144 and 24,576) against the slower of the powers of two around them,
   GPT-3 on TPUv4: goal <= 1.
5. ``meshtune compare gpt3 --chips 16,32,64,128,256`` (every algorithm) and ``meshtune plan
   gpt3 --chips 256 --algorithm auto`` processes / the plan process, CPU: goal <= 3 each.

Each row's ratio to its goal is compared with the one recorded in ``bench/recorded_ratios.json``:
a ratio more than :data:`REGRESSION` times its record makes this script exit 1 (a bench
failure, not a test failure). ``--record`` rewrites the records from this run; ``--quick``
skips the slow processes of row 5.

Run: ``python bench/bench_search.py [--quick] [--record]`` (prints a Markdown table for
BENCHMARKS.md). This machine is shared: compare ratios within a run.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import children_cpu, interleaved_walls, machine_line, median_seconds
from meshtune.catalog import load_model, load_profile
from meshtune.search import costing, visit
from meshtune.search.levels import search_cluster

RECORDS = Path(__file__).resolve().parent / "recorded_ratios.json"
REGRESSION = 1.5
FLOOR = "import typer, rich, pydantic, numpy"
PLAN = [sys.executable, "-m", "meshtune", "plan", "gpt3", "--chips", "256"]
COMPARE = [sys.executable, "-m", "meshtune", "compare", "gpt3", "--chips", "16,32,64,128,256"]
LLAMA_CHIPS = (256, 1_000, 6_144, 24_576, 30_720, 55_440, 60_480, 61_440, 65_520, 65_536)
"""Powers of two, awkward counts, and counts with many divisors (30,720 and 61,440 GPUs are
real cluster sizes; 55,440 and 65,520 have 120 divisors, the most of any count up to 65,536,
and 60,480 112): the more DP × PP × TP splits a count has, the longer its search, so "every
chip count" needs the last kind."""
AWKWARD = {6_144: (4_096, 8_192), 24_576: (16_384, 32_768)}


def cpu_walls(commands: list[list[str]], repeats: int) -> list[float]:
    """Median CPU seconds of each command's process, run interleaved."""
    return interleaved_walls(commands, repeats, clock=children_cpu)


def cpu_seconds(func: Callable[[], object], repeats: int) -> float:
    """Median CPU seconds of ``func`` in this process."""
    return median_seconds(func, repeats, clock=time.process_time)


def cluster(model_name: str, chips: int) -> Callable[[], object]:
    """A closure running the default cluster search (TPUv4, batch chips / 2)."""
    model, profile = load_model(model_name), load_profile("tpuv4")
    return lambda: search_cluster(
        model, profile, chips, batch=max(1, chips // 2), seq_len=model.seq_len
    )


def considered_configurations(run: Callable[[], object]) -> int:
    """Legal configurations of every layer of every mesh level the search looked at in ``run``
    (counted in a run of its own, outside the timed ones): those it priced, those its
    array-priced bounds decided without scalar pricing, and those of a layer whose floor
    (``costing.layer_floor``, mesh by mesh here, and every layer of a family's block floors,
    ``visit.BlockFloors``) decided it before they were listed (listed here to count them), each
    (algorithm, layer, mesh) once."""
    counted: set[tuple[object, ...]] = set()
    seen = 0
    real, real_floor = costing.padded_layer, costing.layer_floor

    def count(choice: Any, mesh: Any, algorithm: Any, slice_block: int) -> Any:
        nonlocal seen
        found = real(choice, mesh, algorithm, slice_block)
        key = (algorithm.name, choice.layer, choice.stationary, choice.transposed, mesh)
        if key not in counted:
            counted.add(key)
            seen += len(found[1][0])
        return found

    def floor(algorithm: Any, choice: Any, mesh: Any, profile: Any) -> Any:
        count(choice, mesh, algorithm, profile.slice_block)
        return real_floor(algorithm, choice, mesh, profile)

    def one_by_one(self: Any, algorithm: Any, meshes: Any, micro_batch: int, ep: int = 1) -> Any:
        # the floors a family's meshes get at once, asked mesh by mesh to be counted
        return [self.floor(algorithm, mesh, micro_batch, ep) for mesh in meshes]

    def every_layer(self: Any, algorithm: Any, meshes: Any, micro_batch: int, ep: int) -> Any:
        # the block floors look at every layer of every mesh a family allows at once
        found = real_blocks(self, algorithm, meshes, micro_batch, ep)
        block = self.costing.block(algorithm, micro_batch, ep)
        for mesh, each in zip(meshes, found, strict=True) if found is not None else ():
            for choice in block.layers if each < math.inf else ():
                count(choice, mesh, algorithm, self.costing.profile.slice_block)
        return found

    real_floors, real_blocks = costing.Costing.floors, visit.BlockFloors.of
    costing.padded_layer, costing.layer_floor = count, floor
    costing.Costing.floors = one_by_one  # type: ignore[method-assign]
    visit.BlockFloors.of = every_layer  # type: ignore[method-assign]
    try:
        run()
    finally:
        costing.padded_layer, costing.layer_floor = real, real_floor
        costing.Costing.floors = real_floors  # type: ignore[method-assign]
        visit.BlockFloors.of = real_blocks  # type: ignore[method-assign]
    return seen


def commit() -> str:
    """The checked-out commit, short."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main() -> None:
    """Measure, print the table, compare with the records."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip compare and auto")
    parser.add_argument("--record", action="store_true", help="rewrite the recorded ratios")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, float]] = []  # (name, measured, goal, ratio to goal)

    plan_s, floor_s = cpu_walls([PLAN, [sys.executable, "-c", FLOOR]], repeats=7)
    rows.append(
        (
            "plan process / framework imports (CPU)",
            f"{plan_s * 1e3:.0f} ms / {floor_s * 1e3:.0f} ms = {plan_s / floor_s:.2f}x",
            "1.6x",
            plan_s / floor_s / 1.6,
        )
    )

    gpt3_256 = cluster("gpt3", 256)
    core = cpu_seconds(gpt3_256, repeats=7)
    per = core / considered_configurations(gpt3_256)
    rows.append(
        (
            "cluster search GPT-3 @ 256, CPU per configuration",
            f"{per * 1e6:.1f} µs ({core * 1e3:.0f} ms)",
            "20 µs",
            per / 20e-6,
        )
    )

    llama = {n: cpu_seconds(cluster("llama3-405b", n), repeats=3) for n in LLAMA_CHIPS}
    worst = max(llama, key=llama.__getitem__)
    shown = ", ".join(f"{n:,}: {s * 1e3:.0f}" for n, s in llama.items())
    rows.append(
        (
            "cluster search Llama 3.1 405B, slowest chip count (CPU ms)",
            f"{llama[worst] * 1e3:.0f} ms at {worst:,} ({shown})",
            "500 ms",
            llama[worst] / 0.5,
        )
    )

    for chips, around in AWKWARD.items():
        odd = cpu_seconds(cluster("gpt3", chips), repeats=3)
        even = max(cpu_seconds(cluster("gpt3", n), repeats=3) for n in around)
        rows.append(
            (
                f"cluster search GPT-3 @ {chips:,} / slower of {around[0]:,}, {around[1]:,}",
                f"{odd * 1e3:.0f} ms / {even * 1e3:.0f} ms = {odd / even:.2f}x",
                "1x",
                odd / even,
            )
        )

    if not args.quick:
        compare_s, auto_s, plan2_s = cpu_walls(
            [COMPARE, [*PLAN, "--algorithm", "auto"], PLAN], repeats=3
        )
        slow = (("compare (every algorithm)", compare_s), ("plan --algorithm auto", auto_s))
        for name, cpu in slow:
            rows.append(
                (
                    f"{name} process / plan process (CPU)",
                    f"{cpu * 1e3:.0f} ms / {plan2_s * 1e3:.0f} ms = {cpu / plan2_s:.2f}x",
                    "3x",
                    cpu / plan2_s / 3,
                )
            )

    print(machine_line() + f", commit {commit()}")
    print()
    print("| measurement | measured | goal | ratio to goal |")
    print("|---|---|---|---|")
    for name, measured, goal, ratio in rows:
        print(f"| {name} | {measured} | {goal} | {ratio:.2f} |")

    recorded = json.loads(RECORDS.read_text()) if RECORDS.exists() else {}
    if args.record:
        RECORDS.write_text(
            json.dumps({**recorded, **{name: round(r, 3) for name, _, _, r in rows}}, indent=1)
            + "\n"
        )
        return
    slower = [
        f"{name}: {ratio:.2f} against {recorded[name]:.2f} recorded"
        for name, _, _, ratio in rows
        if name in recorded and ratio > REGRESSION * recorded[name]
    ]
    if slower:
        print(f"\nregressed by more than {REGRESSION}x: " + "; ".join(slower), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
