"""Least-squares fit of the MeshSlice cost model to measured collective and GeMM times.

Communication (§3.2.2): ``cost_op = t_launch + (P − 1)·(t_sync + sizeof(shard) / bw)`` per op
kind and mesh axis. A measurement i with ``k_i`` ring steps (P_i − 1 for all-gather and
reduce-scatter; 2(P_i − 1) for a ring all-reduce, a reduce-scatter then an all-gather on the
same ring; 1 for send/recv, which every supported benchmark times as one shift to the ring
neighbour) and per-rank shard ``s_i`` is modelled as

    t_i ≈ t_launch + k_i·t_sync + k_i·s_i / bw,

linear in (t_launch, t_sync, 1/bw). §4.5 sets t_sync by comparing chip counts and finds bw and
t_launch by regression over shard sizes; here the three come from one joint fit over every ring
size and shard size, which is the same model solved at once. The residuals are relative,
(model − t) / t, weighted by √repeats, because the times span five decades; the loss is
soft-L1 (``f_scale`` 5 %) with bounds ≥ 0, solved by iteratively reweighted least squares
(:mod:`~meshtune.calibrate.solve`, NumPy only).

Uncertainty: covariance s²·(JᵀJ)⁻¹ of the relative-residual Jacobian at the solution, with
s² = Σ w·r² / (n − p); 95 % intervals use Student's t with n − p degrees of freedom (a table,
:func:`~meshtune.calibrate.solve.t_quantile_975`) and are
clipped at 0; the bw interval is the inverse of the 1/bw one. When that interval reaches 0 the
times do not grow significantly with the shard size and no bandwidth is fitted (an error).

Identifiability: when every measurement has the same number of steps k (one ring size, or
send/recv), t_sync and t_launch are confounded. The fit then has two parameters; the intercept
t_launch + k·t_sync is reported as t_launch and t_sync is 0, and the fit says so.

Quality: R² of the fitted times, and the leave-one-size-out MAPE over shards ≥ 1 MiB: every
shard size in turn is left out, the model refitted and the left-out times predicted.

Several ring sizes: the joint fit gives t_launch and t_sync (the P-dependence); each P is also
fitted on its own (intercept t_launch + k·t_sync, and bw) and the joint model's error at each P
is reported. The rings are consistent when the joint model meets the 10 % target at every P;
undetermined when it misses a P whose own line misses too. When the joint model misses the
target at some P that its own line fits within 5 %, no single parameter set explains every P
(typically a ring that crosses from an intra-node link to the network between two sizes): the
fit says so and suggests the split of the ring sizes into two groups that each one parameter
set explains.

Regimes: real GPU logs show a flat latency region and protocol switches, which one line over
all sizes cannot follow. When that fit misses the 10 % target, the fit is restricted to the
bandwidth-dominated regime, shards ≥ a cutoff: the candidate cutoffs are the measured sizes
(keeping ≥ 3 sizes), each scored by the same out-of-sample MAPE over shards ≥ 1 MiB (sizes below
the cutoff are then predicted by extrapolation); the smallest cutoff within one point of the
best score wins. To keep that to a few robust fits, every candidate is first scored with the
closed-form weighted least squares (all at once, from per-size normal equations:
:mod:`~meshtune.calibrate.screen`), and only those within 3 points of the best are scored with
the robust fit the rule compares. The plan keeps the three parameters; the report names the cutoff.

Compute (§3.2.2, §4.5, §5.3.1), in the form the shipped GPU profiles use: F, the effective
FLOPS, is the best throughput any measured size achieves (per size the median over its GeMMs;
the "maximum achievable matmul FLOPS" convention), and the efficiency curve is each size's
achieved throughput / F (capped at 1), with ``overhead_s = 0``: the timed calls include their
launch, which the curve carries, so the profile reproduces every measured time, time =
FLOPs / (F·efficiency). With one size F is its mean achieved throughput and there is no curve.
For the report, a line time = overhead + FLOPs / F_line is also fitted (soft-L1, relative
residuals); its overhead and f½ = overhead·F_line, the FLOPs at which a GeMM reaches half of
F_line, describe where small GeMMs fall off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from meshtune.calibrate._common import GemmMeasurement, Measurement, format_bytes, ring_steps
from meshtune.calibrate.screen import screen_scores
from meshtune.calibrate.solve import robust_nonnegative, t_quantile_975
from meshtune.errors import LogFormatError
from meshtune.hardware.profile import ComputeFitRecord, FitRecord, MeasuredOp, RingFit

TARGET_MAPE = 0.10
"""The leave-one-size-out error a fit should reach (fraction)."""

LOO_MIN_SHARD_BYTES = 2**20
"""Shards at least this large enter the leave-one-size-out error (1 MiB)."""

_F_SCALE = 0.05
_CUTOFF_TOLERANCE = 0.01
_SCREEN_MARGIN = 0.03
"""Cutoffs whose closed-form LOO score is within 3 points of the best are scored robustly."""

Array = NDArray[np.float64]


def _sig(value: float, digits: int = 6) -> float:
    """``value`` rounded to ``digits`` significant digits (the fits are not more precise)."""
    return float(f"{value:.{digits}g}")


def _sig_pair(pair: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if pair is None else (_sig(pair[0], 4), _sig(pair[1], 4))


def _sig_opt(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else _sig(value, digits)


@dataclass(frozen=True)
class _Linear:
    """A bounded robust linear fit of relative residuals: params, covariance, dof."""

    params: Array
    cov: Array | None
    dof: int


def _robust_linear(
    design: Array, t: Array, w: Array, *, robust: bool = True, cov: bool = True
) -> _Linear:
    """Minimise Σ ρ(√w·(design·θ − t)/t) over θ ≥ 0 (ρ: soft-L1, 5 % scale; ``robust=False``:
    ρ(r) = r², the closed-form weighted least squares).

    Raises :class:`LogFormatError` when the data make the problem degenerate (non-finite
    entries, a failed solve) instead of letting LAPACK fail.
    """
    sw = np.sqrt(w)
    with np.errstate(all="ignore"):
        a = design / t[:, None] * sw[:, None]
        norm = np.linalg.norm(a, axis=0)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(norm)) and np.all(np.isfinite(sw))):
        raise LogFormatError("the measurements are degenerate (non-finite after scaling)")
    norm[norm == 0] = 1.0
    b = a / norm
    try:
        q: Array = robust_nonnegative(b, sw, _F_SCALE if robust else None)
    except (np.linalg.LinAlgError, ValueError) as exc:
        raise LogFormatError(f"the least-squares fit failed ({exc})") from None
    dof = len(t) - design.shape[1]
    covariance = None
    if dof > 0 and cov:
        residual = b @ q - sw
        s2 = float(residual @ residual) / dof
        covariance = s2 * np.linalg.pinv(b.T @ b) / np.outer(norm, norm)
    return _Linear(params=q / norm, cov=covariance, dof=dof)


def _interval(value: float, variance: float, quantile: float) -> tuple[float, float]:
    half = quantile * float(np.sqrt(max(variance, 0.0)))
    return (max(0.0, value - half), value + half)


def _r2(t: Array, predicted: Array, w: Array) -> float:
    mean = float(np.average(t, weights=w))
    total = float(np.sum(w * (t - mean) ** 2))
    residual = float(np.sum(w * (t - predicted) ** 2))
    if total == 0.0:
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total


# --------------------------------------------------------------------------- collectives


@dataclass(frozen=True)
class _Data:
    k: Array
    s: Array
    t: Array
    w: Array

    def subset(self, mask: NDArray[np.bool_]) -> _Data:
        return _Data(self.k[mask], self.s[mask], self.t[mask], self.w[mask])


@dataclass(frozen=True)
class _Solution:
    theta: Array  # t_launch, t_sync, 1/bw
    cov: Array | None  # 3 × 3, zero rows/columns for a parameter that was not fitted
    dof: int
    confounded: bool

    def predict(self, k: Array, s: Array) -> Array:
        result: Array = self.theta[0] + k * self.theta[1] + k * s * self.theta[2]
        return result


def _solve(data: _Data, *, robust: bool = True, cov: bool = True) -> _Solution:
    """The fit of ``data``; ``robust=False``: closed form; ``cov=False``: no covariance (a
    leave-one-size-out fit needs only the parameters)."""
    confounded = len(np.unique(data.k)) < 2
    ones = np.ones_like(data.k)
    columns = [ones, data.k * data.s] if confounded else [ones, data.k, data.k * data.s]
    fit = _robust_linear(np.column_stack(columns), data.t, data.w, robust=robust, cov=cov)
    index = [0, 2] if confounded else [0, 1, 2]
    theta = np.zeros(3)
    theta[index] = fit.params
    full: Array | None = None
    if fit.cov is not None:
        full = np.zeros((3, 3))
        full[np.ix_(index, index)] = fit.cov
    return _Solution(theta, full, fit.dof, confounded)


def _loo_mape(data: _Data, fit_mask: NDArray[np.bool_], *, robust: bool = True) -> float | None:
    """Mean |relative error| at shards ≥ 1 MiB, each size predicted by a fit without it
    (``robust=False``: by the closed-form weighted least squares, to screen cutoffs)."""
    errors: list[float] = []
    outside: _Solution | None = None
    for size in np.unique(data.s[data.s >= LOO_MIN_SHARD_BYTES]):
        held = data.s == size
        train = fit_mask & ~held
        if len(np.unique(data.s[train])) < 2:
            continue
        if not np.any(fit_mask & held):  # below the cutoff: the regime fit never saw it
            outside = outside or _solve(data.subset(train), robust=robust, cov=False)
            solution = outside
        else:
            solution = _solve(data.subset(train), robust=robust, cov=False)
        predicted = solution.predict(data.k[held], data.s[held])
        errors.extend(np.abs(predicted - data.t[held]) / data.t[held])
    return float(np.mean(errors)) if errors else None


def _choose_cutoff(data: _Data) -> tuple[float | None, float | None, float | None]:
    """(cutoff or None, MAPE over every size, MAPE at the cutoff); see the module doc."""
    everything = np.ones(len(data.t), dtype=bool)
    full = _loo_mape(data, everything)
    if full is None or full <= TARGET_MAPE:
        return None, full, full
    screened = screen_scores(
        data.k,
        data.s,
        data.t,
        data.w,
        LOO_MIN_SHARD_BYTES,
        lambda train: _solve(data.subset(train), robust=False, cov=False).theta,
    )
    if screened is None:  # not finite once scaled
        return None, full, full
    if not screened:
        return None, full, full
    near = min(score for _, score in screened) + _SCREEN_MARGIN
    scores = [
        (cutoff, score)
        for cutoff, quick in screened
        if quick <= near and (score := _loo_mape(data, data.s >= cutoff)) is not None
    ]
    if not scores:
        return None, full, full
    best = min(score for _, score in scores)
    cutoff, score = next((c, m) for c, m in scores if m <= best + _CUTOFF_TOLERANCE)
    if score >= full:
        return None, full, full
    return cutoff, full, score


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


def _mape(solution: _Solution, data: _Data) -> float:
    predicted = solution.predict(data.k, data.s)
    return float(np.mean(np.abs(predicted - data.t) / data.t))


def _ring_fits(
    data: _Data, ranks: NDArray[np.int64], mask: NDArray[np.bool_], joint: _Solution
) -> list[RingFit]:
    """Per ring size: its own line over the fitted range, and the joint model's error there."""
    rings: list[RingFit] = []
    for p in np.unique(ranks[mask]):
        at = data.subset(mask & (ranks == p))
        own: _Solution | None = None
        if len(np.unique(at.s)) >= 2:
            try:
                own = _solve(at)
            except LogFormatError:
                own = None
        rings.append(
            RingFit(
                ranks=int(p),
                points=len(at.t),
                intercept_s=_sig(float(own.theta[0]) if own else float(np.min(at.t))),
                bw_bytes_per_s=_sig(1 / own.theta[2]) if own and own.theta[2] > 0 else None,
                mape_joint=_sig(_mape(joint, at), 4),
                mape_own=_sig(_mape(own, at), 4) if own else None,
            )
        )
    return rings


