"""From parsed logs to a :class:`~meshtune.specs.HardwareProfile`, with its provenance.

Every value of the profile comes from exactly one place, recorded in the result: an explicit
option, the logs (a fit), or the ``base`` profile. Precedence is option > logs > base; a value
none of them gives is an error naming it (nothing is invented). The mesh axis of a measurement
comes from ``axis_map`` by file, else from the log itself (the artifact's ``x`` / ``y``, a
canonical ``axis`` column), else from ``axis_map`` by op or ``"*"``; a measurement may be mapped
to both axes, e.g. when a single-node GPU ring stands for both mesh directions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from meshtune import __version__
from meshtune._toml import describe_validation_error
from meshtune.calibrate._common import (
    WILDCARD,
    LogFormat,
    Measurement,
    check_keys,
    file_value,
)
from meshtune.calibrate.detect import ParsedLogs
from meshtune.calibrate.fit import ComputeFit, LinkFit, fit_compute, fit_link
from meshtune.calibrate.gemm import BYTES_PER_ELEMENT
from meshtune.calibrate.toml_writer import dumps
from meshtune.errors import LogFormatError, ProfileError
from meshtune.specs import (
    Calibration,
    CollectiveKind,
    ComputeFitRecord,
    FitRecord,
    HardwareProfile,
    LinkParams,
)

_FORMAT_LABEL = {
    LogFormat.NCCL: "nccl-tests/rccl-tests",
    LogFormat.OSU: "OSU micro-benchmarks",
    LogFormat.ARTIFACT: "MeshSlice artifact BenchCollectives2D",
    LogFormat.CANONICAL: "canonical CSV/JSONL",
    LogFormat.GEMM: "GeMM timings",
}
_MODEL = (
    "fitted by meshtune calibrate {version}: time = t_launch + steps·(t_sync + shard_bytes/bw), "
    "steps = P − 1 (all_gather, reduce_scatter) or 1 (send_recv, one ring shift); relative "
    "residuals, soft-L1 least squares, bounds >= 0 (MeshSlice §3.2.2, §4.5)"
)


_SKIPPED_SHOWN = 10
"""Skipped lines listed one by one in the warnings; the rest are counted."""


def _sig(value: float, digits: int = 6) -> float:
    """``value`` rounded to ``digits`` significant digits (the fits are not more precise)."""
    return float(f"{value:.{digits}g}")


def _sig_pair(pair: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if pair is None else (_sig(pair[0], 4), _sig(pair[1], 4))


@dataclass(frozen=True)
class CalibrationResult:
    """The calibrated profile and everything that explains it."""

    profile: HardwareProfile
    links: tuple[LinkFit, ...]
    compute: ComputeFit | None
    logs: ParsedLogs
    origins: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the profile, every fit with its per-point residuals, provenance."""
        return {
            "profile": self.profile.model_dump(mode="json"),
            "fits": [_link_json(fit) for fit in self.links],
            "compute": _compute_json(self.compute) if self.compute is not None else None,
            "origins": dict(self.origins),
            "files": [
                {
                    "path": f.path,
                    "format": f.format.value,
                    "measurements": len(f.measurements),
                    "gemms": len(f.gemms),
                    "skipped_lines": len(f.skipped),
                }
                for f in self.logs.files
            ],
            "skipped_lines": [str(issue) for issue in self.logs.skipped],
            "left_out": list(self.logs.left_out),
            "warnings": list(self.warnings),
        }


def _link_json(fit: LinkFit) -> dict[str, Any]:
    return {
        "op": fit.op.value,
        "axis": fit.axis,
        "t_launch_s": fit.t_launch_s,
        "t_sync_s": fit.t_sync_s,
        "bw_bytes_per_s": fit.bw_bytes_per_s,
        "t_launch_ci95_s": fit.t_launch_ci95_s,
        "t_sync_ci95_s": fit.t_sync_ci95_s,
        "bw_ci95_bytes_per_s": fit.bw_ci95_bytes_per_s,
        "r2": fit.r2,
        "ring_sizes": list(fit.ring_sizes),
        "confounded": fit.confounded,
        "min_shard_bytes": fit.min_shard_bytes,
        "cutoff_chosen_automatically": fit.cutoff_chosen,
        "loo_mape_ge_1mb": fit.loo_mape_ge_1mb,
        "loo_mape_ge_1mb_all_sizes": fit.loo_mape_ge_1mb_all_sizes,
        "notes": list(fit.notes),
        "points": [
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
        ],
    }


