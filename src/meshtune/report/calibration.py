"""Terminal rendering of a :class:`~meshtune.calibrate.CalibrationResult`, and its residual plot.

The tables show, per op kind and mesh axis, the fitted t_launch, t_sync and bw with 95 %
intervals, R² and the leave-one-size-out error over shards ≥ 1 MiB (MeshSlice §3.2.2, §4.5);
then the compute fit, where each profile value came from, and the notes of the fit.
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from meshtune.calibrate import TARGET_MAPE, CalibrationResult, ComputeFit, LinkFit
from meshtune.calibrate.formats.log_units import format_bytes
from meshtune.calibrate.groups import fit_label
from meshtune.hardware.calibration import FitRecord
from meshtune.hardware.links import CollectiveKind
from meshtune.io import write_atomic
from meshtune.report.console import shown
from meshtune.report.plan import fmt_time

WIDE = 130
"""Below this console width the fits are listed one block per fit instead of one table."""


def _value(value: float, ci: tuple[float, float] | None, scale: float, digits: int = 3) -> str:
    """``value`` (× ``scale``) and its 95 % interval, ``'213 (198–231)'``."""
    text = f"{value * scale:.{digits}g}"
    if ci is not None:
        text += f" ({ci[0] * scale:.{digits}g}–{ci[1] * scale:.{digits}g})"
    return text


def _mape(value: float | None) -> str:
    if value is None:
        return "–"
    text = f"{value:.1%}"
    return f"[red]{text}[/red]" if value > TARGET_MAPE else text


def _label(record: FitRecord) -> str:
    """``all_gather axis 0``, with what a fit supplies when that is not just itself."""
    text = fit_label(record)
    if record.mirrored_from_axis is not None:
        text += f" (= axis {record.mirrored_from_axis}, one ring)"
    if record.op.value not in [k.value for k in record.used_for] and record.used_for:
        text += " → " + ", ".join(k.value for k in record.used_for)
    elif not record.used_for:
        text += " (not used)"
    return text


def _fit_range(record: FitRecord, measured: int) -> str:
    text = f"{record.points}/{measured} points, "
    if record.min_shard_bytes is None:
        return text + "all sizes"
    how = "auto" if record.cutoff_chosen else "set"
    return text + f"shards ≥{format_bytes(record.min_shard_bytes)} ({how})"


def _loo(record: FitRecord) -> str:
    loo = _mape(record.loo_mape_ge_1mb)
    if record.loo_mape_ge_1mb_all_sizes is not None:
        loo = f"{_mape(record.loo_mape_ge_1mb_all_sizes)} → {loo}"
    return loo


def _sync(record: FitRecord) -> str:
    if record.confounded:
        return "0 (confounded)"
    return _value(record.t_sync_s, record.t_sync_ci95_s, 1e6)


def _fit_block(fit: LinkFit) -> Table:
    """One fit as a two-column block: nothing is cut at any width."""
    r = fit.record
    block = Table(show_header=False, box=None, padding=(0, 1, 0, 1))
    block.add_column(no_wrap=True, style="bold")
    block.add_column(overflow="fold")
    block.add_row("P", ", ".join(str(p) for p in r.ring_sizes))
    block.add_row("fit", _fit_range(r, len(fit.points)))
    block.add_row("t_launch µs", _value(r.t_launch_s, r.t_launch_ci95_s, 1e6))
    block.add_row("t_sync µs", _sync(r))
    block.add_row("bw GB/s", _value(r.bw_bytes_per_s, r.bw_ci95_bytes_per_s, 1e-9))
    block.add_row("R²", f"{r.r2:.4f}")
    block.add_row("LOO MAPE", _loo(r))
    return block


_TITLE = "Communication fit: time = t_launch + steps·(t_sync + shard/bw)"
_CAPTION = (
    "95 % intervals in parentheses; LOO MAPE: leave-one-size-out error over shards ≥ 1 MiB "
    "(every size → fitted range)"
)


def fits_table(result: CalibrationResult) -> Table:
    """One row per fitted (op, axis): parameters with 95 % intervals, fit range and quality."""
    table = Table(title=_TITLE, caption=_CAPTION)
    for header in ("op", "P", "fit", "t_launch µs", "t_sync µs", "bw GB/s", "R²", "LOO MAPE"):
        left = header in ("op", "fit")
        table.add_column(header, justify="left" if left else "right", overflow="fold")
    for fit in result.links:
        r = fit.record
        table.add_row(
            shown(_label(r)),
            ", ".join(str(p) for p in r.ring_sizes),
            _fit_range(r, len(fit.points)),
            _value(r.t_launch_s, r.t_launch_ci95_s, 1e6),
            _sync(r),
            _value(r.bw_bytes_per_s, r.bw_ci95_bytes_per_s, 1e-9),
            f"{r.r2:.4f}",
            _loo(r),
        )
    return table


class _Fits:
    """The fits as one table on a wide console, as one block per fit on a narrow one."""

    def __init__(self, result: CalibrationResult) -> None:
        self.result = result

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width >= WIDE:
            yield fits_table(self.result)
            return
        yield Text(_TITLE, style="italic")
        for fit in self.result.links:
            yield Text(_label(fit.record), style="bold")
            if fit.record.mirrored_from_axis is None:
                yield _fit_block(fit)
        yield Text(_CAPTION, style="dim")


def rings_table(result: CalibrationResult) -> Table | None:
    """Per ring size, for fits over several: each P's own line and the joint model's error."""
    table = Table(title="Per ring size: each P's own line, and the joint model's error there")
    for header in ("op", "P", "points", "intercept µs", "bw GB/s", "own MAPE", "joint MAPE"):
        table.add_column(header, justify="left" if header == "op" else "right", overflow="fold")
    rows = 0
    for fit in result.links:
        r = fit.record
        if r.mirrored_from_axis is not None:
            continue
        for ring in r.per_ring:
            rows += 1
            table.add_row(
                fit_label(r),
                str(ring.ranks),
                str(ring.points),
                f"{ring.intercept_s * 1e6:.3g}",
                "–" if ring.bw_bytes_per_s is None else f"{ring.bw_bytes_per_s * 1e-9:.3g}",
                _mape(ring.mape_own),
                _mape(ring.mape_joint),
            )
    return table if rows else None


def compute_table(fit: ComputeFit) -> Table:
    """The compute fit and the measured efficiency of every GeMM."""
    r = fit.record
    title = (
        f"Compute fit ({shown(r.dtype)}): effective "
        f"{_value(r.effective_flops_per_s, r.effective_flops_ci95_per_s, 1e-12, 4)} TFLOP/s"
    )
    if r.overhead_s is not None:
        title += f" (best size), line fit overhead {r.overhead_s * 1e6:.3g} µs per GeMM"
    table = Table(title=title)
    for header in ("m × n × k", "GFLOP", "time", "achieved TFLOP/s", "efficiency"):
        table.add_column(header, justify="right", overflow="fold")
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
    """Where each value of the profile comes from: a fit, an option, the base or a default."""
    name = result.profile.name if result.profile is not None else "(not built)"
    table = Table(title=f"Profile '{shown(name)}': where each value comes from")
    table.add_column("value", overflow="fold")
    table.add_column("from", overflow="fold")
    for field, origin in result.origins:
        table.add_row(field, f"{origin.kind}: {shown(origin.detail)}")
    return table


def tiers_table(result: CalibrationResult) -> Table | None:
    """The profile's network tiers, per kind (and all_to_all where a tier has it): bandwidth,
    latency and where they come from."""
    profile = result.profile
    if profile is None or not profile.tiers:
        return None
    table = Table(title="Network tiers (cluster plans: a ring within 'chips' GPUs uses a tier)")
    for header in ("tier", "chips", "kind", "t_launch µs", "t_sync µs", "bw GB/s", "from"):
        numeric = "µs" in header or "GB" in header
        table.add_column(header, justify="right" if numeric else "left", overflow="fold")
    origins = result.calibration.origins
    for tier in profile.tiers:
        for kind in [k.value for k in CollectiveKind] + ["all_to_all"]:
            link = getattr(tier, kind)
            if link is None:  # a tier without all_to_all: expert parallelism not priced there
                continue
            origin = origins.get(f"tiers.{tier.name}.{kind}", origins.get("tiers"))
            table.add_row(
                tier.name,
                "every other" if tier.chips is None else str(tier.chips),
                kind,
                f"{link.t_launch_s * 1e6:.3g}",
                f"{link.t_sync_s * 1e6:.3g}",
                f"{link.bw_bytes_per_s * 1e-9:.4g}",
                "–" if origin is None else origin.kind,
            )
    return table


def render_calibration(result: CalibrationResult) -> RenderableType:
    """The whole report: fits, per-P fits, tiers, compute, provenance, then the notes."""
    parts: list[RenderableType] = [_Fits(result)] if result.links else []
    rings = rings_table(result)
    if rings is not None:
        parts.append(rings)
    tiers = tiers_table(result)
    if tiers is not None:
        parts.append(tiers)
    if result.compute is not None:
        parts.append(compute_table(result.compute))
    parts.append(origins_table(result))
    if result.missing:
        parts.append(
            Text(
                "To write a profile (-o PATH), also give: " + "; ".join(result.missing),
                style="yellow",
            )
        )
    if result.calibration.notes:
        parts.append(Text("Notes", style="bold"))
        parts.extend(Text(f"• {note}") for note in result.calibration.notes)
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
            shown.append((fit, [fit.record.axis]))
        else:
            same.append(fit.record.axis)
    figure = Figure(figsize=(6.0, 2.6 * max(len(shown), 1)), layout="constrained")
    panels = figure.subplots(max(len(shown), 1), 1, squeeze=False)[:, 0]
    for ax, (fit, axes) in zip(panels, shown, strict=False):
        for color, ranks in enumerate(fit.record.ring_sizes):
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
        if fit.record.min_shard_bytes is not None:
            ax.axvline(fit.record.min_shard_bytes, color="0.3", linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        where = f"axis {axes[0]}" if len(axes) == 1 else "axes 0 and 1 (one ring)"
        if fit.record.tier:
            where = f"tier {fit.record.tier}"
        ax.set_title(f"{fit.record.op.value}, {where}", fontsize="medium")
        ax.set_xlabel("shard bytes")
        ax.set_ylabel("model − measured (%)")
        ax.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    write_atomic(path, buffer.getvalue(), force=force)
