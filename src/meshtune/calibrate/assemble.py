"""The pieces of a calibrated profile: each value picked by precedence (option > logs > base >
default) with its :class:`~meshtune.hardware.calibration.Origin`, the compute values of the GeMM
fit, and the profile's description and ``sources`` lines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshtune._version import __version__
from meshtune.calibrate.compute_fit import ComputeFit
from meshtune.calibrate.formats.detect import PARSERS, ParsedLogs
from meshtune.calibrate.formats.log_units import BYTES_PER_ELEMENT
from meshtune.calibrate.inherit import base_origin, provenance_lines
from meshtune.calibrate.link_fit import LinkFit
from meshtune.hardware.calibration import MeasuredOp, Origin
from meshtune.hardware.compute import EfficiencyPoint, GemmEfficiency
from meshtune.hardware.links import CollectiveKind, LinkParams
from meshtune.hardware.profile import HardwareProfile

_MODEL = (
    "fitted by meshtune calibrate {version}: time = t_launch + steps·(t_sync + shard_bytes/bw), "
    "steps = P − 1 (all_gather, reduce_scatter), 2(P − 1) (all_reduce, supplying both) or 1 "
    "(send_recv, one ring shift); relative residuals, soft-L1 least squares, bounds >= 0 "
    "(MeshSlice §3.2.2, §4.5)"
)


@dataclass
class Picker:
    """Chooses each profile value by precedence (option > logs > base > default) and records
    where it came from."""

    base: HardwareProfile | None
    origins: dict[str, Origin]
    missing: list[str]

    def pick(
        self,
        field: str,
        option: Any,
        logs: tuple[Any, str] | None,
        default: tuple[Any, str] | None,
        remedy: str,
    ) -> Any:
        if option is not None:
            self.origins[field] = Origin(kind="option", detail="given by the user")
            return option
        if logs is not None:
            self.origins[field] = Origin(kind="fit", detail=logs[1])
            return logs[0]
        if self.base is not None:
            self.origins[field] = base_origin(self.base)
            return getattr(self.base, field)
        if default is not None and default[0] is not None:
            self.origins[field] = Origin(kind="default", detail=default[1])
            return default[0]
        if default is None:  # a default that is missing only because what it follows is
            self.missing.append(f"{field} ({remedy})")
        return None

    def link(self, kind: CollectiveKind, axis: int, fit: LinkFit | None) -> LinkParams | None:
        """The (kind, axis) triple: the fit, else the base profile's, else missing."""
        field = f"{kind.value}.axis{axis}"
        if fit is not None:
            record = fit.record
            how = f"fit of {record.points} {record.op.value} measurements"
            if record.op is MeasuredOp.ALL_REDUCE:
                how += " (all-reduce = reduce-scatter + all-gather)"
            if record.mirrored_from_axis is not None:
                how += f", the ring of axis {record.mirrored_from_axis}"
            self.origins[field] = Origin(kind="fit", detail=how)
            return LinkParams(
                t_launch_s=record.t_launch_s,
                t_sync_s=record.t_sync_s,
                bw_bytes_per_s=record.bw_bytes_per_s,
            )
        if self.base is not None:
            self.origins[field] = base_origin(self.base)
            return self.base.link(kind, axis)
        self.missing.append(f"{field} (no logs measure it; add logs or pass a base profile)")
        return None


def file_sources(logs: ParsedLogs) -> list[str]:
    lines = []
    for f in logs.files:
        label = PARSERS[f.format].label
        if f.measurements:
            ops = ", ".join(sorted({m.op.value for m in f.measurements}))
            ranks = ", ".join(str(r) for r in sorted({m.ranks for m in f.measurements}))
            lines.append(f"{f.path}: {label} log, {ops}, P = {ranks}, {len(f.measurements)} points")
        else:
            dtypes = ", ".join(sorted({g.dtype for g in f.gemms}))
            lines.append(f"{f.path}: {label}, {dtypes}, {len(f.gemms)} GeMMs")
    return lines


def origin_sources(origins: Mapping[str, Origin], base: HardwareProfile | None) -> list[str]:
    """``sources`` lines for the model, the values given as options, defaults and the base."""
    lines = [_MODEL.format(version=__version__)]
    lines += [f"{f}: given on the command line" for f, o in origins.items() if o.kind == "option"]
    lines += [f"{f}: {o.detail}" for f, o in origins.items() if o.kind == "default"]
    lines += provenance_lines(origins, base)
    if base is not None and any(o.kind == "base" for o in origins.values()):
        lines.append(f"sources of base profile '{base.name}': " + " | ".join(base.sources))
    return lines


def description_of(
    logs: ParsedLogs,
    links: Sequence[LinkFit],
    compute: ComputeFit | None,
    base: HardwareProfile | None,
    origins: Mapping[str, Origin],
) -> str:
    axes_of: dict[str, list[str]] = {}
    for fit in links:
        if fit.record.used_for:
            axes_of.setdefault(fit.record.op.value, []).append(str(fit.record.axis))
    what = [", ".join(f"{op} (axis {', '.join(axes)})" for op, axes in axes_of.items())]
    if compute is not None:
        what.append(f"compute from {len(compute.points)} GeMMs")
    text = f"Calibrated by meshtune calibrate from {len(logs.files)} log(s): " + "; ".join(
        w for w in what if w
    )
    if base is not None and any(o.kind == "base" for o in origins.values()):
        text += f"; other values from base profile '{base.name}'"
    return text


def compute_values(
    compute: ComputeFit | None,
    effective_flops_per_s: float | None,
    bytes_per_element: int | None,
    warnings: list[str],
) -> tuple[tuple[float, str] | None, tuple[int, str] | None, GemmEfficiency | None]:
    """What the GeMM fit gives: effective FLOPS, the operand width and the efficiency model."""
    if compute is None:
        return None, None, None
    record = compute.record
    flops = (record.effective_flops_per_s, f"fit of {record.points} GeMMs")
    width = BYTES_PER_ELEMENT.get(record.dtype)
    gemm_width = (width, f"GeMM dtype {record.dtype}") if width is not None else None
    if effective_flops_per_s is not None:
        warnings.append(
            f"the effective FLOPS given ({effective_flops_per_s:g}) overrides the GeMM fit "
            f"({record.effective_flops_per_s:.4g} FLOP/s)"
        )
    if bytes_per_element is not None and width is not None and width != bytes_per_element:
        warnings.append(
            f"bytes_per_element {bytes_per_element} differs from the GeMM dtype "
            f"{record.dtype} ({width} bytes)"
        )
    model = None
    if compute.rates:  # several sizes: the curve, relative to the effective rate in use
        curve = (
            compute.curve
            if effective_flops_per_s is None
            else compute.curve_for(effective_flops_per_s)
        )
        model = GemmEfficiency(
            overhead_s=0.0,
            curve=[EfficiencyPoint(flops=f, efficiency=e) for f, e in curve],
        )
    return flops, gemm_width, model
