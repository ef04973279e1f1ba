"""The numerical kernels of the fits, in NumPy alone: a bounded robust linear least-squares
solve and Student's t quantile.

Robust solve: minimise Σ ρ(rᵢ / f) with the soft-L1 loss ρ(z²) = 2(√(1 + z²) − 1), f = 5 %,
over θ ≥ 0, rᵢ = (A·θ − b)ᵢ. The loss is smooth and convex, so Newton's method finds its one
minimum from the ordinary least-squares start in a few steps: with uᵢ = rᵢ / f, the gradient
is Aᵀ(u / √(1 + u²)) and the Hessian Aᵀ diag(1 / (1 + u²)^{3/2}) A / f (both over f); a step
that would raise the loss is halved. It stops at a relative change of 1e-10 in θ. Bounds by an
active set: a parameter that comes out negative is fixed at 0 and the rest refitted (two or
three parameters: a handful of small solves). The same minimum as
``scipy.optimize.least_squares(loss="soft_l1")``, without a general trust-region run per fit
and without importing scipy.

Student's t: the two-sided 95 % quantile t₀.₉₇₅(ν), from a table for ν ≤ 30 (Abramowitz &
Stegun, Table 26.10, to six digits) and the Cornish-Fisher expansion in 1/ν beyond it (A&S
26.7.5), whose error there is below 1e-6: no scipy.stats import (0.95 s) for one number.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]

_T975 = (
    12.7062,
    4.30265,
    3.18245,
    2.77645,
    2.57058,
    2.44691,
    2.36462,
    2.30600,
    2.26216,
    2.22814,
    2.20099,
    2.17881,
    2.16037,
    2.14479,
    2.13145,
    2.11991,
    2.10982,
    2.10092,
    2.09302,
    2.08596,
    2.07961,
    2.07387,
    2.06866,
    2.06390,
    2.05954,
    2.05553,
    2.05183,
    2.04841,
    2.04523,
    2.04227,
)
_Z975 = 1.959963984540054
"""The standard normal's 0.975 quantile."""


def t_quantile_975(dof: int) -> float:
    """Student's t 0.975 quantile with ``dof`` ≥ 1 degrees of freedom (module doc)."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z, v = _Z975, float(dof)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


_MAX_STEPS = 100
_TOLERANCE = 1e-10


def _loss(a: Array, b: Array, scale: float, theta: Array) -> float:
    u = (a @ theta - b) / scale
    return float(np.sum(np.sqrt(1.0 + u * u)))


def _newton(a: Array, b: Array, scale: float, start: Array) -> Array:
    """Soft-L1 minimum over the columns of ``a`` from ``start`` (unbounded): Newton steps on
    the weighted normal equations, each halved until the loss does not grow."""
    theta = start
    loss = _loss(a, b, scale, theta)
    for _ in range(_MAX_STEPS):
        u = (a @ theta - b) / scale
        root = np.sqrt(1.0 + u * u)
        gradient = a.T @ (u / root)
        hessian = (a.T * (1.0 / root**3)) @ a / scale
        try:
            step = np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(hessian, gradient, rcond=None)[0]
        for _ in range(60):
            trial = theta - step
            trial_loss = _loss(a, b, scale, trial)
            if trial_loss <= loss:
                break
            step = step / 2
        else:
            return theta
        done = float(np.max(np.abs(trial - theta))) <= _TOLERANCE * max(
            float(np.max(np.abs(trial))), 1e-300
        )
        theta, loss = np.asarray(trial, dtype=np.float64), trial_loss
        if done:
            break
    return theta


def robust_nonnegative(a: Array, b: Array, scale: float | None) -> Array:
    """θ ≥ 0 minimising Σ soft-L1((A·θ − b) / scale) (module doc); ``scale`` None: Σ (A·θ − b)²,
    the closed form. ``a`` has full column rank in practice (columns scaled to unit norm by the
    caller); raises ``LinAlgError`` from NumPy when it cannot be solved."""
    free = np.ones(a.shape[1], dtype=bool)
    theta = np.zeros(a.shape[1])
    while free.any():
        sub = a[:, free]
        start = np.asarray(np.linalg.lstsq(sub, b, rcond=None)[0], dtype=np.float64)
        fitted = start if scale is None else _newton(sub, b, scale, start)
        if np.all(fitted >= 0):
            theta[free] = fitted
            theta[~free] = 0.0
            return theta
        index = np.flatnonzero(free)[int(np.argmin(fitted))]
        free[index] = False  # the most negative parameter sits on its bound
    return theta
