"""From parsed logs to a :class:`~meshtune.specs.HardwareProfile`, with its provenance.

Every value of the profile comes from exactly one place, recorded as a structured
:class:`~meshtune.specs.Origin`: an explicit option, the logs (a fit), the ``base`` profile, or
a stated default (bf16 operands, B = 8, effective FLOPS = peak when nothing measures it).
Precedence is option > logs > base > default. The peak FLOP/s has no default: without it (or
the links of an op no log measured and no base gives) the fits are still reported, but there
is no profile, and :attr:`CalibrationResult.missing` says what it lacks.

Mesh axes: a measurement's axis comes from ``axis_map`` by file, else from the log itself (the
artifact's ``x`` / ``y``, a canonical ``axis`` column), else from ``axis_map`` by op or
``"*"``, else both axes (one ring stands for both directions; a note says so). Measurements
mapped to both axes are fitted once and the fit mirrored.

All-reduce: a ring all-reduce is a reduce-scatter then an all-gather on the same ring, so an
all-reduce fit supplies all_gather and reduce_scatter on its axis where no dedicated log does;
dedicated logs win. The fit record's ``used_for`` says which entries it supplied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from pydantic import ValidationError

from meshtune import __version__
from meshtune._toml import describe_validation_error
from meshtune.calibrate._common import (
    BYTES_PER_ELEMENT,
    WILDCARD,
    Measurement,
    check_keys,
    file_value,
)
from meshtune.calibrate.detect import PARSERS, ParsedLogs
from meshtune.calibrate.fit import ComputeFit, LinkFit, fit_compute, fit_link
from meshtune.calibrate.inherit import base_origin, carried_fields, extra_axes, provenance_lines
from meshtune.calibrate.tiers import NETWORK, build_tiers, check_systems, op_groups, split_tiers
from meshtune.errors import LogFormatError, ProfileError
from meshtune.specs import (
    Calibration,
    CollectiveKind,
    EfficiencyPoint,
    FitRecord,
    GemmEfficiency,
    HardwareProfile,
    LinkParams,
    MeasuredOp,
    Origin,
)

_MODEL = (
    "fitted by meshtune calibrate {version}: time = t_launch + steps·(t_sync + shard_bytes/bw), "
    "steps = P − 1 (all_gather, reduce_scatter), 2(P − 1) (all_reduce, supplying both) or 1 "
    "(send_recv, one ring shift); relative residuals, soft-L1 least squares, bounds >= 0 "
    "(MeshSlice §3.2.2, §4.5)"
)
DEFAULT_BYTES_PER_ELEMENT = 2
DEFAULT_SLICE_BLOCK = 8

_SKIPPED_SHOWN = 10
"""Skipped lines listed one by one in the warnings; the rest are counted."""


@dataclass(frozen=True)
class CalibrationResult:
    """The fits, the calibrated profile (``None`` when something it needs is ``missing``) and
    everything that explains them."""

    profile: HardwareProfile | None
    calibration: Calibration
    links: tuple[LinkFit, ...]
    compute: ComputeFit | None
    logs: ParsedLogs
    warnings: tuple[str, ...]
    missing: tuple[str, ...] = ()

    @property
    def origins(self) -> tuple[tuple[str, Origin], ...]:
        """``(profile value, where it came from)`` in profile order."""
        return tuple(self.calibration.origins.items())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the profile, every fit with its per-point residuals, provenance."""
        compute = None
        if self.compute is not None:
            compute = self.compute.record.model_dump(mode="json") | {
                "efficiency_curve": [list(p) for p in self.compute.curve],
                "points": [
                    {
                        "source": p.gemm.source,
                        "line": p.gemm.line,
                        "m": p.gemm.m,
                        "n": p.gemm.n,
                        "k": p.gemm.k,
                        "seconds": p.gemm.seconds,
                        "achieved_flops_per_s": p.achieved_flops_per_s,
                        "efficiency": p.efficiency,
                    }
                    for p in self.compute.points
                ],
            }
        return {
            "profile": None if self.profile is None else self.profile.model_dump(mode="json"),
            "missing": list(self.missing),
            "fits": [
                fit.record.model_dump(mode="json")
                | {
                    "point_residuals": [
                        {
                            "source": p.measurement.source,
                            "line": p.measurement.line,
                            "ranks": p.measurement.ranks,
                            "shard_bytes": p.measurement.shard_bytes,
                            "seconds": p.measurement.seconds,
                            "predicted_s": p.predicted_s,
                            "rel_error": p.rel_error,
                            "in_fit": p.in_fit,
                        }
                        for p in fit.points
                    ]
                }
                for fit in self.links
            ],
            "compute": compute,
            "origins": {k: v.model_dump(mode="json") for k, v in self.origins},
            "files": [
                {
                    "path": f.path,
                    "format": f.format.value,
                    "measurements": len(f.measurements),
                    "gemms": len(f.gemms),
                    "skipped_lines": len(f.skipped),
                    "notes": list(f.notes),
                }
                for f in self.logs.files
            ],
            "skipped_lines": [str(issue) for issue in self.logs.skipped],
            "left_out": list(self.logs.left_out),
            "warnings": list(self.warnings),
        }


