"""The MeshSlice communication model solved on arrays of measurements: the joint fit, its
leave-one-size-out error, and the choice of the bandwidth-dominated regime.

Communication (§3.2.2): ``cost_op = t_launch + (P − 1)·(t_sync + sizeof(shard) / bw)`` per op
kind and mesh axis. A measurement i with ``k_i`` ring steps (P_i − 1 for all-gather and
reduce-scatter; 2(P_i − 1) for a ring all-reduce, a reduce-scatter then an all-gather on the
same ring; 1 for send/recv, which every supported benchmark times as one shift to the ring
neighbour) and per-rank shard ``s_i`` is modelled as

    t_i ≈ t_launch + k_i·t_sync + k_i·s_i / bw,

linear in (t_launch, t_sync, 1/bw). §4.5 sets t_sync by comparing chip counts and finds bw and
t_launch by regression over shard sizes; here the three come from one joint fit over every ring
size and shard size, which is the same model solved at once
(:func:`~meshtune.calibrate.regression.robust_linear`).

Identifiability: when every measurement has the same number of steps k (one ring size, or
send/recv), t_sync and t_launch are confounded. The fit then has two parameters; the intercept
t_launch + k·t_sync is reported as t_launch and t_sync is 0, and the fit says so.

Quality: the leave-one-size-out MAPE over shards ≥ 1 MiB: every shard size in turn is left out,
the model refitted and the left-out times predicted.

Regimes: real GPU logs show a flat latency region and protocol switches, which one line over
all sizes cannot follow. When that fit misses the 10 % target, the fit is restricted to the
bandwidth-dominated regime, shards ≥ a cutoff: the candidate cutoffs are the measured sizes
(keeping ≥ 3 sizes), each scored by the same out-of-sample MAPE over shards ≥ 1 MiB (sizes below
the cutoff are then predicted by extrapolation); the smallest cutoff within one point of the
best score wins. To keep that to a few robust fits, every candidate is first scored with the
closed-form weighted least squares (all at once, from per-size normal equations:
:mod:`~meshtune.calibrate.screen`), and only those within 3 points of the best are scored with
the robust fit the rule compares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from meshtune.calibrate.regression import Array, robust_linear
from meshtune.calibrate.screen import screen_scores

TARGET_MAPE = 0.10
"""The leave-one-size-out error a fit should reach (fraction)."""

LOO_MIN_SHARD_BYTES = 2**20
"""Shards at least this large enter the leave-one-size-out error (1 MiB)."""

_CUTOFF_TOLERANCE = 0.01
_SCREEN_MARGIN = 0.03
"""Cutoffs whose closed-form LOO score is within 3 points of the best are scored robustly."""


@dataclass(frozen=True)
class LinkData:
    """Measurements as columns: ring steps ``k``, shard bytes ``s``, seconds ``t`` and fit
    weights ``w`` (repeats)."""

    k: Array
    s: Array
    t: Array
    w: Array

    def subset(self, mask: NDArray[np.bool_]) -> LinkData:
        """The measurements where ``mask`` holds."""
        return LinkData(self.k[mask], self.s[mask], self.t[mask], self.w[mask])


@dataclass(frozen=True)
class LinkSolution:
    """A solved link model: θ = (t_launch, t_sync, 1/bw), its covariance (3 × 3, zero rows and
    columns for a parameter not fitted), degrees of freedom, and whether t_sync is confounded."""

    theta: Array
    cov: Array | None
    dof: int
    confounded: bool

    def predict(self, k: Array, s: Array) -> Array:
        """t_launch + k·t_sync + k·s / bw."""
        result: Array = self.theta[0] + k * self.theta[1] + k * s * self.theta[2]
        return result


def solve_link(data: LinkData, *, robust: bool = True, cov: bool = True) -> LinkSolution:
    """The fit of ``data``; ``robust=False``: closed form; ``cov=False``: no covariance (a
    leave-one-size-out fit needs only the parameters)."""
    confounded = len(np.unique(data.k)) < 2
    ones = np.ones_like(data.k)
    columns = [ones, data.k * data.s] if confounded else [ones, data.k, data.k * data.s]
    fit = robust_linear(np.column_stack(columns), data.t, data.w, robust=robust, cov=cov)
    index = [0, 2] if confounded else [0, 1, 2]
    theta = np.zeros(3)
    theta[index] = fit.params
    full: Array | None = None
    if fit.cov is not None:
        full = np.zeros((3, 3))
        full[np.ix_(index, index)] = fit.cov
    return LinkSolution(theta, full, fit.dof, confounded)


def mape(solution: LinkSolution, data: LinkData) -> float:
    """Mean |relative error| of ``solution`` over ``data``."""
    predicted = solution.predict(data.k, data.s)
    return float(np.mean(np.abs(predicted - data.t) / data.t))


def loo_mape(data: LinkData, fit_mask: NDArray[np.bool_], *, robust: bool = True) -> float | None:
    """Mean |relative error| at shards ≥ 1 MiB, each size predicted by a fit without it
    (``robust=False``: by the closed-form weighted least squares, to screen cutoffs)."""
    errors: list[float] = []
    outside: LinkSolution | None = None
    for size in np.unique(data.s[data.s >= LOO_MIN_SHARD_BYTES]):
        held = data.s == size
        train = fit_mask & ~held
        if len(np.unique(data.s[train])) < 2:
            continue
        if not np.any(fit_mask & held):  # below the cutoff: the regime fit never saw it
            outside = outside or solve_link(data.subset(train), robust=robust, cov=False)
            solution = outside
        else:
            solution = solve_link(data.subset(train), robust=robust, cov=False)
        predicted = solution.predict(data.k[held], data.s[held])
        errors.extend(np.abs(predicted - data.t[held]) / data.t[held])
    return float(np.mean(errors)) if errors else None


def choose_cutoff(data: LinkData) -> tuple[float | None, float | None, float | None]:
    """(cutoff or None, MAPE over every size, MAPE at the cutoff); see the module doc."""
    everything = np.ones(len(data.t), dtype=bool)
    full = loo_mape(data, everything)
    if full is None or full <= TARGET_MAPE:
        return None, full, full
    screened = screen_scores(
        data.k,
        data.s,
        data.t,
        data.w,
        LOO_MIN_SHARD_BYTES,
        lambda train: solve_link(data.subset(train), robust=False, cov=False).theta,
    )
    if screened is None:  # not finite once scaled
        return None, full, full
    if not screened:
        return None, full, full
    near = min(score for _, score in screened) + _SCREEN_MARGIN
    scores = [
        (cutoff, score)
        for cutoff, quick in screened
        if quick <= near and (score := loo_mape(data, data.s >= cutoff)) is not None
    ]
    if not scores:
        return None, full, full
    best = min(score for _, score in scores)
    cutoff, score = next((c, m) for c, m in scores if m <= best + _CUTOFF_TOLERANCE)
    if score >= full:
        return None, full, full
    return cutoff, full, score