def _split_note(data: _Data, ranks: NDArray[np.int64], mask: NDArray[np.bool_]) -> str:
    """Which grouping of the ring sizes into P ≤ x and P > x two parameter sets explain best."""
    sizes = sorted(int(p) for p in np.unique(ranks[mask]))
    best: tuple[float, int, list[str]] | None = None
    for cut in range(1, len(sizes)):
        parts: list[str] = []
        worst = 0.0
        for group in (sizes[:cut], sizes[cut:]):
            sub = data.subset(mask & np.isin(ranks, group))
            if len(np.unique(sub.s)) < 2:
                break
            try:
                solution = _solve(sub)
            except LogFormatError:
                break
            worst = max(worst, _mape(solution, sub))
            label = f"P = {group[0]}" if len(group) == 1 else f"P = {group[0]}–{group[-1]}"
            parts.append(f"{label}: bw {1e-9 / solution.theta[2]:.3g} GB/s")
        else:
            if best is None or worst < best[0]:
                best = (worst, cut, parts)
    if best is None:
        return "no split of the ring sizes into two groups fits better"
    worst, cut, parts = best
    return (
        f"two parameter sets fit within {worst:.1%}: {'; '.join(parts)}; rings up to P = "
        f"{sizes[cut - 1]} likely stay on one link (e.g. inside a node) and larger ones cross "
        "another (e.g. the network): give each group's logs to the mesh axis whose ring it "
        "matches (--axis-map FILE=0|1)"
    )


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
    data = _Data(
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


def _fit_link(
    op: MeasuredOp,
    axis: int,
    measurements: Sequence[Measurement],
    data: _Data,
    ranks: NDArray[np.int64],
    min_shard_bytes: float | None,
) -> LinkFit:
    notes: list[str] = []
    cutoff: float | None
    if min_shard_bytes is not None:
        cutoff, mask = min_shard_bytes, data.s >= min_shard_bytes
        full = _loo_mape(data, np.ones(len(data.t), dtype=bool))
        loo = _loo_mape(data, mask) if mask.any() else None
    else:
        cutoff, full, loo = _choose_cutoff(data)
        mask = data.s >= cutoff if cutoff is not None else np.ones(len(data.t), dtype=bool)
    chosen = min_shard_bytes is None and cutoff is not None
    fitted = data.subset(mask)
    if len(np.unique(fitted.s)) < 2:
        where = f" at or above {format_bytes(cutoff)}" if cutoff is not None else ""
        raise LogFormatError(
            f"the logs have fewer than two shard sizes{where}; a bandwidth needs two or more"
        )
    solution = _solve(fitted)
    t_launch, t_sync, inverse_bw = (float(v) for v in solution.theta)
    ci: list[tuple[float, float] | None] = [None, None, None]
    if solution.cov is not None:
        quantile = t_quantile_975(solution.dof)
        ci = [
            _interval(float(solution.theta[i]), float(solution.cov[i, i]), quantile)
            for i in range(3)
        ]
        if solution.confounded:
            ci[1] = None
    inverse_ci = ci[2]
    if inverse_bw <= 0 or (inverse_ci is not None and inverse_ci[0] <= 0):
        raise LogFormatError(
            "the times do not grow significantly with the shard size, so no bandwidth can be fitted"
        )
    bw_ci = (1.0 / inverse_ci[1], 1.0 / inverse_ci[0]) if inverse_ci is not None else None
    ring_sizes = sorted({m.ranks for m in measurements})
    if solution.confounded:
        notes.append(_confounding_note(op, ring_sizes, float(fitted.k[0]), t_launch))
    if op is MeasuredOp.ALL_REDUCE:
        notes.append(
            "fitted from all-reduce times as a reduce-scatter then an all-gather on the same "
            "ring (2(P − 1) steps on shards of size / P): one (t_launch, t_sync, bw) for both"
        )
    rings: list[RingFit] = []
    consistent: bool | None = None
    if len(np.unique(ranks[mask])) >= 2 and not solution.confounded:
        rings = _ring_fits(data, ranks, mask, solution)
        off = [
            r
            for r in rings
            if r.mape_joint > TARGET_MAPE
            and r.mape_own is not None
            and r.mape_own <= TARGET_MAPE / 2
        ]
        missed = [r for r in rings if r.mape_joint > TARGET_MAPE and r not in off]
        consistent = False if off else (None if missed else True)
        if missed and not off:
            where = ", ".join(
                f"P = {r.ranks} ({r.mape_joint:.0%}, its own line {r.mape_own or 0:.0%})"
                for r in missed
            )
            notes.append(
                f"the joint model misses {where}, but so does that P's own line: the times are "
                "not linear in the shard size there, which no choice of ring sizes explains"
            )
        if off:
            where = ", ".join(f"P = {r.ranks} ({r.mape_joint:.0%})" for r in off)
            notes.append(
                "no single (t_launch, t_sync, bw) explains every ring size: the joint model "
                f"misses {where} where that P's own line fits; " + _split_note(data, ranks, mask)
            )
    predicted = solution.predict(data.k, data.s)
    if cutoff is not None:
        below = ~mask
        source = "chosen automatically" if chosen else "set by the user"
        text = (
            f"fitted over the bandwidth-dominated regime, shards >= {format_bytes(cutoff)} "
            f"({source}); "
        )
        if chosen and full is not None and loo is not None:
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
    record = FitRecord(
        op=op,
        axis=0 if axis == 0 else 1,
        t_launch_s=_sig(t_launch),
        t_sync_s=_sig(t_sync),
        bw_bytes_per_s=_sig(1.0 / inverse_bw),
        points=int(mask.sum()),
        points_measured=len(measurements),
        ring_sizes=ring_sizes,
        r2=_sig(_r2(fitted.t, solution.predict(fitted.k, fitted.s), fitted.w)),
        t_launch_ci95_s=_sig_pair(ci[0]),
        t_sync_ci95_s=_sig_pair(ci[1]),
        bw_ci95_bytes_per_s=_sig_pair(bw_ci),
        loo_mape_ge_1mb=_sig_opt(loo),
        confounded=solution.confounded,
        min_shard_bytes=cutoff,
        cutoff_chosen=chosen,
        loo_mape_ge_1mb_all_sizes=_sig_opt(full) if cutoff is not None else None,
        per_ring=rings,
        rings_consistent=consistent,
        notes=notes,
    )
    points = tuple(
        PointFit(m, float(p), bool(inside))
        for m, p, inside in zip(measurements, predicted, mask, strict=True)
    )
    return LinkFit(record, points)


# --------------------------------------------------------------------------- compute


@dataclass(frozen=True)
class GemmFit:
    """One timed GeMM against the fitted compute model."""

    gemm: GemmMeasurement
    achieved_flops_per_s: float
    efficiency: float


@dataclass(frozen=True)
class ComputeFit:
    """The compute fit: the record a profile stores, its efficiency curve, every GeMM, and per
    distinct size its median achieved throughput (``rates``: (FLOPs, FLOP/s), to re-base the
    curve on an effective rate given by the user)."""

    record: ComputeFitRecord
    curve: tuple[tuple[float, float], ...]
    points: tuple[GemmFit, ...]
    rates: tuple[tuple[float, float], ...] = ()

    def curve_for(self, effective: float) -> tuple[tuple[float, float], ...]:
        """The curve relative to ``effective``: achieved / effective per size, capped at 1."""
        return tuple((f, _sig(min(1.0, rate / effective), 4)) for f, rate in self.rates)


def _size_rates(flops: Array, t: Array) -> tuple[tuple[float, float], ...]:
    """(FLOPs, median achieved FLOP/s) per distinct GeMM size, FLOPs increasing."""
    return tuple((float(f), float(np.median(f / t[flops == f]))) for f in np.unique(flops))


def fit_compute(gemms: Sequence[GemmMeasurement]) -> ComputeFit:
    """F, the efficiency curve and the line fit of GeMM timings of one dtype (module doc)."""
    dtypes = sorted({g.dtype for g in gemms})
    if len(dtypes) != 1:
        raise LogFormatError(
            f"GeMM logs mix operand types ({', '.join(dtypes)}); give the timings of the "
            "plan's operand type only"
        )
    flops = np.array([g.flops for g in gemms])
    t = np.array([g.seconds for g in gemms])
    w = np.array([g.repeats for g in gemms], dtype=float)
    achieved = flops / t
    notes: list[str] = []
    rates: tuple[tuple[float, float], ...] = ()
    if len(np.unique(flops)) < 2:
        effective = float(np.average(achieved, weights=w))
        ci = None
        if len(t) > 1:
            spread = float(np.std(achieved, ddof=1)) / np.sqrt(len(t))
            ci = _interval(effective, spread**2, t_quantile_975(len(t) - 1))
        overhead = half = r2 = None
        notes.append(
            "one GeMM size: effective FLOPS is its mean achieved throughput; time GeMMs of "
            "several sizes for the small-GeMM efficiency curve"
        )
    else:
        fit = _robust_linear(np.column_stack([np.ones_like(flops), flops]), t, w)
        overhead, inverse = (float(v) for v in fit.params)
        if inverse <= 0:
            raise LogFormatError("GeMM times do not grow with the FLOP count; cannot fit FLOPS")
        rates = _size_rates(flops, t)
        best_flops, effective = max(rates, key=lambda pair: pair[1])
        ci = None
        half = overhead / inverse
        r2 = _r2(t, overhead + flops * inverse, w)
        notes.append(
            f"effective FLOPS = the best median throughput of a size ({effective:.4g} FLOP/s at "
            f"{best_flops:.4g} FLOPs); the efficiency curve is each size's achieved / effective "
            f"with overhead_s = 0 (the timed calls include their launch); the line time = "
            f"overhead + FLOPs / F fits overhead {overhead * 1e6:.3g} µs, F {1 / inverse:.4g}"
        )
    record = ComputeFitRecord(
        points=len(gemms),
        dtype=dtypes[0],
        effective_flops_per_s=_sig(effective),
        r2=_sig_opt(r2, 6),
        effective_flops_ci95_per_s=_sig_pair(ci),
        overhead_s=_sig_opt(overhead),
        half_efficiency_flops=_sig_opt(half),
        notes=notes,
    )
    result = ComputeFit(
        record=record,
        curve=(),
        points=tuple(
            GemmFit(g, float(a), float(a) / effective) for g, a in zip(gemms, achieved, strict=True)
        ),
        rates=rates,
    )
    return replace(result, curve=result.curve_for(effective))