# --------------------------------------------------------------------------- axes and fits

Groups = dict[tuple[MeasuredOp, int], list[Measurement]]


def _assign_axes(
    logs: ParsedLogs, axis_map: Mapping[str, Sequence[int]], measurements: Sequence[Measurement]
) -> tuple[Groups, list[str]]:
    """``measurements`` per (op, axis), and a note naming the files that got both axes by
    default."""
    paths = [f.path for f in logs.files]
    check_keys("--axis-map", axis_map, paths, extra={op.value for op in MeasuredOp})
    for key, given in axis_map.items():
        if not given or any(a not in (0, 1) for a in given):
            raise LogFormatError(f"--axis-map: '{key}' maps to {list(given)}; axes are 0 and 1")
    groups: Groups = {}
    defaulted: list[str] = []
    for measurement in measurements:
        axes: Sequence[int] | None = file_value(axis_map, measurement.source)
        if axes is None and measurement.axis is not None:
            axes = (measurement.axis,)
        if axes is None:
            axes = axis_map.get(measurement.op.value, axis_map.get(WILDCARD))
        if axes is None:
            axes = (0, 1)
            if measurement.source not in defaulted:
                defaulted.append(measurement.source)
        for axis in sorted(set(axes)):
            groups.setdefault((measurement.op, axis), []).append(measurement)
    notes = []
    if defaulted:
        names = ", ".join(PurePath(p).name for p in defaulted)
        notes.append(
            f"{len(defaulted)} log(s) do not say which mesh axis they measured; each ring is "
            f"used for both axes (the default; an axis map per file picks one): {names}"
        )
    return groups, notes


def _fit_groups(groups: Groups, min_shard_bytes: float | None) -> tuple[list[LinkFit], list[str]]:
    """One fit per (op, axis); the same measurements on both axes are fitted once and mirrored.

    A group whose fit fails is reported in the second list instead.
    """
    fits: list[LinkFit] = []
    failed: list[str] = []
    done: dict[tuple[MeasuredOp, tuple[int, ...]], LinkFit | int] = {}
    for (op, axis), measurements in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        key = (op, tuple(id(m) for m in measurements))
        same = done.get(key)
        if isinstance(same, LinkFit):
            record = same.record.model_copy(
                update={"axis": axis, "mirrored_from_axis": same.record.axis}
            )
            fits.append(LinkFit(record, same.points))
            continue
        if same is not None:  # the same measurements failed on the other axis: said once
            continue
        try:
            fit = fit_link(op, axis, measurements, min_shard_bytes=min_shard_bytes)
        except LogFormatError as exc:
            failed.append(f"not fitted: {exc}")
            done[key] = axis
            continue
        done[key] = fit
        fits.append(fit)
    return fits, failed