def _compute_json(fit: ComputeFit) -> dict[str, Any]:
    return {
        "dtype": fit.dtype,
        "effective_flops_per_s": fit.effective_flops_per_s,
        "effective_flops_ci95_per_s": fit.effective_flops_ci95_per_s,
        "overhead_s": fit.overhead_s,
        "half_efficiency_flops": fit.half_efficiency_flops,
        "r2": fit.r2,
        "notes": list(fit.notes),
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
            for p in fit.points
        ],
    }


# --------------------------------------------------------------------------- axes


def _assign_axes(
    logs: ParsedLogs, axis_map: Mapping[str, Sequence[int]]
) -> dict[tuple[CollectiveKind, int], list[Measurement]]:
    paths = [f.path for f in logs.files]
    check_keys("--axis-map", axis_map, paths, extra={op.value for op in CollectiveKind})
    for key, given in axis_map.items():
        if not given or any(a not in (0, 1) for a in given):
            raise LogFormatError(f"--axis-map: '{key}' maps to {list(given)}; axes are 0 and 1")
    groups: dict[tuple[CollectiveKind, int], list[Measurement]] = {}
    unmapped: list[str] = []
    for measurement in logs.measurements:
        axes: Sequence[int] | None = file_value(axis_map, measurement.source)
        if axes is None and measurement.axis is not None:
            axes = (measurement.axis,)
        if axes is None:
            axes = axis_map.get(measurement.op.value, axis_map.get(WILDCARD))
        if axes is None:
            if measurement.source not in unmapped:
                unmapped.append(measurement.source)
            continue
        for axis in sorted(set(axes)):
            groups.setdefault((measurement.op, axis), []).append(measurement)
    if unmapped:
        raise LogFormatError(
            f"{', '.join(unmapped)}: the log does not say which mesh axis it measured (one ring "
            "only); pass --axis-map FILE=0|1|both, --axis-map OP=0|1|both or --axis-map '*=both'"
        )
    return groups


def _fit_links(
    groups: Mapping[tuple[CollectiveKind, int], list[Measurement]],
    min_shard_bytes: float | None,
) -> tuple[list[LinkFit], list[LinkFit]]:
    """One fit per (op, axis), and the copies: measurements mapped to both axes are fitted once
    and the fit mirrored to the other axis."""
    fits: list[LinkFit] = []
    copies: list[LinkFit] = []
    done: dict[tuple[CollectiveKind, tuple[int, ...]], LinkFit] = {}
    for (op, axis), measurements in sorted(
        groups.items(), key=lambda kv: (kv[0][0].value, kv[0][1])
    ):
        key = (op, tuple(id(m) for m in measurements))
        same = done.get(key)
        if same is not None:
            copies.append(dataclasses.replace(same, axis=axis))
            fits.append(copies[-1])
            continue
        done[key] = fit = fit_link(op, axis, measurements, min_shard_bytes=min_shard_bytes)
        fits.append(fit)
    return fits, copies


# --------------------------------------------------------------------------- records


def _fit_record(fit: LinkFit) -> FitRecord:
    return FitRecord(
        op=fit.op,
        axis=0 if fit.axis == 0 else 1,
        points=fit.points_in_fit,
        ring_sizes=list(fit.ring_sizes),
        r2=_sig(fit.r2),
        t_launch_ci95_s=_sig_pair(fit.t_launch_ci95_s),
        t_sync_ci95_s=_sig_pair(fit.t_sync_ci95_s),
        bw_ci95_bytes_per_s=_sig_pair(fit.bw_ci95_bytes_per_s),
        loo_mape_ge_1mb=None if fit.loo_mape_ge_1mb is None else _sig(fit.loo_mape_ge_1mb, 4),
        confounded=fit.confounded,
        min_shard_bytes=fit.min_shard_bytes,
        loo_mape_ge_1mb_all_sizes=(
            None
            if fit.loo_mape_ge_1mb_all_sizes is None
            else _sig(fit.loo_mape_ge_1mb_all_sizes, 4)
        ),
        notes=list(fit.notes),
    )


def _compute_record(fit: ComputeFit) -> ComputeFitRecord:
    return ComputeFitRecord(
        points=len(fit.points),
        dtype=fit.dtype,
        r2=None if fit.r2 is None else _sig(fit.r2),
        effective_flops_ci95_per_s=_sig_pair(fit.effective_flops_ci95_per_s),
        overhead_s=None if fit.overhead_s is None else _sig(fit.overhead_s, 4),
        half_efficiency_flops=(
            None if fit.half_efficiency_flops is None else _sig(fit.half_efficiency_flops, 4)
        ),
        notes=list(fit.notes),
    )


