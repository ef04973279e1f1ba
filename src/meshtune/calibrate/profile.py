"""From parsed logs to a :class:`~meshtune.hardware.profile.HardwareProfile`, with its provenance.

Every value of the profile comes from exactly one place, recorded as a structured
:class:`~meshtune.hardware.calibration.Origin`: an explicit option, the logs (a fit), the ``base``
profile, or a stated default (bf16 operands, B = 8, effective FLOPS = peak when nothing measures
it). Precedence is option > logs > base > default. The peak FLOP/s has no default: without it (or
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
from typing import Any

from pydantic import ValidationError

from meshtune._toml import describe_validation_error
from meshtune._version import __version__
from meshtune.calibrate.assemble import (
    Picker,
    compute_values,
    description_of,
    file_sources,
    origin_sources,
)
from meshtune.calibrate.compute_fit import ComputeFit, fit_compute
from meshtune.calibrate.formats.detect import ParsedLogs
from meshtune.calibrate.groups import (
    all_to_all_fit,
    assign_axes,
    fit_groups,
    fit_label,
    mark_all_to_all,
    mark_tier,
    mark_uses,
    supplying_fit,
)
from meshtune.calibrate.inherit import base_origin, carried_fields, extra_axes
from meshtune.calibrate.link_fit import LinkFit
from meshtune.calibrate.result import CalibrationResult
from meshtune.calibrate.tiers import (
    NETWORK,
    TierSplit,
    build_tiers,
    check_systems,
    fit_origin,
    fit_params,
    op_groups,
    split_tiers,
)
from meshtune.errors import LogFormatError, ProfileError
from meshtune.hardware.calibration import Calibration, MeasuredOp, Origin
from meshtune.hardware.compute import GemmEfficiency
from meshtune.hardware.links import CollectiveKind, LinkParams, Tier
from meshtune.hardware.profile import HardwareProfile

__all__ = ["CalibrationResult", "fit_profile", "profile_toml"]

DEFAULT_BYTES_PER_ELEMENT = 2
DEFAULT_SLICE_BLOCK = 8

_SKIPPED_SHOWN = 10
"""Skipped lines listed one by one in the warnings; the rest are counted."""


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
    fitted = _fit_logs(logs, axis_map or {}, base, min_shard_bytes, pool=pool)
    links = fitted.axes + fitted.network
    warnings: list[str] = [*fitted.system_notes, *fitted.axis_notes, *fitted.failed]
    fit_notes = [
        f"{fit_label(fit.record)}: {n}"
        for fit in links
        if fit.record.mirrored_from_axis is None
        for n in fit.record.notes
    ]
    warnings += fit_notes
    picker = Picker(base, {}, [])
    axis_params = _axis_params(picker, base, fitted.supplier)
    options = _ComputeOptions(
        peak_flops_per_s, effective_flops_per_s, bytes_per_element, slice_block
    )
    compute = _compute_values(picker, fitted.compute, len(logs.gemms), options, warnings)
    carried = carried_fields(base, picker.origins)
    tiers, tier_notes, links = _tiers(picker, fitted, links, carried)
    notes, warnings = _notes_and_warnings(
        logs, base, fitted, links, tiers, tier_notes, fit_notes, warnings
    )
    calibration = Calibration(
        tool=f"meshtune {__version__}",
        source_files=[f.path for f in logs.files],
        origins=picker.origins,
        fits=[fit.record for fit in links],
        compute=fitted.compute.record if fitted.compute is not None else None,
        notes=notes,
    )
    profile = None
    if not picker.missing:
        fields = {
            "description": description
            or description_of(logs, links, fitted.compute, base, picker.origins),
            "sources": [*file_sources(logs), *sources, *origin_sources(picker.origins, base)],
            "peak_flops_per_s": compute.peak,
            "effective_flops_per_s": compute.effective,
            "bytes_per_element": compute.width,
            "slice_block": compute.block,
            **axis_params,
            "gemm_efficiency": compute.efficiency,
            **carried,
        }
        profile = _profile(name, fields, calibration)
    return CalibrationResult(
        profile=profile,
        calibration=calibration,
        links=tuple(links),
        compute=fitted.compute,
        logs=logs,
        warnings=tuple(warnings),
        missing=tuple(picker.missing),
    )


@dataclass(frozen=True)
class _Fitted:
    """The fits of one calibration: the mesh-axis fits marked with what they supply
    (``axes``) and the fit supplying each (kind, axis) (``supplier``), the network tier's
    fits, the compute fit, how the rings split into tiers, and the notes of each step."""

    split: TierSplit
    axes: list[LinkFit]
    supplier: dict[tuple[CollectiveKind, int], LinkFit]
    network: list[LinkFit]
    compute: ComputeFit | None
    failed: list[str]
    axis_notes: list[str]
    system_notes: list[str]


def _fit_logs(
    logs: ParsedLogs,
    axis_map: Mapping[str, Sequence[int]],
    base: HardwareProfile | None,
    min_shard_bytes: float | None,
    *,
    pool: bool,
) -> _Fitted:
    """Fit the measurements per (op, axis), rings over several hosts as the network tier
    unless they are all there is and ``base`` has no tiers, and the GeMMs. Raises
    :class:`LogFormatError` when no fit at all succeeds."""
    system_notes = check_systems(logs.measurements, pool=pool)
    split = split_tiers(logs.measurements)
    inter_on_axes = not split.intra and (base is None or not base.tiers)
    on_axes = split.inter if inter_on_axes else split.intra
    groups, axis_notes = assign_axes(logs, axis_map, on_axes)
    raw_fits, failed = fit_groups(groups, min_shard_bytes)
    network: list[LinkFit] = []
    if split.inter and not inter_on_axes:
        inter_fits, inter_failed = fit_groups(op_groups(split.inter), min_shard_bytes)
        failed += inter_failed
        network = mark_tier(inter_fits, NETWORK)
    compute = fit_compute(logs.gemms) if logs.gemms else None
    if not raw_fits and not network and compute is None:
        raise LogFormatError("; ".join(failed) or "no measurements to fit")
    axes, supplier = mark_uses(raw_fits)
    return _Fitted(split, axes, supplier, network, compute, failed, axis_notes, system_notes)


def _axis_params(
    picker: Picker,
    base: HardwareProfile | None,
    supplier: Mapping[tuple[CollectiveKind, int], LinkFit],
) -> dict[str, dict[str, LinkParams]]:
    """Per collective kind its link parameters per mesh axis: axes 0 and 1 from the fits or
    ``base``, the further axes of ``base``."""
    axis_params: dict[str, dict[str, LinkParams]] = {}
    for kind in CollectiveKind:
        per_axis = {f"axis{a}": picker.link(kind, a, supplier.get((kind, a))) for a in (0, 1)}
        axis_params[kind.value] = {k: v for k, v in per_axis.items() if v is not None}
    for kind_name, extra in extra_axes(base, picker.origins).items():
        axis_params[kind_name].update(extra)
    return axis_params


@dataclass(frozen=True)
class _ComputeOptions:
    """The compute values the user gave (``None``: not given)."""

    peak: float | None
    effective: float | None
    width: int | None
    block: int | None


@dataclass(frozen=True)
class _Compute:
    """The profile's compute values, each picked by precedence (``None``: missing)."""

    peak: float | None
    effective: float | None
    width: int | None
    block: int | None
    efficiency: GemmEfficiency | None