def fit_label(record: FitRecord) -> str:
    """``all_gather axis 0``, or ``all_reduce tier network`` for a tier's fit."""
    where = f"tier {record.tier}" if record.tier else f"axis {record.axis}"
    return f"{record.op.value} {where}"


def _mark_tier(fits: Sequence[LinkFit], tier: str) -> list[LinkFit]:
    """The fits of one tier, each recording the tier and the kinds it supplies there."""
    marked = []
    for fit in fits:
        used = [k for k in CollectiveKind if _supplier(fits, k, 0) is fit]
        record = fit.record.model_copy(update={"tier": tier, "used_for": used})
        marked.append(LinkFit(record, fit.points))
    return marked


def _supplier(fits: Sequence[LinkFit], kind: CollectiveKind, axis: int) -> LinkFit | None:
    """The fit that supplies ``kind`` on ``axis``: a dedicated one, else an all-reduce one."""
    by_op: dict[tuple[MeasuredOp, int], LinkFit] = {(f.record.op, f.record.axis): f for f in fits}
    dedicated = by_op.get((MeasuredOp(kind.value), axis))
    if dedicated is not None:
        return dedicated
    if kind in MeasuredOp.ALL_REDUCE.kinds:
        return by_op.get((MeasuredOp.ALL_REDUCE, axis))
    return None


def _mark_uses(
    fits: list[LinkFit],
) -> tuple[list[LinkFit], dict[tuple[CollectiveKind, int], LinkFit]]:
    """Record in each fit which profile entries it supplies."""
    supplier = {
        (kind, axis): fit
        for kind in CollectiveKind
        for axis in (0, 1)
        if (fit := _supplier(fits, kind, axis)) is not None
    }
    marked: list[LinkFit] = []
    for fit in fits:
        used = [k for (k, a), f in supplier.items() if f is fit]
        marked.append(LinkFit(fit.record.model_copy(update={"used_for": used}), fit.points))
    index = {id(old): new for old, new in zip(fits, marked, strict=True)}
    return marked, {key: index[id(fit)] for key, fit in supplier.items()}


# --------------------------------------------------------------------------- assembly


@dataclass
class _Picker:
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


def _file_sources(logs: ParsedLogs) -> list[str]:
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


def _origin_sources(origins: Mapping[str, Origin], base: HardwareProfile | None) -> list[str]:
    """``sources`` lines for the model, the values given as options, defaults and the base."""
    lines = [_MODEL.format(version=__version__)]
    lines += [f"{f}: given on the command line" for f, o in origins.items() if o.kind == "option"]
    lines += [f"{f}: {o.detail}" for f, o in origins.items() if o.kind == "default"]
    lines += provenance_lines(origins, base)
    if base is not None and any(o.kind == "base" for o in origins.values()):
        lines.append(f"sources of base profile '{base.name}': " + " | ".join(base.sources))
    return lines


