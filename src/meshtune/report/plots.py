"""PNG figures of a :class:`~meshtune.compare.records.Comparison` (the ``plot`` extra: matplotlib).

One panel per view, in the style of the paper's Figures 9–14 and Tables 2–3, titled with the
model, the profile and the chip counts. matplotlib is imported only here, with the Agg
(file-only) canvas, and the PNG is written atomically.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from meshtune.compare.records import Comparison
from meshtune.errors import printable
from meshtune.io import write_atomic
from meshtune.report.compare_cells import config_label


def _grouped(
    ax: Any,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    ylabel: str,
) -> None:
    """Bars of ``series`` (name -> one value per group) side by side in each group."""
    count = max(len(series), 1)
    width = 0.8 / count
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (count - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [100 * (v or 0.0) for v in values], width, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize="small", rotation=30 if len(groups) > 6 else 0)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")


def _panels(c: Comparison) -> list[tuple[str, Callable[[Any], None]]]:
    """(title, draw function) per view present in ``c``."""
    views: list[tuple[object, str, Callable[[Comparison, Any], None]]] = [
        (c.scaling_points, f"FC FLOP utilization, {c.scaling} scaling (Fig. 9/12)", _scaling),
        (c.breakdown, f"Communication at {c.at_chips} chips (Fig. 10)", _breakdown),
        (c.gemms, f"Distinct GeMMs at {c.at_chips} chips (Fig. 11)", _gemms),
        (c.shapes, f"Mesh shapes at {c.at_chips} chips (Fig. 13)", _shapes),
        (c.slices, f"One configuration for every layer at {c.at_chips} chips (Fig. 14)", _slices),
        (c.dataflow, f"Dataflow optimization at {c.at_chips} chips (Table 2)", _dataflow),
        (c.overlap, f"Overlap at {c.at_chips} chips (Table 3)", _overlap),
    ]
    return [(title, partial(draw, c)) for present, title, draw in views if present]


def _scaling(c: Comparison, ax: Any) -> None:
    """Figures 9 and 12: FC FLOP utilization per chip count, one bar per algorithm."""
    by = {(p.algorithm, p.chips): p.utilization for p in c.scaling_points}
    _grouped(
        ax,
        [str(n) for n in c.chips],
        {a: [by.get((a, n)) for n in c.chips] for a in c.algorithms},
        "FC FLOP utilization (%)",
    )
    ax.set_xlabel("chips")


def _breakdown(c: Comparison, ax: Any) -> None:
    """Figure 10: launch, sync and transfer time relative to compute, stacked per algorithm."""
    rows = [b for b in c.breakdown if b.breakdown]
    bottom = [0.0] * len(rows)
    for part in ("launch_s", "sync_s", "transfer_s"):
        values = [
            getattr(b.breakdown, part) / b.breakdown.compute_s
            if b.breakdown and b.breakdown.compute_s
            else 0.0
            for b in rows
        ]
        ax.bar([b.algorithm for b in rows], values, bottom=bottom, label=part[:-2])
        bottom = [x + y for x, y in zip(bottom, values, strict=True)]
    ax.axhline(1.0, color="0.4", linewidth=0.8, linestyle="--")
    ax.set_ylabel("communication / compute")
    ax.legend(fontsize="small")


def _gemms(c: Comparison, ax: Any) -> None:
    """Figure 11: FLOP utilization per distinct GeMM, one bar per algorithm."""
    labels = [f"{g.m}×{g.n}×{g.k}" for g in c.gemms]
    by = {(e.algorithm, i): e.utilization for i, g in enumerate(c.gemms) for e in g.entries}
    _grouped(
        ax,
        labels,
        {a: [by.get((a, i)) for i in range(len(c.gemms))] for a in c.algorithms},
        "FLOP utilization (%)",
    )


def _shapes(c: Comparison, ax: Any) -> None:
    """Figure 13: FC FLOP utilization per mesh shape, one bar per algorithm."""
    meshes = list(dict.fromkeys(s.mesh for s in c.shapes))
    by = {(s.algorithm, s.mesh): s.utilization for s in c.shapes}
    _grouped(
        ax,
        meshes,
        {a: [by.get((a, m)) for m in meshes] for a in c.algorithms},
        "FC FLOP utilization (%)",
    )


def _slices(c: Comparison, ax: Any) -> None:
    """Figure 14: FC FLOP utilization per configuration, one line per algorithm with several."""
    for a in c.algorithms:
        rows = [s for s in c.slices if s.algorithm == a and s.config is not None]
        if len(rows) > 1:
            ax.plot(
                [config_label(s.config) for s in rows],
                [100 * s.utilization for s in rows],
                marker="o",
                label=f"{a} ({rows[0].mesh})",
            )
    ax.set_ylabel("FC FLOP utilization (%)")
    ax.legend(fontsize="small")


def _dataflow(c: Comparison, ax: Any) -> None:
    """Table 2: Y-stationary against the optimized dataflow, per algorithm."""
    _grouped(
        ax,
        [d.algorithm for d in c.dataflow],
        {
            "Y-stationary": [d.unoptimized_utilization for d in c.dataflow],
            "optimized": [d.optimized_utilization for d in c.dataflow],
        },
        "FC FLOP utilization (%)",
    )


def _overlap(c: Comparison, ax: Any) -> None:
    """Table 3: utilization as run, retuned and with every kind overlapped, per algorithm."""
    _grouped(
        ax,
        [o.algorithm for o in c.overlap],
        {
            "as run": [o.as_tuned_utilization for o in c.overlap],
            "retuned": [o.retuned_utilization for o in c.overlap],
            "all overlapped": [o.overlapped_utilization for o in c.overlap],
        },
        "FC FLOP utilization (%)",
    )


def write_comparison_plot(c: Comparison, path: Path, *, force: bool = False) -> None:
    """Save one PNG with a panel per view of ``c``; refuses an existing ``path`` unless
    ``force`` (atomic write)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = _panels(c)
    figure = Figure(figsize=(8.0, 3.2 * max(len(panels), 1)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(max(len(panels), 1), 1, squeeze=False)[:, 0]
    for ax, (title, draw) in zip(axes, panels, strict=False):
        draw(ax)
        ax.set_title(title, fontsize="medium")
    chips = ", ".join(map(str, c.chips))
    figure.suptitle(
        f"{printable(c.display_name)} on {printable(c.profile)}, chips {chips}"
        + ("" if c.batch is None else f", batch {c.batch}")
    )
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    write_atomic(path, buffer.getvalue(), force=force)
