"""Terminal rendering of a :class:`~meshtune.compare.gemm.GemmStudy` (``meshtune gemm``): every
algorithm at its best on one GeMM, its breakdown, and the ranking of every configuration tried."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from meshtune.compare.gemm import GemmStudy
from meshtune.report.compare_cells import (
    bar_chart,
    breakdown_tables,
    config_label,
    flow_label,
    fmt_bytes,
    ftime,
    notes,
    pct,
    signed_pct,
    table,
    time_or_dash,
    transposed_note,
)


def render_gemm(study: GemmStudy, *, ascii_only: bool = False) -> RenderableType:
    """One GeMM: every algorithm's best mesh, dataflow and configuration, and its breakdown."""
    head = Text()
    head.append(f"C({study.m}×{study.n}) = A({study.m}×{study.k})·B({study.k}×{study.n})")
    head.append(f" on {study.chips} chips ({study.profile}), {study.flops:,} FLOPs", style="bold")
    if study.label:
        head.append(f"\nfrom: {study.label}", style="dim")
    if study.dp > 1:
        head.append(
            f"\ndata parallelism: {study.dp} replicas of a {study.chips // study.dp}-chip mesh, "
            f"{study.m // study.dp} rows each; the weight gradient is reduced across them",
            style="dim",
        )
    main = table(
        f"Each algorithm at its best mesh, dataflow and configuration "
        f"(+% = how much faster {study.reference} is)",
        "algorithm",
        "mesh",
        "dataflow",
        "config",
        "time",
        "FLOP util",
        "+%",
        left=4,
    )
    reasons: list[tuple[str, str]] = []
    for e in study.entries:
        if e.reason is not None:
            reasons.append((e.algorithm, e.reason))
            main.add_row(e.algorithm, "infeasible", "-", "-", "-", "-", "-")
            continue
        main.add_row(
            e.algorithm,
            e.mesh or "-",
            flow_label(e.dataflow, e.transposed, ascii_only),
            e.layout or config_label(e.config),
            time_or_dash(e.time_s),
            pct(e.utilization),
            signed_pct(e.speedup_of_reference),
        )
    rows = [
        (e.algorithm, e.mesh or "-", e.breakdown) for e in study.entries if e.breakdown is not None
    ]
    chart = bar_chart(
        "FLOP utilization",
        [(e.algorithm, e.utilization) for e in study.entries],
        ascii_only=ascii_only,
    )
    return Group(
        head,
        main,
        Text(transposed_note(ascii_only), style="dim"),
        *(breakdown_tables(rows, "This GeMM") if rows else []),
        chart,
        *([ranking_table(study, ascii_only)] if study.ranking else []),
        *notes(reasons),
    )


SHOWN_RANKED = 100
"""The most configurations the ranking table prints (rendering is the slow part of a ranking
of hundreds)."""


def ranking_table(study: GemmStudy, ascii_only: bool) -> Table:
    """Every configuration tried, fastest first (the fastest :data:`SHOWN_RANKED`; the JSON
    has more), with the bytes over the busiest link."""
    rows = study.ranking[:SHOWN_RANKED]
    count = f"{len(rows)}"
    if len(rows) < study.ranked:
        listed = f"; --json lists {len(study.ranking)}" if len(study.ranking) > len(rows) else ""
        count = f"the fastest {len(rows)} of {study.ranked:,}{listed}"
    ranked = table(
        f"Every configuration, fastest first ({count})",
        "#",
        "algorithm",
        "mesh",
        "dataflow",
        "configuration",
        "time",
        "FLOP util",
        "bytes/link (axis 0 / axis 1)",
        left=5,
    )
    for r in rows:
        ranked.add_row(
            str(r.rank),
            r.algorithm,
            r.mesh,
            flow_label(r.dataflow, r.transposed, ascii_only),
            r.layout,
            ftime(r.time_s),
            pct(r.utilization),
            " / ".join(fmt_bytes(b) for b in r.link_bytes[:2]),
        )
    return ranked
