"""Draw a trace-event JSON file (``meshtune timeline -o``) track by track, as Perfetto shows it.

Usage: ``python docs/trace_png.py trace.json out.png``. Needs matplotlib (the ``plot`` extra).
Perfetto itself is a browser application; this draws the same tracks (one row per process and
thread, one bar per ``X`` event) for a picture that lives in the repository.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"gemm": "#4caf50", "all_gather": "#2196f3", "reduce_scatter": "#e040fb"}


def main(trace_path: str, out_path: str) -> None:
    events = json.loads(Path(trace_path).read_text(encoding="utf-8"))["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    layers = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    rows = sorted(names)
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(rows) + 1.4))
    for y, key in enumerate(rows):
        for e in events:
            if e["ph"] == "X" and (e["pid"], e["tid"]) == key:
                kind = e["cat"].split(",")[1]
                ax.barh(
                    y, e["dur"] / 1e3, left=e["ts"] / 1e3, color=COLORS[kind], edgecolor="white"
                )
                if e["dur"] / 1e3 > 0.25:
                    label = e["name"].split("[")[1].rstrip("]")
                    ax.text(
                        (e["ts"] + e["dur"] / 2) / 1e3,
                        y,
                        label,
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white",
                    )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{layers[p]}: {names[(p, t)]}" for p, t in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms); labels are loop iterations s")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(
        handles,
        ["GeMM", "all-gather", "reduce-scatter"],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
    )
    starts: dict[str, float] = {}
    for e in events:
        if e["ph"] == "X":
            name = e["args"]["pass"].replace("_", " ")
            starts[name] = min(starts.get(name, float("inf")), e["ts"] / 1e3)
    for name, start in starts.items():
        ax.axvline(start, color="grey", linewidth=0.6, linestyle=":")
        ax.text(start, -0.75, name, fontsize=8, va="bottom")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:])
