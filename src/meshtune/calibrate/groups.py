"""Measurements into fits: each measurement's mesh axes, one fit per (op, axis), and which
profile entry each fit supplies (a dedicated log, else an all-reduce: a ring all-reduce is a
reduce-scatter then an all-gather on the same ring, MeshSlice §3.2.2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath

from meshtune.calibrate.formats.detect import ParsedLogs
from meshtune.calibrate.formats.file_keys import WILDCARD, check_keys, file_value
from meshtune.calibrate.formats.records import Measurement
from meshtune.calibrate.link_fit import LinkFit, fit_link
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import FitRecord, MeasuredOp
from meshtune.hardware.links import CollectiveKind

Groups = dict[tuple[MeasuredOp, int], list[Measurement]]


def assign_axes(
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


def fit_groups(groups: Groups, min_shard_bytes: float | None) -> tuple[list[LinkFit], list[str]]:
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


def mark_tier(fits: Sequence[LinkFit], tier: str) -> list[LinkFit]:
    """The fits of one tier, each recording the tier and the kinds it supplies there."""
    marked = []
    for fit in fits:
        used = [MeasuredOp(k.value) for k in CollectiveKind if supplying_fit(fits, k, 0) is fit]
        record = fit.record.model_copy(update={"tier": tier, "used_for": used})
        marked.append(LinkFit(record, fit.points))
    return marked


def supplying_fit(fits: Sequence[LinkFit], kind: CollectiveKind, axis: int) -> LinkFit | None:
    """The fit that supplies ``kind`` on ``axis``: a dedicated one, else an all-reduce one."""
    by_op: dict[tuple[MeasuredOp, int], LinkFit] = {(f.record.op, f.record.axis): f for f in fits}
    dedicated = by_op.get((MeasuredOp(kind.value), axis))
    if dedicated is not None:
        return dedicated
    if kind in MeasuredOp.ALL_REDUCE.kinds:
        return by_op.get((MeasuredOp.ALL_REDUCE, axis))
    return None


def mark_uses(
    fits: list[LinkFit],
) -> tuple[list[LinkFit], dict[tuple[CollectiveKind, int], LinkFit]]:
    """Record in each fit which profile entries it supplies."""
    supplier = {
        (kind, axis): fit
        for kind in CollectiveKind
        for axis in (0, 1)
        if (fit := supplying_fit(fits, kind, axis)) is not None
    }
    marked: list[LinkFit] = []
    for fit in fits:
        used = [MeasuredOp(k.value) for (k, a), f in supplier.items() if f is fit]
        marked.append(LinkFit(fit.record.model_copy(update={"used_for": used}), fit.points))
    index = {id(old): new for old, new in zip(fits, marked, strict=True)}
    return marked, {key: index[id(fit)] for key, fit in supplier.items()}


def all_to_all_fit(fits: Sequence[LinkFit]) -> LinkFit | None:
    """The all-to-all fit that stands for an ``all_to_all`` link (one per profile or tier, not
    per mesh axis): of ``fits``' all-to-all fits the one of the lowest bandwidth (an expert
    group's all-to-all is paced by its slowest link), the first of equals; None without one."""
    found = [f for f in fits if f.record.op is MeasuredOp.ALL_TO_ALL]
    return min(found, key=lambda f: f.record.bw_bytes_per_s, default=None)


def mark_all_to_all(fits: Sequence[LinkFit], supplying: Sequence[LinkFit]) -> list[LinkFit]:
    """``fits`` with ``all_to_all`` recorded in the ``used_for`` of those in ``supplying`` and
    of their mirrors on the other axis (the same ring)."""
    chosen = {(f.record.tier, f.record.axis) for f in supplying}

    def supplies(record: FitRecord) -> bool:
        axis = record.axis if record.mirrored_from_axis is None else record.mirrored_from_axis
        return record.op is MeasuredOp.ALL_TO_ALL and (record.tier, axis) in chosen

    return [
        LinkFit(
            fit.record.model_copy(
                update={"used_for": [*fit.record.used_for, MeasuredOp.ALL_TO_ALL]}
            ),
            fit.points,
        )
        if supplies(fit.record)
        else fit
        for fit in fits
    ]