def _file_source(logs: ParsedLogs) -> list[str]:
    lines = []
    for f in logs.files:
        label = _FORMAT_LABEL[f.format]
        if f.measurements:
            ops = ", ".join(sorted({m.op.value for m in f.measurements}))
            ranks = ", ".join(str(r) for r in sorted({m.ranks for m in f.measurements}))
            lines.append(f"{f.path}: {label} log, {ops}, P = {ranks}, {len(f.measurements)} points")
        else:
            dtypes = ", ".join(sorted({g.dtype for g in f.gemms}))
            lines.append(f"{f.path}: {label}, {dtypes}, {len(f.gemms)} GeMMs")
    return lines


# --------------------------------------------------------------------------- assembly


@dataclass
class _Picker:
    """Chooses each profile value by precedence (option > logs > base) and records where from."""

    base: HardwareProfile | None
    origins: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)

    def pick(self, field: str, option: Any, logs: tuple[Any, str] | None, remedy: str) -> Any:
        if option is not None:
            self.origins.append((field, "command-line option"))
            return option
        if logs is not None:
            self.origins.append((field, logs[1]))
            return logs[0]
        if self.base is not None:
            self.origins.append((field, f"base profile '{self.base.name}'"))
            return getattr(self.base, field)
        self.missing.append(f"{field} ({remedy})")
        return None


def _link_params(
    picker: _Picker, op: CollectiveKind, axis: int, fit: LinkFit | None
) -> LinkParams | None:
    """The (op, axis) triple: the fit, else the base profile's, else recorded as missing."""
    field = f"{op.value}.axis{axis}"
    if fit is not None:
        picker.origins.append((field, f"fit of {fit.points_in_fit} measurements"))
        return LinkParams(
            t_launch_s=_sig(fit.t_launch_s),
            t_sync_s=_sig(fit.t_sync_s),
            bw_bytes_per_s=_sig(fit.bw_bytes_per_s),
        )
    if picker.base is not None:
        picker.origins.append((field, f"base profile '{picker.base.name}'"))
        return picker.base.link(op, axis)
    picker.missing.append(
        f"{op.value} axis {axis} (no logs for it; add logs, map one with --axis-map, or pass "
        "--base)"
    )
    return None


def _origin_sources(picker: _Picker, base: HardwareProfile | None) -> list[str]:
    """``sources`` lines for the model, the values given as options and those of ``base``."""
    lines = [_MODEL.format(version=__version__)]
    lines += [
        f"{field}: given on the command line"
        for field, origin in picker.origins
        if origin == "command-line option"
    ]
    from_base = [field for field, origin in picker.origins if origin.startswith("base profile")]
    if base is not None and from_base:
        lines.append(
            f"base profile '{base.name}' supplies {', '.join(from_base)}; its sources: "
            + " | ".join(base.sources)
        )
    return lines


