"""Least-squares fit of the MeshSlice communication model to measured collective times.

One fit per op kind and mesh axis, of ``cost_op = t_launch + (P − 1)·(t_sync + sizeof(shard) /
bw)`` (§3.2.2): the model and its regime cutoff are :mod:`~meshtune.calibrate.link_model`, the
robust fit and its intervals :mod:`~meshtune.calibrate.regression`, the per-ring-size check
:mod:`~meshtune.calibrate.rings`. :func:`fit_link` turns them into the
:class:`~meshtune.hardware.calibration.FitRecord` a profile stores, with the notes that say where
the model falls short.

Uncertainty: the bw interval is the inverse of the 1/bw one. When that interval reaches 0 the
times do not grow significantly with the shard size and no bandwidth is fitted (an error).
Quality: R² of the fitted times, and the leave-one-size-out MAPE over shards ≥ 1 MiB. The plan
keeps the three parameters; the report names the regime cutoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from meshtune.calibrate.formats.log_units import format_bytes
from meshtune.calibrate.formats.ops import ring_steps
from meshtune.calibrate.formats.records import Measurement
from meshtune.calibrate.link_model import (
    TARGET_MAPE,
    LinkData,
    LinkSolution,
    choose_cutoff,
    loo_mape,
    solve_link,
)
from meshtune.calibrate.regression import interval, r_squared, sig, sig_opt, sig_pair
from meshtune.calibrate.rings import ring_check
from meshtune.calibrate.solve import t_quantile_975
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import FitRecord, MeasuredOp


@dataclass(frozen=True)
class PointFit:
    """One measurement against the fitted model."""

    measurement: Measurement
    predicted_s: float
    in_fit: bool

    @property
    def rel_error(self) -> float:
        """(predicted − measured) / measured."""
        return (self.predicted_s - self.measurement.seconds) / self.measurement.seconds


@dataclass(frozen=True)
class LinkFit:
    """One fit of ``record.op`` on ``record.axis``: the record a profile stores, and every point
    against the model (for the report, ``--json`` and the residual plot)."""

    record: FitRecord
    points: tuple[PointFit, ...]


def fit_link(
    op: MeasuredOp,
    axis: int,
    measurements: Sequence[Measurement],
    *,
    min_shard_bytes: float | None = None,
) -> LinkFit:
    """Fit t_launch, t_sync and bw of ``op`` on ``axis`` to ``measurements`` (module doc).

    ``min_shard_bytes`` restricts the fit to shards at least that large; without it a cutoff
    is chosen automatically when one fit over every size misses the 10 % LOO target. Raises
    :class:`LogFormatError` when the data cannot determine a bandwidth.
    """
    label = f"{op.value} axis {axis}"
    data = LinkData(
        k=np.array([ring_steps(m.op, m.ranks) for m in measurements], dtype=float),
        s=np.array([m.shard_bytes for m in measurements], dtype=float),
        t=np.array([m.seconds for m in measurements], dtype=float),
        w=np.array([m.repeats for m in measurements], dtype=float),
    )
    ranks = np.array([m.ranks for m in measurements], dtype=np.int64)
    try:
        return _fit_link(op, axis, measurements, data, ranks, min_shard_bytes)
    except LogFormatError as exc:
        raise LogFormatError(f"{label}: {exc}") from None


@dataclass(frozen=True)
class _Regime:
    """The shards a fit uses: ``cutoff`` (None: every size) and its ``mask``, the LOO MAPE of one
    fit over every size (``full``) and of the fit at the cutoff (``loo``), and whether the
    cutoff was ``chosen`` automatically (else given by the user, or none)."""

    cutoff: float | None
    mask: NDArray[np.bool_]
    full: float | None
    loo: float | None
    chosen: bool


def _regime(data: LinkData, min_shard_bytes: float | None) -> _Regime:
    """The user's cutoff ``min_shard_bytes``, else the one :func:`choose_cutoff` picks."""
    everything = np.ones(len(data.t), dtype=bool)
    if min_shard_bytes is not None:
        mask = data.s >= min_shard_bytes
        full = loo_mape(data, everything)
        loo = loo_mape(data, mask) if mask.any() else None
        return _Regime(min_shard_bytes, mask, full, loo, chosen=False)
    cutoff, full, loo = choose_cutoff(data)
    mask = data.s >= cutoff if cutoff is not None else everything
    return _Regime(cutoff, mask, full, loo, chosen=cutoff is not None)


def _intervals(solution: LinkSolution) -> list[tuple[float, float] | None]:
    """95 % intervals of (t_launch, t_sync, 1/bw); ``None`` without a covariance, and for
    t_sync when it is confounded with t_launch."""
    ci: list[tuple[float, float] | None] = [None, None, None]
    if solution.cov is not None:
        quantile = t_quantile_975(solution.dof)
        ci = [
            interval(float(solution.theta[i]), float(solution.cov[i, i]), quantile)
            for i in range(3)
        ]
        if solution.confounded:
            ci[1] = None
    return ci


