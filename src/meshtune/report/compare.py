"""Terminal rendering of a :class:`~meshtune.compare.records.Comparison` (``meshtune compare``):
a heading and the tables and bar charts of every view, in the paper's figures' terms."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from meshtune.compare.records import Comparison
from meshtune.errors import printable
from meshtune.report.compare_cells import (
    bar_chart,
    breakdown_tables,
    config_label,
    configs_label,
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
from meshtune.report.console import printable_lines
from meshtune.report.plan import fmt_time


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
        parts.append(Text(f"note: {printable(c.nonfc_note)}", style="yellow"))
    return parts + notes(reasons)


def _breakdown(c: Comparison) -> list[RenderableType]:
    rows = [(b.algorithm, b.mesh or "-", b.breakdown) for b in c.breakdown if b.breakdown]
    reasons = [(b.algorithm, b.reason) for b in c.breakdown if b.reason]
    if not rows:
        return notes(reasons)
    return [*breakdown_tables(rows, f"FC time of one step at {c.at_chips} chips"), *notes(reasons)]


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
        printable_lines("\n".join([f"{c.reference} on average: {mean}", *sources, ""]))
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
    return [main, chart, *notes(reasons)]


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
    return [main, *notes(reasons)]


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
    return [main, *notes(reasons)]


def render_comparison(c: Comparison, *, ascii_only: bool = False) -> RenderableType:
    """A heading and the tables (and bar charts) of every view in ``c``."""
    head = Text()
    chips = ", ".join(map(str, c.chips))
    head.append(f"{printable(c.display_name)} on {chips} chips ({printable(c.profile)})")
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
    return [out, *notes(reasons)]