def _compute_values(
    picker: Picker,
    compute: ComputeFit | None,
    gemms: int,
    options: _ComputeOptions,
    warnings: list[str],
) -> _Compute:
    """Peak and effective FLOPS, operand width, slice block and GeMM efficiency, from the
    options, the compute fit of ``gemms`` GeMMs, the base profile or a stated default (their
    origins recorded in ``picker``). Raises :class:`ProfileError` when the effective FLOPS
    exceed the peak."""
    gemm_flops, gemm_width, efficiency = compute_values(
        compute, options.effective, options.width, warnings
    )
    peak = picker.pick(
        "peak_flops_per_s",
        options.peak,
        None,
        None,
        "the datasheet peak or a base profile",
    )
    effective = picker.pick(
        "effective_flops_per_s",
        options.effective,
        gemm_flops,
        (peak, "ASSUMED equal to peak_flops_per_s: no GeMM timings measure it")
        if peak is not None
        else (None, ""),
        "a measured value, GeMM logs or a base profile",
    )
    width = picker.pick(
        "bytes_per_element",
        options.width,
        gemm_width,
        (DEFAULT_BYTES_PER_ELEMENT, "assumed 2 (bf16 operands)"),
        "the operand width",
    )
    block = picker.pick(
        "slice_block",
        options.block,
        None,
        (DEFAULT_SLICE_BLOCK, "assumed 8 (Algorithm 2's B, MeshSlice §3.1.2)"),
        "the slice block",
    )
    base = picker.base
    if efficiency is not None:
        relative = "the given effective FLOPS" if options.effective else "the best of them"
        picker.origins["gemm_efficiency"] = Origin(
            kind="fit",
            detail=f"efficiency curve of {gemms} GeMMs, achieved / {relative}",
        )
    elif base is not None and base.gemm_efficiency is not None:
        efficiency = base.gemm_efficiency
        picker.origins["gemm_efficiency"] = base_origin(base)
    if peak is not None and effective is not None and effective > peak:
        raise ProfileError(
            f"effective FLOPS {effective:.4g} ({picker.origins['effective_flops_per_s'].detail}) "
            f"exceeds peak FLOPS {peak:.4g} ({picker.origins['peak_flops_per_s'].detail})"
        )
    return _Compute(peak, effective, width, block, efficiency)


