"""``meshtune calibrate`` speed, as ratios measured in one run (issue 16's goals).

1. CPU of the ``meshtune calibrate LOGS --pool`` process on the published logs, against the
   ``meshtune --version`` process, interleaved: goal <= 2x.
2. CPU and peak memory of ``meshtune calibrate`` on a synthetic nccl-tests log of N rows (an
   all_gather table repeated, written once to a temporary folder, never kept): goal <= 2 s and
   <= 200 MiB at 1,000,000 rows. The fitted t_launch and bw are printed against the log's
   true 40 µs and 200 GB/s (the same fit as the rows one by one is a test:
   ``tests/calibrate/test_large_logs.py``).

Run: ``python bench/bench_calibrate.py [LOGS] [ROWS] [OLD_SRC]`` (defaults ``../shared/logs``,
1,000,000; prints a Markdown table for BENCHMARKS.md). With ``OLD_SRC``, the ``src`` folder of
an earlier checkout (``git archive REV src | tar -x -C DIR``), its ``calibrate`` process runs
interleaved with today's (``PYTHONPATH=OLD_SRC``) and the table gives their ratio too. CPU is
the child's user + system time (``resource.getrusage``), less sensitive to the shared
machine's load than wall time; medians over repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import machine_line

HEADER = """# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) iters: 20
#  Rank  0 Group  0 Pid 1 on node01 device  0 [0x07] Example GPU
#  Rank  1 Group  0 Pid 1 on node01 device  1 [0x07] Example GPU
#  Rank  2 Group  0 Pid 1 on node01 device  2 [0x07] Example GPU
#  Rank  3 Group  0 Pid 1 on node01 device  3 [0x07] Example GPU
#  Rank  4 Group  0 Pid 1 on node01 device  4 [0x07] Example GPU
#  Rank  5 Group  0 Pid 1 on node01 device  5 [0x07] Example GPU
#  Rank  6 Group  0 Pid 1 on node01 device  6 [0x07] Example GPU
#  Rank  7 Group  0 Pid 1 on node01 device  7 [0x07] Example GPU
#       size    count   type  redop  root   time  algbw  busbw #wrong   time  algbw  busbw #wrong
#        (B) (elements)                     (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)
"""


def large_log(folder: Path, rows: int) -> Path:
    """An all_gather_perf log of ``rows`` rows: 8 ranks, 40 µs + 7·(size/8) / 200 GB/s,
    written in blocks (this process stays small: a child's peak RSS counts what a fork
    copies of it)."""
    path = folder / "all_gather_perf_large.log"
    with path.open("w", encoding="utf-8") as handle:
        handle.write(HEADER)
        for start in range(0, rows, 10_000):
            lines = []
            for i in range(start, min(rows, start + 10_000)):
                size = 8192 * 2 ** (i % 17)
                us = 40 + 7 * size / 8 / 200e9 * 1e6 * (1 + 0.01 * ((i * 7919) % 11 - 5) / 5)
                algbw = size / us / 1e3
                lines.append(
                    f"{size:12d} {size // 4:10d}  float   none    -1 {us:8.2f} {algbw:6.2f} "
                    f"{algbw * 7 / 8:6.2f}      0 {us:8.2f} {algbw:6.2f} "
                    f"{algbw * 7 / 8:6.2f}      0\n"
                )
            handle.write("".join(lines))
    return path


def child_cpu(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(CPU seconds, peak RSS MiB, stdout) of one run of ``cmd``; the RSS is the largest of any
    child so far, so the largest command is measured last."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, after.ru_maxrss / 1024, done.stdout


def main() -> None:
    """Run the measurements and print them as a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("logs", nargs="?", default="../shared/logs", help="published logs")
    parser.add_argument("rows", nargs="?", type=int, default=1_000_000, help="synthetic rows")
    parser.add_argument("old_src", nargs="?", default=None, help="an earlier checkout's src")
    args = parser.parse_args()
    logs, rows, old_src = args.logs, args.rows, args.old_src
    meshtune = [sys.executable, "-m", "meshtune"]
    version: list[float] = []
    calibrate: list[float] = []
    earlier: list[float] = []
    for _ in range(5):
        version.append(child_cpu([*meshtune, "--version"])[0])
        calibrate.append(child_cpu([*meshtune, "calibrate", logs, "--pool"])[0])
        if old_src is not None:
            env = {**os.environ, "PYTHONPATH": old_src}
            earlier.append(child_cpu([*meshtune, "calibrate", logs, "--pool"], env)[0])
    small, base = statistics.median(calibrate), statistics.median(version)
    with tempfile.TemporaryDirectory() as tmp:
        path = large_log(Path(tmp), rows)
        cpu, rss, out = child_cpu([*meshtune, "calibrate", str(path), "--json"])
    fit = json.loads(out)["fits"][0]
    t_launch, bw = fit["t_launch_s"], fit["bw_bytes_per_s"]
    print(machine_line())
    print("| measurement | CPU | goal | ratio to goal |")
    print("|---|---|---|---|")
    print(
        f"| `calibrate {logs} --pool` / `--version` process | {small:.2f} s / {base:.2f} s = "
        f"{small / base:.2f}x | 2x | {small / base / 2:.2f} |"
    )
    if earlier:
        before = statistics.median(earlier)
        print(
            f"| the same, today / `{old_src}` | {small:.2f} s / {before:.2f} s = "
            f"{small / before:.2f}x | - | - |"
        )
    print(f"| `calibrate` on a {rows:,}-row nccl-tests log | {cpu:.2f} s | 2 s | {cpu / 2:.2f} |")
    print(f"| peak memory, same run | {rss:.0f} MiB | 200 MiB | {rss / 200:.2f} |")
    print(
        f"| its fit: t_launch, bw (true 40 µs, 200 GB/s) | {t_launch * 1e6:.4f} µs, "
        f"{bw / 1e9:.3f} GB/s | - | - |"
    )


if __name__ == "__main__":
    main()
