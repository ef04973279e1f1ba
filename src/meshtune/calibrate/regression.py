"""The weighted robust linear fit of relative residuals that the link and compute fits share.

A fit minimises Σ ρ(√wᵢ·(design·θ − t)ᵢ / tᵢ) over θ ≥ 0: residuals relative to the measured
time, because the times span five decades, weighted by √repeats; ρ is the soft-L1 loss with a
5 % scale, solved by :func:`~meshtune.calibrate.solve.robust_nonnegative` (NumPy only).

Uncertainty: covariance s²·(JᵀJ)⁻¹ of the relative-residual Jacobian at the solution, with
s² = Σ w·r² / (n − p); 95 % intervals use Student's t with n − p degrees of freedom (a table,
:func:`~meshtune.calibrate.solve.t_quantile_975`) and are clipped at 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from meshtune.calibrate.solve import robust_nonnegative
from meshtune.errors import LogFormatError

_F_SCALE = 0.05

Array = NDArray[np.float64]


def sig(value: float, digits: int = 6) -> float:
    """``value`` rounded to ``digits`` significant digits (the fits are not more precise)."""
    return float(f"{value:.{digits}g}")


def sig_pair(pair: tuple[float, float] | None) -> tuple[float, float] | None:
    """Both ends of an interval to 4 significant digits (``None`` stays ``None``)."""
    return None if pair is None else (sig(pair[0], 4), sig(pair[1], 4))


def sig_opt(value: float | None, digits: int = 4) -> float | None:
    """:func:`sig` of a value that may be absent."""
    return None if value is None else sig(value, digits)


@dataclass(frozen=True)
class LinearFit:
    """A bounded robust linear fit of relative residuals: params, covariance, dof."""

    params: Array
    cov: Array | None
    dof: int


def robust_linear(
    design: Array, t: Array, w: Array, *, robust: bool = True, cov: bool = True
) -> LinearFit:
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
    return LinearFit(params=q / norm, cov=covariance, dof=dof)


def interval(value: float, variance: float, quantile: float) -> tuple[float, float]:
    """``value ± quantile·√variance``, the lower end clipped at 0."""
    half = quantile * float(np.sqrt(max(variance, 0.0)))
    return (max(0.0, value - half), value + half)


def r_squared(t: Array, predicted: Array, w: Array) -> float:
    """Weighted coefficient of determination of ``predicted`` against ``t`` (1 for a perfect
    fit of constant data, 0 for an imperfect one)."""
    mean = float(np.average(t, weights=w))
    total = float(np.sum(w * (t - mean) ** 2))
    residual = float(np.sum(w * (t - predicted) ** 2))
    if total == 0.0:
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total
