"""Error statistics of the validation set: summary figures, Spearman rank agreement, prediction
intervals, and whether a plan lies inside the validated range.

Errors are signed relative errors ``e = predicted / published − 1``. MAPE is the mean of
``|e|``, bias the mean of ``e`` (negative: meshtune predicts too fast), all in percent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from meshtune.layers import fc_layers
from meshtune.specs import ModelSpec
from meshtune.step.memory import block_parameters

INTERVAL_COVERAGE = 0.9
"""The share of validated runs a prediction interval covers (issue 19 item 9)."""


@dataclass(frozen=True)
class Summary:
    """Error figures of ``n`` predictions, in percent."""

    n: int
    mape_pct: float
    median_pct: float
    max_pct: float
    bias_pct: float


def summarize(errors: Sequence[float]) -> Summary | None:
    """MAPE, median and max of ``|e|`` and the mean signed ``e`` (percent); None if empty."""
    if not errors:
        return None
    e = np.asarray(errors, dtype=float)
    a = np.abs(e)
    return Summary(
        n=len(e),
        mape_pct=float(100 * a.mean()),
        median_pct=float(100 * np.median(a)),
        max_pct=float(100 * a.max()),
        bias_pct=float(100 * e.mean()),
    )


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks of ``values``, ties given the mean of the ranks they span."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v), dtype=float)
    sorted_v = v[order]
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's ρ: the Pearson correlation of the average ranks of ``x`` and ``y``; None
    with fewer than 3 pairs or when either side is constant (no ranking to agree with)."""
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} values against {len(y)}")
    if len(x) < 3:
        return None
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((dx * dx).sum() * (dy * dy).sum()))
    if denominator == 0.0:
        return None
    return float((dx * dy).sum() / denominator)


def prediction_interval(errors: Sequence[float], coverage: float = INTERVAL_COVERAGE) -> float:
    """Half-width X (a fraction) such that ``coverage`` of the validated runs lie within ±X of
    their published step: the ⌈coverage · n⌉-th smallest ``|e|``. Raises ValueError on no
    errors or a coverage outside (0, 1]."""
    if not errors:
        raise ValueError("prediction_interval: no validated errors")
    if not 0 < coverage <= 1:
        raise ValueError(f"prediction_interval: coverage {coverage} is not in (0, 1]")
    a = np.sort(np.abs(np.asarray(errors, dtype=float)))
    k = math.ceil(round(coverage * len(a), 9))
    return float(a[k - 1])


def fc_parameters(model: ModelSpec) -> int:
    """FC weights of the model (blocks · Σ in · out; embeddings left out): its size for the
    validated-range check."""
    return int(model.blocks * block_parameters(fc_layers(model, 1, 1)))


@dataclass(frozen=True)
class ValidatedPoint:
    """What the range check needs of one validated run."""

    profile: str
    chips: int
    parameters: int


@dataclass(frozen=True)
class RangeCheck:
    """Whether a plan is inside the validated range, and each way it is not."""

    inside: bool
    reasons: tuple[str, ...]


def in_validated_range(
    model: ModelSpec, profile: str, chips: int, validated: Sequence[ValidatedPoint]
) -> RangeCheck:
    """Whether a plan of ``model`` on ``chips`` chips of ``profile`` lies inside what the
    validation set covers: the profile was validated, and the chip count and FC parameter
    count lie within the [min, max] of the runs validated on that profile."""
    same = [p for p in validated if p.profile == profile]
    if not same:
        known = sorted({p.profile for p in validated})
        return RangeCheck(
            False, (f"profile '{profile}' has no validated runs ({', '.join(known)} do)",)
        )
    reasons = []
    lo, hi = min(p.chips for p in same), max(p.chips for p in same)
    if not lo <= chips <= hi:
        reasons.append(f"{chips:,} chips is outside the validated {lo:,}–{hi:,}")
    size = fc_parameters(model)
    plo, phi = min(p.parameters for p in same), max(p.parameters for p in same)
    if not plo <= size <= phi:
        reasons.append(
            f"{size / 1e9:.1f}B FC parameters is outside the validated "
            f"{plo / 1e9:.1f}B–{phi / 1e9:.1f}B"
        )
    return RangeCheck(not reasons, tuple(reasons))