def _fit_link(
    op: MeasuredOp,
    axis: int,
    measurements: Sequence[Measurement],
    data: LinkData,
    ranks: NDArray[np.int64],
    min_shard_bytes: float | None,
) -> LinkFit:
    regime = _regime(data, min_shard_bytes)
    fitted = data.subset(regime.mask)
    if len(np.unique(fitted.s)) < 2:
        cutoff = regime.cutoff
        where = f" at or above {format_bytes(cutoff)}" if cutoff is not None else ""
        raise LogFormatError(
            f"the logs have fewer than two shard sizes{where}; a bandwidth needs two or more"
        )
    solution = solve_link(fitted)
    t_launch, t_sync, inverse_bw = (float(v) for v in solution.theta)
    ci = _intervals(solution)
    inverse_ci = ci[2]
    if inverse_bw <= 0 or (inverse_ci is not None and inverse_ci[0] <= 0):
        raise LogFormatError(
            "the times do not grow significantly with the shard size, so no bandwidth can be fitted"
        )
    bw_ci = (1.0 / inverse_ci[1], 1.0 / inverse_ci[0]) if inverse_ci is not None else None
    ring_sizes = sorted({m.ranks for m in measurements})
    notes = _model_notes(op, solution, ring_sizes, float(fitted.k[0]), t_launch)
    rings, consistent, ring_notes = ring_check(data, ranks, regime.mask, solution)
    notes += ring_notes
    predicted = solution.predict(data.k, data.s)
    notes += _regime_notes(regime, data, predicted)
    record = FitRecord(
        op=op,
        axis=0 if axis == 0 else 1,
        t_launch_s=sig(t_launch),
        t_sync_s=sig(t_sync),
        bw_bytes_per_s=sig(1.0 / inverse_bw),
        points=int(regime.mask.sum()),
        points_measured=len(measurements),
        ring_sizes=ring_sizes,
        r2=sig(r_squared(fitted.t, solution.predict(fitted.k, fitted.s), fitted.w)),
        t_launch_ci95_s=sig_pair(ci[0]),
        t_sync_ci95_s=sig_pair(ci[1]),
        bw_ci95_bytes_per_s=sig_pair(bw_ci),
        loo_mape_ge_1mb=sig_opt(regime.loo),
        confounded=solution.confounded,
        min_shard_bytes=regime.cutoff,
        cutoff_chosen=regime.chosen,
        loo_mape_ge_1mb_all_sizes=sig_opt(regime.full) if regime.cutoff is not None else None,
        per_ring=rings,
        rings_consistent=consistent,
        notes=notes,
    )
    points = tuple(
        PointFit(m, float(p), bool(inside))
        for m, p, inside in zip(measurements, predicted, regime.mask, strict=True)
    )
    return LinkFit(record, points)


def _model_notes(
    op: MeasuredOp, solution: LinkSolution, ring_sizes: Sequence[int], steps: float, t_launch: float
) -> list[str]:
    """What the model's form implies for this fit: a confounded t_sync, and an all-reduce fit
    standing for two kinds."""
    notes: list[str] = []
    if solution.confounded:
        notes.append(_confounding_note(op, ring_sizes, steps, t_launch))
    if op is MeasuredOp.ALL_REDUCE:
        notes.append(
            "fitted from all-reduce times as a reduce-scatter then an all-gather on the same "
            "ring (2(P − 1) steps on shards of size / P): one (t_launch, t_sync, bw) for both"
        )
    return notes


def _confounding_note(
    op: MeasuredOp, ring_sizes: Sequence[int], steps: float, t_launch: float
) -> str:
    if op is MeasuredOp.SEND_RECV:
        why = "send_recv is timed as one ring shift, whatever the ring size"
        remedy = "a one-shift benchmark cannot separate them"
    else:
        why = f"one ring size only, P = {ring_sizes[0]}"
        remedy = "time two or more ring sizes to separate them"
    return (
        f"t_sync and t_launch are confounded ({why}): every measurement has {steps:g} ring "
        f"step(s), so t_launch = {t_launch * 1e6:.3g} µs holds t_launch + {steps:g}·t_sync and "
        f"t_sync is set to 0; {remedy}"
    )


def _regime_notes(regime: _Regime, data: LinkData, predicted: NDArray[np.float64]) -> list[str]:
    """Which shards the fit used and how the sizes outside fare, and whether the LOO MAPE
    meets the 10 % target."""
    notes: list[str] = []
    cutoff, full, loo = regime.cutoff, regime.full, regime.loo
    if cutoff is not None:
        below = ~regime.mask
        source = "chosen automatically" if regime.chosen else "set by the user"
        text = (
            f"fitted over the bandwidth-dominated regime, shards >= {format_bytes(cutoff)} "
            f"({source}); "
        )
        if regime.chosen and full is not None and loo is not None:
            text += (
                f"one fit over every size misses the {TARGET_MAPE:.0%} target (LOO MAPE "
                f"{full:.1%}), this one reaches {loo:.1%}"
            )
        if below.any():
            worst = float(np.max(np.abs(predicted[below] - data.t[below]) / data.t[below]))
            count = int(below.sum())
            text += (
                f"; {count} smaller-shard point{'s are' if count > 1 else ' is'} outside the "
                f"fitted range (model off by up to {worst:.0%})"
            )
        notes.append(text.rstrip("; "))
    if loo is None:
        notes.append("no shards >= 1 MiB: leave-one-size-out error not computed")
    elif loo > TARGET_MAPE:
        notes.append(
            f"LOO MAPE {loo:.1%} misses the {TARGET_MAPE:.0%} target: one linear model does not "
            "describe these times well"
        )
    return notes
