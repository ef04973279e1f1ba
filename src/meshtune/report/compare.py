"""Terminal rendering of :mod:`meshtune.compare` results: tables and in-terminal bar charts.

Every column folds long values instead of cutting them, so a narrow (80-column) pipe shows every
number in full. Bars are drawn with block characters, or with ``#`` and ``.`` when the terminal
cannot encode them (``ascii_only``).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from meshtune.algorithms.registry import REGISTRY
from meshtune.compare.breakdown import Breakdown
from meshtune.compare.gemm import GemmStudy
from meshtune.compare.records import Comparison
from meshtune.cost.config import Config
from meshtune.report.plan import fmt_time

BAR_WIDTH = 30


def table(title: str, *headers: str, left: int = 1) -> Table:
    """A table whose first ``left`` columns are left-aligned and every column folds.

    No outer edge, and a column named ``algorithm`` keeps room for every registered name.
    """
    out = Table(title=escape(title), show_edge=False)
    widest = max(len(name) for name in REGISTRY)
    for i, header in enumerate(headers):
        out.add_column(
            header,
            justify="left" if i < left else "right",
            overflow="fold",
            min_width=widest if header == "algorithm" else None,
        )
    return out


def pct(value: float | None) -> str:
    """``60.2%``, or ``-`` when unknown."""
    return "-" if value is None else f"{value:.1%}"


def signed_pct(value: float | None) -> str:
    """``+13.8%``, or ``-`` when unknown."""
    return "-" if value is None else f"{value:+.1%}"


def ftime(seconds: float) -> str:
    """:func:`fmt_time`, with rounding noise below a picosecond shown as 0."""
    return fmt_time(seconds if abs(seconds) >= 1e-12 else 0.0)


def time_or_dash(seconds: float | None) -> str:
    """:func:`ftime`, or ``-`` when unknown."""
    return "-" if seconds is None else ftime(seconds)


def fmt_bytes(count: int) -> str:
    """Bytes with a decimal unit and 3 significant digits (``126 GB``)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count} B"


def config_label(config: dict[str, int] | None) -> str:
    """``S=4`` for ``{"slices": 4}``; ``per layer`` for ``None`` (each layer its own)."""
    return "per layer" if config is None else Config.of(**config).label


def configs_label(configs: dict[str, dict[str, int]] | None) -> str:
    """The configurations of a block's layers, in layer order."""
    if not configs:
        return "-"
    return " ".join(Config.of(**c).label for c in configs.values())


def flow_label(dataflow: str | None, transposed: bool | None, ascii_only: bool) -> str:
    """``OS``, ``OSᵀ`` for the transposed variant (``OS(T)`` on an ASCII terminal)."""
    if dataflow is None:
        return "-"
    return dataflow + (("(T)" if ascii_only else "ᵀ") if transposed else "")


def transposed_note(ascii_only: bool) -> str:
    """The footnote explaining :func:`flow_label`'s mark."""
    mark = "(T)" if ascii_only else "ᵀ"
    return f"{mark}: the transposed dataflow (the same computation on the transposed mesh)"


def bar_chart(
    title: str, rows: Sequence[tuple[str, float | None]], *, ascii_only: bool = False
) -> Text:
    """One horizontal bar per row, scaled to the largest value; values printed as percentages."""
    full, empty = ("#", ".") if ascii_only else ("█", "░")
    top = max((v for _, v in rows if v is not None), default=0.0) or 1.0
    width = max((len(label) for label, _ in rows), default=0)
    text = Text(title + "\n", style="bold")
    for label, value in rows:
        if value is None:
            text.append(f"{label:<{width}} (infeasible)\n")
            continue
        filled = round(BAR_WIDTH * value / top)
        text.append(f"{label:<{width}} ")
        text.append(full * filled, style="green")
        text.append(empty * (BAR_WIDTH - filled), style="dim")
        text.append(f" {value:.1%}\n")
    return text


def breakdown_tables(rows: Sequence[tuple[str, str, Breakdown]], title: str) -> list[Table]:
    """Figure 10's split (communication relative to compute) and the schedule and traffic."""
    comm = table(
        f"{title}: communication (overlapped or not) relative to compute (Figure 10)",
        "algorithm",
        "mesh",
        "compute",
        "launch",
        "sync",
        "transfer",
        "comm/compute",
        left=2,
    )
    schedule = table(
        f"{title}: schedule and traffic (bytes per link: axis 0 / axis 1 / axis 2 if any; "
        "= their sum, the traffic per chip)",
        "algorithm",
        "prologue",
        "steady",
        "epilogue",
        "exposed",
        "hidden",
        "bytes/link",
    )
    for name, mesh, b in rows:
        ratio = b.comm_s / b.compute_s if b.compute_s else 0.0
        comm.add_row(
            name,
            mesh,
            ftime(b.compute_s),
            ftime(b.launch_s),
            ftime(b.sync_s),
            ftime(b.transfer_s),
            f"{ratio:.2f}",
        )
        moved = [fmt_bytes(x) for x in b.link_bytes[:2]]
        moved += [fmt_bytes(x) for x in b.link_bytes[2:] if x]
        schedule.add_row(
            name,
            ftime(b.prologue_s),
            ftime(b.steady_s),
            ftime(b.epilogue_s),
            ftime(b.exposed_s),
            ftime(b.hidden_s),
            " / ".join(moved) + f" = {fmt_bytes(sum(b.link_bytes))}",
        )
    return [comm, schedule]


