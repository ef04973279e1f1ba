"""PNG figures of a :class:`~meshtune.compare.records.Comparison` (the ``plot`` extra: matplotlib).

One panel per view, in the style of the paper's Figures 9–14 and Tables 2–3, titled with the
model, the profile and the chip counts. matplotlib is imported only here, with the Agg
(file-only) canvas, and the PNG is written atomically.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from meshtune.compare.records import Comparison
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


def _panels(c: Comparison) -> list[tuple[str, Any]]:
    """(title, draw function) per view present in ``c``."""
    names = c.algorithms
    panels: list[tuple[str, Any]] = []
    if c.scaling_points:
        chips = [str(n) for n in c.chips]

        def scaling(ax: Any) -> None:
            by = {(p.algorithm, p.chips): p.utilization for p in c.scaling_points}
            _grouped(
                ax,
                chips,
                {a: [by.get((a, n)) for n in c.chips] for a in names},
                "FC FLOP utilization (%)",
            )
            ax.set_xlabel("chips")

        panels.append((f"FC FLOP utilization, {c.scaling} scaling (Fig. 9/12)", scaling))
    if c.breakdown:

        def breakdown(ax: Any) -> None:
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

        panels.append((f"Communication at {c.at_chips} chips (Fig. 10)", breakdown))
    if c.gemms:

        def gemms(ax: Any) -> None:
            labels = [f"{g.m}×{g.n}×{g.k}" for g in c.gemms]
            by = {(e.algorithm, i): e.utilization for i, g in enumerate(c.gemms) for e in g.entries}
            _grouped(
                ax,
                labels,
                {a: [by.get((a, i)) for i in range(len(c.gemms))] for a in names},
                "FLOP utilization (%)",
            )

        panels.append((f"Distinct GeMMs at {c.at_chips} chips (Fig. 11)", gemms))
    if c.shapes:

        def shapes(ax: Any) -> None:
            meshes = list(dict.fromkeys(s.mesh for s in c.shapes))
            by = {(s.algorithm, s.mesh): s.utilization for s in c.shapes}
            _grouped(
                ax,
                meshes,
                {a: [by.get((a, m)) for m in meshes] for a in names},
                "FC FLOP utilization (%)",
            )

        panels.append((f"Mesh shapes at {c.at_chips} chips (Fig. 13)", shapes))
    if c.slices:

        def slices(ax: Any) -> None:
            for a in names:
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

        panels.append(
            (f"One configuration for every layer at {c.at_chips} chips (Fig. 14)", slices)
        )
    if c.dataflow:

        def dataflow(ax: Any) -> None:
            _grouped(
                ax,
                [d.algorithm for d in c.dataflow],
                {
                    "Y-stationary": [d.unoptimized_utilization for d in c.dataflow],
                    "optimized": [d.optimized_utilization for d in c.dataflow],
                },
                "FC FLOP utilization (%)",
            )

        panels.append((f"Dataflow optimization at {c.at_chips} chips (Table 2)", dataflow))
    if c.overlap:

        def overlap(ax: Any) -> None:
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

        panels.append((f"Overlap at {c.at_chips} chips (Table 3)", overlap))
    return panels


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
    figure.suptitle(
        f"{c.display_name} on {c.profile}, chips {', '.join(map(str, c.chips))}"
        + ("" if c.batch is None else f", batch {c.batch}")
    )
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    write_atomic(path, buffer.getvalue(), force=force)
