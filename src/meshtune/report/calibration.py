"""Terminal rendering of a :class:`~meshtune.calibrate.CalibrationResult`, and its residual plot.

The tables show, per op kind and mesh axis, the fitted t_launch, t_sync and bw with 95 %
intervals, R² and the leave-one-size-out error over shards ≥ 1 MiB (MeshSlice §3.2.2, §4.5);
then the compute fit, where each profile value came from, and the notes of the fit.
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from meshtune.calibrate import TARGET_MAPE, CalibrationResult, ComputeFit, LinkFit
from meshtune.calibrate._common import format_bytes
from meshtune.io import write_atomic
from meshtune.report.plan import fmt_time


def _with_ci(value: float, ci: tuple[float, float] | None, scale: float, digits: int = 3) -> str:
    """``value`` (× ``scale``), with its 95 % interval on a second line when known."""
    text = f"{value * scale:.{digits}g}"
    if ci is not None:
        text += f"\n[dim]{ci[0] * scale:.{digits}g}–{ci[1] * scale:.{digits}g}[/dim]"
    return text


def _mape(value: float | None) -> str:
    if value is None:
        return "–"
    text = f"{value:.1%}"
    return f"[red]{text}[/red]" if value > TARGET_MAPE else text


def fits_table(result: CalibrationResult) -> Table:
    """One row per (op, axis): parameters with 95 % intervals, fit range and quality."""
    table = Table(
        title="Communication fit: time = t_launch + steps·(t_sync + shard/bw)",
        caption=(
            "points used / measured and the shard range fitted; 95 % intervals below each value; "
            "LOO MAPE: leave-one-size-out error over shards ≥ 1 MiB (every size → fitted range)"
        ),
    )
    for header in ("op", "P", "fit", "t_launch µs", "t_sync µs", "bw GB/s", "R²", "LOO MAPE"):
        left = header in ("op", "fit")
        table.add_column(header, justify="left" if left else "right", no_wrap=left)
    for fit in result.links:
        table.add_row(*_fit_row(fit))
    return table


def _fit_row(fit: LinkFit) -> list[str]:
    fit_range = "all sizes"
    if fit.min_shard_bytes is not None:
        how = "auto" if fit.cutoff_chosen else "set"
        fit_range = f"≥{format_bytes(fit.min_shard_bytes)} {how}"
    sync = "0\nconfounded" if fit.confounded else _with_ci(fit.t_sync_s, fit.t_sync_ci95_s, 1e6)
    loo = _mape(fit.loo_mape_ge_1mb)
    if fit.loo_mape_ge_1mb_all_sizes is not None:
        loo = f"{_mape(fit.loo_mape_ge_1mb_all_sizes)} →\n{loo}"
    return [
        f"{fit.op.value}\naxis {fit.axis}",
        ", ".join(str(p) for p in fit.ring_sizes),
        f"{fit.points_in_fit}/{len(fit.points)}\n{fit_range}",
        _with_ci(fit.t_launch_s, fit.t_launch_ci95_s, 1e6),
        sync,
        _with_ci(fit.bw_bytes_per_s, fit.bw_ci95_bytes_per_s, 1e-9),
        f"{fit.r2:.4f}",
        loo,
    ]


def compute_table(fit: ComputeFit) -> Table:
    """The effective FLOPS fit and the measured efficiency of every GeMM."""
    table = Table(
        title=(
            f"Compute fit ({escape(fit.dtype)}): effective "
            f"{_with_ci(fit.effective_flops_per_s, fit.effective_flops_ci95_per_s, 1e-12, 4)} "
            "TFLOP/s"
            + (
                f", overhead {fit.overhead_s * 1e6:.3g} µs per GeMM"
                if fit.overhead_s is not None
                else ""
            )
        )
    )
    for header in ("m × n × k", "GFLOP", "time", "achieved TFLOP/s", "efficiency"):
        table.add_column(header, justify="right")
    for point in sorted(fit.points, key=lambda p: p.gemm.flops):
        g = point.gemm
        table.add_row(
            f"{g.m} × {g.n} × {g.k}",
            f"{g.flops / 1e9:.4g}",
            fmt_time(g.seconds),
            f"{point.achieved_flops_per_s / 1e12:.4g}",
            f"{point.efficiency:.0%}",
        )
    return table


def origins_table(result: CalibrationResult) -> Table:
    """Where each value of the profile comes from: a fit, an option or the base profile."""
    table = Table(title=f"Profile '{escape(result.profile.name)}': where each value comes from")
    table.add_column("value")
    table.add_column("from")
    for field, origin in result.origins:
        table.add_row(field, escape(origin))
    return table


def render_calibration(result: CalibrationResult) -> RenderableType:
    """The whole report: fits, compute, provenance, then the notes."""
    parts: list[RenderableType] = [fits_table(result)] if result.links else []
    if result.compute is not None:
        parts.append(compute_table(result.compute))
    parts.append(origins_table(result))
    notes = result.profile.calibration.notes if result.profile.calibration else []
    if notes:
        parts.append(Text("Notes", style="bold"))
        parts.extend(Text(f"• {note}") for note in notes)
    return Group(*parts)


def write_residual_plot(result: CalibrationResult, path: Path, *, force: bool = False) -> None:
    """Save a PNG of every fit's relative residuals against the shard size (needs matplotlib).

    Points used by the fit are filled, points outside the fitted regime hollow; the band is the
    ±10 % target. Written atomically; an existing ``path`` is refused unless ``force``.
    """
    from matplotlib.figure import Figure

    shown: list[tuple[LinkFit, list[int]]] = []  # a fit mirrored to both axes is drawn once
    for fit in result.links:
        same = next((axes for f, axes in shown if f.points is fit.points), None)
        if same is None:
            shown.append((fit, [fit.axis]))
        else:
            same.append(fit.axis)
    figure = Figure(figsize=(6.0, 2.6 * max(len(shown), 1)), layout="constrained")
    panels = figure.subplots(max(len(shown), 1), 1, squeeze=False)[:, 0]
    for ax, (fit, axes) in zip(panels, shown, strict=False):
        for color, ranks in enumerate(fit.ring_sizes):
            for inside in (True, False):
                points = [
                    p for p in fit.points if p.measurement.ranks == ranks and p.in_fit is inside
                ]
                if points:
                    ax.scatter(
                        [p.measurement.shard_bytes for p in points],
                        [100 * p.rel_error for p in points],
                        facecolors=f"C{color}" if inside else "none",
                        edgecolors=f"C{color}",
                        label=f"P = {ranks}" + ("" if inside else ", outside the fit"),
                    )
        ax.axhspan(-100 * TARGET_MAPE, 100 * TARGET_MAPE, color="0.9", zorder=0)
        ax.axhline(0.0, color="0.5", linewidth=0.8)
        if fit.min_shard_bytes is not None:
            ax.axvline(fit.min_shard_bytes, color="0.3", linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        where = f"axis {axes[0]}" if len(axes) == 1 else "axes 0 and 1 (one ring)"
        ax.set_title(f"{fit.op.value}, {where}", fontsize="medium")
        ax.set_xlabel("shard bytes")
        ax.set_ylabel("model − measured (%)")
        ax.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    write_atomic(path, buffer.getvalue(), force=force)
