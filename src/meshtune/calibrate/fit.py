"""Least-squares fit of the MeshSlice cost model to measured collective and GeMM times.

Communication (§3.2.2): ``cost_op = t_launch + (P − 1)·(t_sync + sizeof(shard) / bw)`` per op
kind and mesh axis. A measurement i with ``k_i`` ring steps (P_i − 1 for all-gather and
reduce-scatter; 1 for send/recv, which every supported benchmark times as one shift to the ring
neighbour) and per-rank shard ``s_i`` is modelled as

    t_i ≈ t_launch + k_i·t_sync + k_i·s_i / bw,

linear in (t_launch, t_sync, 1/bw). §4.5 sets t_sync by comparing chip counts and finds bw and
t_launch by regression over shard sizes; here the three come from one joint fit over every ring
size and shard size, which is the same model solved at once. The residuals are relative,
(model − t) / t, weighted by √repeats, because the times span five decades; the solver is
``scipy.optimize.least_squares`` with the soft-L1 loss (``f_scale`` 5 %) and bounds ≥ 0.

Uncertainty: covariance s²·(JᵀJ)⁻¹ of the relative-residual Jacobian at the solution, with
s² = Σ w·r² / (n − p); 95 % intervals use Student's t with n − p degrees of freedom and are
clipped at 0; the bw interval is the inverse of the 1/bw one. When that interval reaches 0 the
times do not grow significantly with the shard size and no bandwidth is fitted (an error).

Identifiability: when every measurement has the same number of steps k (one ring size, or
send/recv), t_sync and t_launch are confounded. The fit then has two parameters; the intercept
t_launch + k·t_sync is reported as t_launch and t_sync is 0, and the fit says so.

Quality: R² of the fitted times, and the leave-one-size-out MAPE over shards ≥ 1 MiB: every
shard size in turn is left out, the model refitted and the left-out times predicted.

Regimes: real GPU logs show a flat latency region and protocol switches, which one line over
all sizes cannot follow. When that fit misses the 10 % target, the fit is restricted to the
bandwidth-dominated regime, shards ≥ a cutoff: the candidate cutoffs are the measured sizes
(keeping ≥ 3 sizes), each scored by the same out-of-sample MAPE over shards ≥ 1 MiB (sizes below
the cutoff are then predicted by extrapolation); the smallest cutoff within one point of the
best score wins. The plan keeps the three parameters; the report names the cutoff.

Compute (§3.2.2, §4.5): time = overhead + FLOPs / F for GeMMs of one operand type; F is the
effective FLOPS. With GeMMs of several sizes the overhead gives a small-GeMM efficiency curve,
efficiency(f) = f / (f + f½), f½ = overhead·F; with one size F is its mean achieved throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from meshtune.calibrate._common import GemmMeasurement, Measurement, format_bytes
from meshtune.errors import LogFormatError
from meshtune.specs import CollectiveKind

TARGET_MAPE = 0.10
"""The leave-one-size-out error a fit should reach (fraction)."""

LOO_MIN_SHARD_BYTES = 2**20
"""Shards at least this large enter the leave-one-size-out error (1 MiB)."""

_F_SCALE = 0.05
_CUTOFF_TOLERANCE = 0.01

Array = NDArray[np.float64]


def ring_steps(op: CollectiveKind, ranks: int) -> int:
    """Ring steps of one measured op: P − 1 for all-gather / reduce-scatter, 1 for send/recv."""
    return 1 if op is CollectiveKind.SEND_RECV else ranks - 1


@dataclass(frozen=True)
class _Linear:
    """A bounded robust linear fit of relative residuals: params, covariance, dof."""

    params: Array
    cov: Array | None
    dof: int


def _robust_linear(design: Array, t: Array, w: Array) -> _Linear:
    """Minimise Σ ρ(√w·(design·θ − t)/t) over θ ≥ 0 (ρ: soft-L1, 5 % scale)."""
    from scipy.optimize import least_squares

    sw = np.sqrt(w)
    a = design / t[:, None] * sw[:, None]
    norm = np.linalg.norm(a, axis=0)
    norm[norm == 0] = 1.0
    b = a / norm
    start = np.linalg.lstsq(b, sw, rcond=None)[0]
    start = np.maximum(start, 1e-6 * max(float(np.max(np.abs(start))), 1e-12))
    result = least_squares(
        lambda q: b @ q - sw,
        start,
        jac=lambda q: b,
        bounds=(0.0, np.inf),
        loss="soft_l1",
        f_scale=_F_SCALE,
    )
    q: Array = result.x
    dof = len(t) - design.shape[1]
    cov = None
    if dof > 0:
        residual = b @ q - sw
        s2 = float(residual @ residual) / dof
        cov = s2 * np.linalg.pinv(b.T @ b) / np.outer(norm, norm)
    return _Linear(params=q / norm, cov=cov, dof=dof)


def _t_quantile(dof: int) -> float:
    from scipy.stats import t as student

    return float(student.ppf(0.975, dof))


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


def _solve(data: _Data) -> _Solution:
    confounded = len(np.unique(data.k)) < 2
    ones = np.ones_like(data.k)
    columns = [ones, data.k * data.s] if confounded else [ones, data.k, data.k * data.s]
    fit = _robust_linear(np.column_stack(columns), data.t, data.w)
    index = [0, 2] if confounded else [0, 1, 2]
    theta = np.zeros(3)
    theta[index] = fit.params
    cov = None
    if fit.cov is not None:
        cov = np.zeros((3, 3))
        cov[np.ix_(index, index)] = fit.cov
    return _Solution(theta, cov, fit.dof, confounded)


def _loo_mape(data: _Data, fit_mask: NDArray[np.bool_]) -> float | None:
    """Mean |relative error| at shards ≥ 1 MiB, each size predicted by a fit without it."""
    errors: list[float] = []
    outside: _Solution | None = None
    for size in np.unique(data.s[data.s >= LOO_MIN_SHARD_BYTES]):
        held = data.s == size
        train = fit_mask & ~held
        if len(np.unique(data.s[train])) < 2:
            continue
        if not np.any(fit_mask & held):  # below the cutoff: the regime fit never saw it
            outside = outside or _solve(data.subset(train))
            solution = outside
        else:
            solution = _solve(data.subset(train))
        predicted = solution.predict(data.k[held], data.s[held])
        errors.extend(np.abs(predicted - data.t[held]) / data.t[held])
    return float(np.mean(errors)) if errors else None


def _choose_cutoff(data: _Data) -> tuple[float | None, float | None, float | None]:
    """(cutoff or None, MAPE over every size, MAPE at the cutoff); see the module doc."""
    everything = np.ones(len(data.t), dtype=bool)
    full = _loo_mape(data, everything)
    if full is None or full <= TARGET_MAPE:
        return None, full, full
    scores: list[tuple[float, float]] = []
    for cutoff in np.unique(data.s)[1:]:
        mask = data.s >= cutoff
        if len(np.unique(data.s[mask])) < 3:
            break
        score = _loo_mape(data, mask)
        if score is not None:
            scores.append((float(cutoff), score))
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
    """The fitted (t_launch, t_sync, bw) of one op kind on one mesh axis, and its quality."""

    op: CollectiveKind
    axis: int
    t_launch_s: float
    t_sync_s: float
    bw_bytes_per_s: float
    t_launch_ci95_s: tuple[float, float] | None
    t_sync_ci95_s: tuple[float, float] | None
    bw_ci95_bytes_per_s: tuple[float, float] | None
    r2: float
    ring_sizes: tuple[int, ...]
    confounded: bool
    min_shard_bytes: float | None
    cutoff_chosen: bool
    loo_mape_ge_1mb: float | None
    loo_mape_ge_1mb_all_sizes: float | None
    points: tuple[PointFit, ...]
    notes: tuple[str, ...]

    @property
    def points_in_fit(self) -> int:
        """Measurements the final fit used."""
        return sum(1 for p in self.points if p.in_fit)


def _confounding_note(
    op: CollectiveKind, ring_sizes: Sequence[int], steps: float, t_launch: float
) -> str:
    if op is CollectiveKind.SEND_RECV:
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


def fit_link(
    op: CollectiveKind,
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
            f"{label}: the logs have fewer than two shard sizes{where}; a bandwidth needs two "
            "or more"
        )
    solution = _solve(fitted)
    t_launch, t_sync, inverse_bw = (float(v) for v in solution.theta)
    ci: list[tuple[float, float] | None] = [None, None, None]
    if solution.cov is not None:
        quantile = _t_quantile(solution.dof)
        ci = [
            _interval(float(solution.theta[i]), float(solution.cov[i, i]), quantile)
            for i in range(3)
        ]
        if solution.confounded:
            ci[1] = None
    inverse_ci = ci[2]
    if inverse_bw <= 0 or (inverse_ci is not None and inverse_ci[0] <= 0):
        raise LogFormatError(
            f"{label}: the times do not grow significantly with the shard size, so no "
            "bandwidth can be fitted"
        )
    bw_ci = (1.0 / inverse_ci[1], 1.0 / inverse_ci[0]) if inverse_ci is not None else None
    ring_sizes = tuple(sorted({m.ranks for m in measurements}))
    if solution.confounded:
        notes.append(_confounding_note(op, ring_sizes, float(fitted.k[0]), t_launch))
    predicted = solution.predict(data.k, data.s)
    if cutoff is not None:
        below = ~mask
        source = "chosen automatically" if chosen else "--min-bytes"
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
            text += (
                f"; the {int(below.sum())} smaller-shard points are outside the fitted range "
                f"(model off by up to {worst:.0%})"
            )
        notes.append(text.rstrip("; "))
    if loo is None:
        notes.append("no shards >= 1 MiB: leave-one-size-out error not computed")
    elif loo > TARGET_MAPE:
        notes.append(
            f"LOO MAPE {loo:.1%} misses the {TARGET_MAPE:.0%} target: one linear model does not "
            "describe these times well"
        )
    return LinkFit(
        op=op,
        axis=axis,
        t_launch_s=t_launch,
        t_sync_s=t_sync,
        bw_bytes_per_s=1.0 / inverse_bw,
        t_launch_ci95_s=ci[0],
        t_sync_ci95_s=ci[1],
        bw_ci95_bytes_per_s=bw_ci,
        r2=_r2(fitted.t, solution.predict(fitted.k, fitted.s), fitted.w),
        ring_sizes=ring_sizes,
        confounded=solution.confounded,
        min_shard_bytes=cutoff,
        cutoff_chosen=chosen,
        loo_mape_ge_1mb=loo,
        loo_mape_ge_1mb_all_sizes=full if cutoff is not None else None,
        points=tuple(
            PointFit(m, float(p), bool(inside))
            for m, p, inside in zip(measurements, predicted, mask, strict=True)
        ),
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------- compute


@dataclass(frozen=True)
class GemmFit:
    """One timed GeMM against the fitted compute model."""

    gemm: GemmMeasurement
    achieved_flops_per_s: float
    efficiency: float


@dataclass(frozen=True)
class ComputeFit:
    """Effective FLOPS fitted from GeMM timings, with the small-GeMM overhead when known."""

    dtype: str
    effective_flops_per_s: float
    effective_flops_ci95_per_s: tuple[float, float] | None
    overhead_s: float | None
    half_efficiency_flops: float | None
    r2: float | None
    points: tuple[GemmFit, ...]
    notes: tuple[str, ...]


def fit_compute(gemms: Sequence[GemmMeasurement]) -> ComputeFit:
    """Fit time = overhead + FLOPs / F to GeMM timings of one dtype (module doc)."""
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
    if len(np.unique(flops)) < 2:
        effective = float(np.average(achieved, weights=w))
        ci = None
        if len(t) > 1:
            spread = float(np.std(achieved, ddof=1)) / np.sqrt(len(t))
            ci = _interval(effective, spread**2, _t_quantile(len(t) - 1))
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
        effective = 1.0 / inverse
        ci = None
        if fit.cov is not None:
            lo, hi = _interval(inverse, float(fit.cov[1, 1]), _t_quantile(fit.dof))
            ci = (1.0 / hi, 1.0 / lo) if lo > 0 else None
        half = overhead * effective
        r2 = _r2(t, overhead + flops * inverse, w)
    return ComputeFit(
        dtype=dtypes[0],
        effective_flops_per_s=effective,
        effective_flops_ci95_per_s=ci,
        overhead_s=overhead,
        half_efficiency_flops=half,
        r2=r2,
        points=tuple(
            GemmFit(g, float(a), float(a) / effective) for g, a in zip(gemms, achieved, strict=True)
        ),
        notes=tuple(notes),
    )