def _description(
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


def _compute_values(
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


def fit_profile(
    logs: ParsedLogs,
    *,
    name: str = "calibrated",
    axis_map: Mapping[str, Sequence[int]] | None = None,
    base: HardwareProfile | None = None,
    peak_flops_per_s: float | None = None,
    effective_flops_per_s: float | None = None,
    bytes_per_element: int | None = None,
    slice_block: int | None = None,
    min_shard_bytes: float | None = None,
    description: str | None = None,
    sources: Sequence[str] = (),
    pool: bool = False,
) -> CalibrationResult:
    """Fit every (op, axis) the logs cover and assemble the profile named ``name``.

    ``axis_map`` maps a file, an op (``all_gather``) or ``"*"`` to mesh axes (``(0,)``,
    ``(1,)`` or ``(0, 1)``) for logs that do not state theirs (default: both). Values the logs
    cannot give come from the options, ``base`` or a stated default; when something has none
    the result has no profile and lists it in ``missing``. ``min_shard_bytes`` fixes the
    regime cutoff instead of choosing it. ``sources`` are added to the provenance. Rings over
    several hosts are fitted as the network tier (:mod:`~meshtune.calibrate.tiers`); logs of
    different systems are refused unless ``pool``. Raises
    :class:`LogFormatError` when no fit at all succeeds, :class:`ProfileError` for
    contradictory values (effective FLOPS above the peak).
    """
    system_notes = check_systems(logs.measurements, pool=pool)
    split = split_tiers(logs.measurements)
    inter_on_axes = not split.intra and (base is None or not base.tiers)
    on_axes = split.inter if inter_on_axes else split.intra
    groups, axis_notes = _assign_axes(logs, axis_map or {}, on_axes)
    raw_fits, failed = _fit_groups(groups, min_shard_bytes)
    network: list[LinkFit] = []
    if split.inter and not inter_on_axes:
        inter_fits, inter_failed = _fit_groups(op_groups(split.inter), min_shard_bytes)
        failed += inter_failed
        network = _mark_tier(inter_fits, NETWORK)
    compute = fit_compute(logs.gemms) if logs.gemms else None
    if not raw_fits and not network and compute is None:
        raise LogFormatError("; ".join(failed) or "no measurements to fit")
    links, supplier = _mark_uses(raw_fits)
    links += network
    warnings: list[str] = [*system_notes, *axis_notes, *failed]
    fit_notes = [
        f"{fit_label(fit.record)}: {n}"
        for fit in links
        if fit.record.mirrored_from_axis is None
        for n in fit.record.notes
    ]
    warnings += fit_notes
    unused = [
        f"{fit_label(f.record)}: "
        + (
            "kept in the calibration record for expert parallelism (the cost model has no "
            "all-to-all yet)"
            if f.record.op is MeasuredOp.ALL_TO_ALL
            else "not used in the profile (dedicated all_gather and reduce_scatter logs win)"
        )
        for f in links
        if not f.record.used_for and f.record.mirrored_from_axis is None
    ]
    picker = _Picker(base, {}, [])
    axis_params: dict[str, dict[str, LinkParams]] = {}
    for kind in CollectiveKind:
        per_axis = {f"axis{a}": picker.link(kind, a, supplier.get((kind, a))) for a in (0, 1)}
        axis_params[kind.value] = {k: v for k, v in per_axis.items() if v is not None}
    for kind_name, extra in extra_axes(base, picker.origins).items():
        axis_params[kind_name].update(extra)

    gemm_flops, gemm_width, efficiency = _compute_values(
        compute, effective_flops_per_s, bytes_per_element, warnings
    )
    peak = picker.pick(
        "peak_flops_per_s",
        peak_flops_per_s,
        None,
        None,
        "the datasheet peak or a base profile",
    )
    effective = picker.pick(
        "effective_flops_per_s",
        effective_flops_per_s,
        gemm_flops,
        (peak, "ASSUMED equal to peak_flops_per_s: no GeMM timings measure it")
        if peak is not None
        else (None, ""),
        "a measured value, GeMM logs or a base profile",
    )
    width_value = picker.pick(
        "bytes_per_element",
        bytes_per_element,
        gemm_width,
        (DEFAULT_BYTES_PER_ELEMENT, "assumed 2 (bf16 operands)"),
        "the operand width",
    )
    block = picker.pick(
        "slice_block",
        slice_block,
        None,
        (DEFAULT_SLICE_BLOCK, "assumed 8 (Algorithm 2's B, MeshSlice §3.1.2)"),
        "the slice block",
    )
    if efficiency is not None:
        relative = "the given effective FLOPS" if effective_flops_per_s else "the best of them"
        picker.origins["gemm_efficiency"] = Origin(
            kind="fit",
            detail=f"efficiency curve of {len(logs.gemms)} GeMMs, achieved / {relative}",
        )
    elif base is not None and base.gemm_efficiency is not None:
        efficiency = base.gemm_efficiency
        picker.origins["gemm_efficiency"] = base_origin(base)
    else:
        efficiency = None
    if peak is not None and effective is not None and effective > peak:
        raise ProfileError(
            f"effective FLOPS {effective:.4g} ({picker.origins['effective_flops_per_s'].detail}) "
            f"exceeds peak FLOPS {peak:.4g} ({picker.origins['peak_flops_per_s'].detail})"
        )

    file_notes = [note for f in logs.files for note in f.notes]
    notes = [*logs.left_out, *file_notes, *axis_notes, *failed, *unused, *fit_notes]
    if logs.skipped:
        shown = logs.skipped[:_SKIPPED_SHOWN]
        more = len(logs.skipped) - len(shown)
        notes.append(f"{len(logs.skipped)} unparseable line(s) skipped, first: {logs.skipped[0]}")
        count = f"{len(logs.skipped)} unparseable line(s) skipped"
        if more:
            count += f" ({more} more not shown; --json lists them all)"
        warnings[:0] = [*(f"skipped {issue}" for issue in shown), count]
    warnings[:0] = logs.left_out
    carried = carried_fields(base, picker.origins)
    tiers, tier_notes = build_tiers(
        split,
        lambda kind: supplier.get((kind, 0)) if split.intra else None,
        lambda kind: _supplier(network, kind, 0),
        base,
        picker.origins,
    )
    if tiers is not None:
        carried["tiers"] = tiers
        picker.origins["tiers"] = Origin(kind="fit", detail=tier_notes[0])
    notes += tier_notes
    warnings += tier_notes[int(tiers is not None) :]
    calibration = Calibration(
        tool=f"meshtune {__version__}",
        source_files=[f.path for f in logs.files],
        origins=picker.origins,
        fits=[fit.record for fit in links],
        compute=compute.record if compute is not None else None,
        notes=notes,
    )
    profile = None
    if not picker.missing:
        try:
            profile = HardwareProfile(
                name=name,
                description=description or _description(logs, links, compute, base, picker.origins),
                sources=[*_file_sources(logs), *sources, *_origin_sources(picker.origins, base)],
                peak_flops_per_s=peak,
                effective_flops_per_s=effective,
                bytes_per_element=width_value,
                slice_block=block,
                all_gather=axis_params["all_gather"],
                reduce_scatter=axis_params["reduce_scatter"],
                send_recv=axis_params["send_recv"],
                gemm_efficiency=efficiency,
                **carried,
                calibration=calibration,
            )
        except ValidationError as exc:
            raise ProfileError(
                f"calibrated profile is invalid: {describe_validation_error(exc)}"
            ) from None
    return CalibrationResult(
        profile=profile,
        calibration=calibration,
        links=tuple(links),
        compute=compute,
        logs=logs,
        warnings=tuple(warnings),
        missing=tuple(picker.missing),
    )


_HEADER = (
    "Hardware profile written by meshtune calibrate {version} (see calibration below).",
    "axis0 = ring of the P_r chips of one mesh column (inter-row traffic, AG_row / RdS_row);",
    "axis1 = ring of the P_c chips of one mesh row (inter-column traffic, AG_col / RdS_col).",
    "cost = t_launch + (P - 1) * (t_sync + shard_bytes / bw); send_recv: one shift, P - 1 = 1.",
    "All values in SI base units: seconds, bytes per second, FLOP per second.",
)


def profile_toml(result: CalibrationResult) -> str:
    """The profile as TOML in the ``profiles/`` schema (its name is the file stem, not written),
    with a comment header; it loads back with :func:`meshtune.specs.load_profile` into an equal
    profile. Raises :class:`ProfileError` naming what is missing when there is no profile."""
    import tomli_w

    if result.profile is None:
        raise ProfileError("cannot write a profile, nothing gives: " + "; ".join(result.missing))
    data = result.profile.model_dump(mode="json", exclude={"name"}, exclude_none=True)
    header = "".join(f"# {line}\n" for line in _HEADER).format(version=__version__)
    return header + "\n" + tomli_w.dumps(data)