def _notes(reasons: Sequence[tuple[str, str]]) -> list[RenderableType]:
    if not reasons:
        return []
    lines = [f"note: {escape(who)} infeasible: {escape(why)}" for who, why in reasons]
    return [Text("\n".join(lines), style="yellow")]


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
        *_notes(reasons),
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


def _scaling(c: Comparison, ascii_only: bool) -> list[RenderableType]:
    main = table(
        f"FC layers per training step, {c.scaling} scaling (Figures 9 and 12); "
        f"+% = how much faster {c.reference} is (FC only / end to end)",
        "chips",
        "algorithm",
        "mesh",
        "FC time",
        "FC util",
        "FC +%",
        "step",
        "e2e +%",
        left=0,
    )
    main.columns[1].justify = "left"
    reasons = []
    for p in c.scaling_points:
        if p.reason is not None:
            reasons.append((f"{p.algorithm} at {p.chips} chips", p.reason))
        main.add_row(
            str(p.chips),
            p.algorithm,
            p.mesh or "infeasible",
            time_or_dash(p.fc_time_s),
            pct(p.utilization),
            signed_pct(p.fc_speedup_of_reference),
            time_or_dash(p.step_time_s),
            signed_pct(p.step_speedup_of_reference),
        )
    chart = bar_chart(
        "FC FLOP utilization",
        [(f"{p.chips:>6} {p.algorithm}", p.utilization) for p in c.scaling_points],
        ascii_only=ascii_only,
    )
    parts: list[RenderableType] = [main, chart]
    if c.nonfc_note:
        parts.append(Text(f"note: {escape(c.nonfc_note)}", style="yellow"))
    return parts + _notes(reasons)


def _breakdown(c: Comparison) -> list[RenderableType]:
    rows = [(b.algorithm, b.mesh or "-", b.breakdown) for b in c.breakdown if b.breakdown]
    reasons = [(b.algorithm, b.reason) for b in c.breakdown if b.reason]
    if not rows:
        return _notes(reasons)
    return [*breakdown_tables(rows, f"FC time of one step at {c.at_chips} chips"), *_notes(reasons)]


def _gemms(c: Comparison, ascii_only: bool) -> list[RenderableType]:
    main = table(
        f"The model's distinct GeMMs at {c.at_chips} chips, each algorithm at its best mesh "
        f"for the GeMM alone (Figure 11); +% = how much faster {c.reference} is",
        "GeMM",
        "algorithm",
        "mesh",
        "dataflow",
        "config",
        "FLOP util",
        "+%",
        left=5,
    )
    sources = []
    for i, study in enumerate(c.gemms, start=1):
        sources.append(f"GeMM {i} ({study.m}×{study.n}×{study.k}): {study.label}")
        for j, e in enumerate(study.entries):
            main.add_row(
                str(i) if j == 0 else "",
                e.algorithm,
                e.mesh or "infeasible",
                flow_label(e.dataflow, e.transposed, ascii_only),
                config_label(e.config) if e.config is not None else "-",
                pct(e.utilization),
                signed_pct(e.speedup_of_reference),
                end_section=j == len(study.entries) - 1,
            )
    mean = ", ".join(f"{signed_pct(v)} over {name}" for name, v in c.gemms_mean_speedup.items())
    text = Text(
        escape(f"{c.reference} on average: {mean}\n" + "\n".join(sources) + "\n")
        + transposed_note(ascii_only),
        style="dim",
    )
    return [main, text]


def _shapes(c: Comparison, ascii_only: bool) -> list[RenderableType]:
    main = table(
        f"Every mesh shape at {c.at_chips} chips (Figure 13)",
        "algorithm",
        "mesh",
        "FC time",
        "FC util",
        "config per layer",
        left=2,
    )
    reasons = []
    for s in c.shapes:
        if s.reason is not None:
            reasons.append((f"{s.algorithm} {s.mesh}", s.reason))
        main.add_row(
            s.algorithm,
            s.mesh,
            time_or_dash(s.fc_time_s),
            pct(s.utilization),
            configs_label(s.configs),
        )
    chart = bar_chart(
        "FC FLOP utilization per mesh shape",
        [(f"{s.algorithm} {s.mesh}", s.utilization) for s in c.shapes],
        ascii_only=ascii_only,
    )
    return [main, chart, *_notes(reasons)]