def _description(
    logs: ParsedLogs,
    links: Sequence[LinkFit],
    compute: ComputeFit | None,
    picker: _Picker,
    base: HardwareProfile | None,
) -> str:
    axes_of: dict[str, list[str]] = {}
    for fit in links:
        axes_of.setdefault(fit.op.value, []).append(str(fit.axis))
    what = [", ".join(f"{op} (axis {', '.join(axes)})" for op, axes in axes_of.items())]
    if compute is not None:
        what.append(f"effective FLOPS from {len(compute.points)} GeMMs")
    text = f"Calibrated by meshtune calibrate from {len(logs.files)} log(s): " + "; ".join(
        w for w in what if w
    )
    if base is not None and any(o.startswith("base profile") for _, o in picker.origins):
        text += f"; other values from base profile '{base.name}'"
    return text


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
) -> CalibrationResult:
    """Fit every (op, axis) the logs cover and assemble the profile named ``name``.

    ``axis_map`` maps a file, an op (``all_gather``) or ``"*"`` to mesh axes (``(0,)``,
    ``(1,)`` or ``(0, 1)``) for logs that do not state theirs. Values the logs cannot give come
    from the options or ``base``; a value none gives is a :class:`ProfileError` naming it.
    ``min_shard_bytes`` fixes the regime cutoff instead of choosing it. ``sources`` are added
    to the generated provenance (cite where the logs come from).
    """
    groups = _assign_axes(logs, axis_map or {})
    links, copies = _fit_links(groups, min_shard_bytes)
    compute = fit_compute(logs.gemms) if logs.gemms else None
    fit_notes = [
        f"{fit.op.value} axis {fit.axis}: {n}"
        for fit in links
        if not any(fit is copy for copy in copies)
        for n in fit.notes
    ]
    warnings = list(fit_notes)
    mirrored = [
        f"{copy.op.value} axis {copy.axis}: the fit of axis {1 - copy.axis}, from the same "
        "measurements (one ring mapped to both axes with --axis-map)"
        for copy in copies
    ]
    picker = _Picker(base)

    fitted = {(fit.op, fit.axis): fit for fit in links}
    axis_params: dict[str, dict[str, LinkParams]] = {}
    for op in CollectiveKind:
        per_axis = [_link_params(picker, op, axis, fitted.get((op, axis))) for axis in (0, 1)]
        if per_axis[0] is not None and per_axis[1] is not None:
            axis_params[op.value] = {"axis0": per_axis[0], "axis1": per_axis[1]}

    gemm_flops = None
    gemm_width = None
    if compute is not None:
        gemm_flops = (_sig(compute.effective_flops_per_s), f"fit of {len(compute.points)} GeMMs")
        width = BYTES_PER_ELEMENT.get(compute.dtype)
        if width is not None:
            gemm_width = (width, f"GeMM dtype {compute.dtype}")
        if effective_flops_per_s is not None:
            warnings.append(
                f"--effective-flops {effective_flops_per_s:g} overrides the GeMM fit "
                f"({compute.effective_flops_per_s:.4g} FLOP/s)"
            )
        if bytes_per_element is not None and width is not None and width != bytes_per_element:
            warnings.append(
                f"--bytes-per-element {bytes_per_element} differs from the GeMM dtype "
                f"{compute.dtype} ({width} bytes)"
            )
    peak = picker.pick("peak_flops_per_s", peak_flops_per_s, None, "pass --peak-flops or --base")
    effective = picker.pick(
        "effective_flops_per_s",
        effective_flops_per_s,
        gemm_flops,
        "pass --effective-flops, GeMM logs or --base",
    )
    width_value = picker.pick(
        "bytes_per_element", bytes_per_element, gemm_width, "pass --bytes-per-element or --base"
    )
    block = picker.pick("slice_block", slice_block, None, "pass --slice-block or --base")
    if picker.missing:
        raise ProfileError("cannot build the profile, nothing gives: " + "; ".join(picker.missing))
    if effective > peak:
        origins = dict(picker.origins)
        raise ProfileError(
            f"effective FLOPS {effective:.4g} ({origins['effective_flops_per_s']}) exceeds peak "
            f"FLOPS {peak:.4g} ({origins['peak_flops_per_s']})"
        )

    source_list = [*_file_source(logs), *sources, *_origin_sources(picker, base)]
    if description is None:
        description = _description(logs, links, compute, picker, base)

    notes = [*logs.left_out, *mirrored, *fit_notes]
    if logs.skipped:
        shown = logs.skipped[:_SKIPPED_SHOWN]
        more = len(logs.skipped) - len(shown)
        notes.append(f"{len(logs.skipped)} unparseable line(s) skipped, first: {logs.skipped[0]}")
        count = f"{len(logs.skipped)} unparseable line(s) skipped"
        if more:
            count += f" ({more} more not shown; --json lists them all)"
        warnings[:0] = [*(f"skipped {issue}" for issue in shown), count]
    warnings[:0] = logs.left_out
    calibration = Calibration(
        tool=f"meshtune {__version__}",
        source_files=[f.path for f in logs.files],
        fits=[_fit_record(fit) for fit in links],
        compute=_compute_record(compute) if compute is not None else None,
        notes=notes,
    )
    try:
        profile = HardwareProfile(
            name=name,
            description=description,
            sources=source_list,
            peak_flops_per_s=peak,
            effective_flops_per_s=effective,
            bytes_per_element=width_value,
            slice_block=block,
            all_gather=axis_params["all_gather"],
            reduce_scatter=axis_params["reduce_scatter"],
            send_recv=axis_params["send_recv"],
            calibration=calibration,
        )
    except ValidationError as exc:
        raise ProfileError(
            f"calibrated profile is invalid: {describe_validation_error(exc)}"
        ) from None
    return CalibrationResult(
        profile=profile,
        links=tuple(links),
        compute=compute,
        logs=logs,
        origins=tuple(picker.origins),
        warnings=tuple(warnings),
    )


def profile_toml(result: CalibrationResult) -> str:
    """The profile as TOML in the ``profiles/`` schema (its name is the file stem, not written).

    It loads back with :func:`meshtune.specs.load_profile` into an equal profile.
    """
    data = result.profile.model_dump(mode="json", exclude={"name"}, exclude_none=True)
    header = [
        f"Hardware profile written by meshtune calibrate {__version__} (see calibration below).",
        "axis0 = ring of the P_r chips of one mesh column (inter-row traffic, AG_row / RdS_row);",
        "axis1 = ring of the P_c chips of one mesh row (inter-column traffic, AG_col / RdS_col).",
        "cost = t_launch + (P - 1) * (t_sync + shard_bytes / bw); send_recv: one shift, P - 1 = 1.",
        "All values in SI base units: seconds, bytes per second, FLOP per second.",
    ]
    return dumps(data, header)
