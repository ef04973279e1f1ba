"""Cluster-search speed, as ratios measured in one run (issue 10's goals).

1. The full cluster search (every DP × PP × P_r × P_c factorization, micro-batch counts, every
   valid S per layer, memory checks) for Llama 3.1 405B at 65,536 TPUv4 chips: goal <= 0.5 s.
2. The ``meshtune plan gpt3`` process at 65,536 chips versus the same at 256 chips,
   interleaved in the same run: goal <= 2x.

Run: ``python bench/bench_cluster.py`` (prints a Markdown table for BENCHMARKS.md). Timings are
medians over repeats; this machine is shared, so compare ratios, not absolute numbers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from common import interleaved_walls, machine_line, median_seconds
from meshtune.catalog import load_model, load_profile
from meshtune.search.levels import search_cluster


def cluster_search(chips: int, model_name: str) -> Callable[[], object]:
    """A closure running the cluster search for ``model_name`` at ``chips`` (batch chips / 2)."""
    model, profile = load_model(model_name), load_profile("tpuv4")
    return lambda: search_cluster(
        model, profile, chips, batch=max(1, chips // 2), seq_len=model.seq_len
    )


def process_walls(repeats: int) -> tuple[float, float]:
    """Median walls of ``meshtune plan gpt3`` at 65,536 and at 256 chips, interleaved."""
    cmds = [
        [sys.executable, "-m", "meshtune", "plan", "gpt3", "--chips", str(n)] for n in (65_536, 256)
    ]
    big, small = interleaved_walls(cmds, repeats)
    return big, small


def main() -> None:
    """Run the measurements and print them as a Markdown table."""
    llama = median_seconds(cluster_search(65_536, "llama3-405b"), repeats=7)
    gpt3 = median_seconds(cluster_search(65_536, "gpt3"), repeats=7)
    gpt3_256 = median_seconds(cluster_search(256, "gpt3"), repeats=7)
    big, small = process_walls(repeats=9)
    print(machine_line())
    print()
    print("| measurement | median | goal | ratio to goal |")
    print("|---|---|---|---|")
    print(
        f"| cluster search, Llama 3.1 405B @ 65,536 chips | {llama * 1e3:.0f} ms | 500 ms | "
        f"{llama / 0.5:.2f} |"
    )
    print(f"| cluster search, GPT-3 @ 65,536 chips | {gpt3 * 1e3:.0f} ms | - | - |")
    print(f"| cluster search, GPT-3 @ 256 chips | {gpt3_256 * 1e3:.0f} ms | - | - |")
    print(
        f"| `meshtune plan gpt3` process, 65,536 / 256 chips | {big * 1e3:.0f} ms / "
        f"{small * 1e3:.0f} ms = {big / small:.2f}x | 2x | {big / small / 2:.2f} |"
    )


if __name__ == "__main__":
    main()