def _tiers(
    picker: Picker, fitted: _Fitted, links: list[LinkFit], carried: dict[str, Any]
) -> tuple[list[Tier] | None, list[str], list[LinkFit]]:
    """The network tiers (into ``carried``), or else the profile's all-to-all link from the
    mesh axes' fit; with the tiers' notes and ``links`` marked with the all-to-all fits that
    supply something."""
    split, supplier, network = fitted.split, fitted.supplier, fitted.network
    axes_a2a = all_to_all_fit(fitted.axes)
    a2a = (axes_a2a if split.intra else None, all_to_all_fit(network))
    tiers, tier_notes = build_tiers(
        split,
        lambda kind: supplier.get((kind, 0)) if split.intra else None,
        lambda kind: supplying_fit(network, kind, 0),
        picker.base,
        picker.origins,
        a2a,
    )
    supplying = [f for f in a2a if f is not None] if tiers is not None else []
    base = picker.base
    if tiers is not None:
        carried["tiers"] = tiers
        picker.origins["tiers"] = Origin(kind="fit", detail=tier_notes[0])
    elif axes_a2a is not None and not (base is not None and base.tiers):
        carried["all_to_all"] = fit_params(axes_a2a)
        picker.origins["all_to_all"] = fit_origin(axes_a2a)
        supplying.append(axes_a2a)
    return tiers, tier_notes, mark_all_to_all(links, supplying)


def _notes_and_warnings(
    logs: ParsedLogs,
    base: HardwareProfile | None,
    fitted: _Fitted,
    links: list[LinkFit],
    tiers: list[Tier] | None,
    tier_notes: list[str],
    fit_notes: list[str],
    warnings: list[str],
) -> tuple[list[str], list[str]]:
    """The calibration's notes (what was left out, skipped, failed or unused, the fits' and
    the tiers' notes) and the warnings to print, the skipped lines first."""
    kept = base.name if tiers is None and base is not None and base.tiers else None
    unused = [
        f"{fit_label(f.record)}: not used in the profile ({_unused_reason(f, kept)})"
        for f in links
        if not f.record.used_for and f.record.mirrored_from_axis is None
    ]
    file_notes = [note for f in logs.files for note in f.notes]
    notes = [
        *logs.left_out,
        *file_notes,
        *fitted.axis_notes,
        *fitted.failed,
        *unused,
        *fit_notes,
    ]
    warnings = list(warnings)
    if logs.skipped:
        shown = logs.skipped[:_SKIPPED_SHOWN]
        more = len(logs.skipped) - len(shown)
        notes.append(f"{len(logs.skipped)} unparseable line(s) skipped, first: {logs.skipped[0]}")
        count = f"{len(logs.skipped)} unparseable line(s) skipped"
        if more:
            count += f" ({more} more not shown; --json lists them all)"
        warnings[:0] = [*(f"skipped {issue}" for issue in shown), count]
    warnings[:0] = logs.left_out
    notes += tier_notes
    warnings += tier_notes[int(tiers is not None) :]
    return notes, warnings


def _profile(name: str, fields: dict[str, Any], calibration: Calibration) -> HardwareProfile:
    """The profile of ``fields``; a value its schema refuses is a :class:`ProfileError`."""
    try:
        return HardwareProfile(name=name, **fields, calibration=calibration)
    except ValidationError as exc:
        raise ProfileError(
            f"calibrated profile is invalid: {describe_validation_error(exc)}"
        ) from None


def _unused_reason(fit: LinkFit, kept_tiers_of: str | None) -> str:
    """Why a fit supplies nothing: a dedicated log won, the tiers kept from the base profile
    named ``kept_tiers_of`` price all-to-alls (the tiers are fitted only from intra- and
    inter-node logs together), or a slower axis's all-to-all stands for the link."""
    if fit.record.op is not MeasuredOp.ALL_TO_ALL:
        return "dedicated all_gather and reduce_scatter logs win"
    if kept_tiers_of is not None:
        return (
            f"base profile '{kept_tiers_of}' prices all-to-alls per network tier; calibrate "
            "intra- and inter-node logs together to fit the tiers"
        )
    return "the slower axis's all_to_all fit stands for the all_to_all link"


_HEADER = (
    "Hardware profile written by meshtune calibrate {version} (see calibration below).",
    "axis0 = ring of the P_r chips of one mesh column (inter-row traffic, AG_row / RdS_row);",
    "axis1 = ring of the P_c chips of one mesh row (inter-column traffic, AG_col / RdS_col).",
    "cost = t_launch + (P - 1) * (t_sync + shard_bytes / bw); send_recv: one shift, P - 1 = 1.",
    "All values in SI base units: seconds, bytes per second, FLOP per second.",
)


def profile_toml(result: CalibrationResult) -> str:
    """The profile as TOML in the ``profiles/`` schema (its name is the file stem, not written),
    with a comment header; it loads back with :func:`meshtune.catalog.load_profile` into an equal
    profile. Raises :class:`ProfileError` naming what is missing when there is no profile."""
    import tomli_w

    if result.profile is None:
        raise ProfileError("cannot write a profile, nothing gives: " + "; ".join(result.missing))
    data = result.profile.model_dump(mode="json", exclude={"name"}, exclude_none=True)
    header = "".join(f"# {line}\n" for line in _HEADER).format(version=__version__)
    return header + "\n" + tomli_w.dumps(data)