def _slices(c: Comparison, ascii_only: bool) -> list[RenderableType]:
    main = table(
        f"One configuration for every layer on the best mesh at {c.at_chips} chips (Figure 14)",
        "algorithm",
        "mesh",
        "config",
        "FC time",
        "FC util",
        left=3,
    )
    for s in c.slices:
        main.add_row(
            s.algorithm, s.mesh, config_label(s.config), fmt_time(s.fc_time_s), pct(s.utilization)
        )
    chart = bar_chart(
        "FC FLOP utilization per configuration",
        [(f"{s.algorithm} {config_label(s.config)}", s.utilization) for s in c.slices],
        ascii_only=ascii_only,
    )
    return [main, chart]


def _dataflow(c: Comparison) -> list[RenderableType]:
    main = table(
        f"Dataflow optimization at {c.at_chips} chips (Table 2): phase 1 (auto) against "
        "Y-stationary everywhere",
        "algorithm",
        "Y-stn mesh",
        "Y-stn util",
        "auto mesh",
        "auto util",
        "speedup",
    )
    reasons = [(d.algorithm, d.reason) for d in c.dataflow if d.reason]
    for d in c.dataflow:
        main.add_row(
            d.algorithm,
            d.unoptimized_mesh or "-",
            pct(d.unoptimized_utilization),
            d.optimized_mesh or "-",
            pct(d.optimized_utilization),
            signed_pct(d.speedup),
        )
    return [main, *_notes(reasons)]


def _overlap(c: Comparison) -> list[RenderableType]:
    kinds = ", ".join(c.overlapped) or "nothing"
    main = table(
        f"Overlap at {c.at_chips} chips (Table 3): '{c.profile}' overlaps {kinds} with "
        "compute. 'as run': mesh and configurations tuned as if every kind overlapped; "
        "'retuned': tuned for this profile; 'overlapped': every kind overlapped",
        "algorithm",
        "mesh",
        "config per layer",
        "as run",
        "retuned",
        "overlapped",
        left=3,
    )
    reasons = [(o.algorithm, o.reason) for o in c.overlap if o.reason]
    for o in c.overlap:
        retuned = pct(o.retuned_utilization)
        if o.retuned_mesh and o.retuned_mesh != o.mesh:
            retuned += f" ({o.retuned_mesh})"
        main.add_row(
            o.algorithm,
            o.mesh or "-",
            configs_label(o.configs),
            pct(o.as_tuned_utilization),
            retuned,
            pct(o.overlapped_utilization),
        )
    return [main, *_notes(reasons)]


def render_comparison(c: Comparison, *, ascii_only: bool = False) -> RenderableType:
    """A heading and the tables (and bar charts) of every view in ``c``."""
    head = Text()
    head.append(f"{c.display_name} on {', '.join(map(str, c.chips))} chips ({c.profile})")
    batch = "chips / 2 (weak scaling)" if c.batch is None else f"{c.batch} (strong scaling)"
    head.append(
        f"\nbatch {batch} × seq {c.seq_len}; algorithms {', '.join(c.algorithms)}; "
        f"reference {c.reference}" + (f"; mesh {c.mesh}" if c.mesh else ""),
        style="dim",
    )
    parts: list[RenderableType] = [head]
    for view in c.views:
        if view == "scaling":
            parts += _scaling(c, ascii_only)
        elif view == "breakdown":
            parts += _breakdown(c)
        elif view == "gemms":
            parts += _gemms(c, ascii_only)
        elif view == "shapes":
            parts += _shapes(c, ascii_only)
        elif view == "slices":
            parts += _slices(c, ascii_only)
        elif view == "dataflow":
            parts += _dataflow(c)
        elif view == "overlap":
            parts += _overlap(c)
        else:
            parts += _cluster(c)
    return Group(*parts)


def _cluster(c: Comparison) -> list[RenderableType]:
    """Each algorithm at its best DP × PP × mesh split per chip count, fastest first."""
    out = table(
        f"Cluster ({c.profile}): each algorithm at its best DP × PP × mesh split within memory "
        f"(+% = how much faster {c.reference} is; *: no engine runs it yet)",
        "chips",
        "algorithm",
        "DP × PP × mesh",
        "ZeRO",
        "step",
        "MFU",
        "tokens/s",
        "memory",
        "+%",
        left=3,
    )
    reasons = []
    for e in sorted(c.cluster, key=lambda e: (e.chips, e.step_s is None, e.step_s or 0.0)):
        name = e.algorithm + ("" if e.engine else " *")
        if e.step_s is None:
            reasons.append((f"{e.algorithm} at {e.chips} chips", e.reason or ""))
            out.add_row(str(e.chips), name, "infeasible", "-", "-", "-", "-", "-", "-")
            continue
        out.add_row(
            str(e.chips),
            name,
            f"{e.dp} × {e.pp} × {e.mesh}",
            str(e.zero),
            ftime(e.step_s),
            pct(e.mfu),
            f"{e.tokens_per_s:,.0f}" if e.tokens_per_s is not None else "-",
            fmt_bytes(int(e.memory_bytes)) if e.memory_bytes is not None else "-",
            signed_pct(e.speedup_of_reference),
        )
    return [out, *_notes(reasons)]
