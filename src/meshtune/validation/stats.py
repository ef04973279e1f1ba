"""Error statistics of the validation set: summary figures, rank agreement (Spearman's ρ and
the pairs in the published order) and prediction intervals (the validated-range check is
:mod:`meshtune.validation.bounds`'s).

Errors are signed relative errors ``e = predicted / published − 1``. MAPE is the mean of
``|e|``, bias the mean of ``e`` (negative: meshtune predicts too fast), all in percent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from meshtune.validation.bounds import INTERVAL_COVERAGE


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


class GroupAgreement(NamedTuple):
    """How well the predictions rank one group of alternative splits of a model and cluster."""

    runs: int
    spearman: float | None  # Spearman's ρ (None under 3 runs or with no ranking)
    pairs_agreeing: int  # pairs the prediction orders as published (:func:`ordered_pairs`)
    pairs: int  # pairs with a published order

    def rho_text(self) -> str:
        """ρ with two decimals, ``–`` where it is not defined."""
        return "–" if self.spearman is None else f"{self.spearman:.2f}"

    def pairs_text(self) -> str:
        """``agreeing / pairs``, ``–`` without a pair."""
        return f"{self.pairs_agreeing} / {self.pairs}" if self.pairs else "–"

    @classmethod
    def total(cls, groups: Iterable[GroupAgreement]) -> GroupAgreement:
        """The runs and pairs of ``groups`` summed (ρ is not: it is None)."""
        groups = list(groups)
        return cls(
            sum(g.runs for g in groups),
            None,
            sum(g.pairs_agreeing for g in groups),
            sum(g.pairs for g in groups),
        )


def ordered_pairs(predicted: Sequence[float], published: Sequence[float]) -> tuple[int, int]:
    """(pairs the prediction orders as published, pairs with a published order): over every
    pair i < j whose published values differ, the pair agrees when the predicted values differ
    the same way (Kendall's concordant pairs; a predicted tie does not agree). Defined for two
    runs, where Spearman's ρ is not."""
    if len(predicted) != len(published):
        raise ValueError(f"ordered_pairs: {len(predicted)} values against {len(published)}")
    agree = pairs = 0
    for i in range(len(published)):
        for j in range(i + 1, len(published)):
            measured = published[i] - published[j]
            if measured == 0:
                continue
            pairs += 1
            agree += (predicted[i] - predicted[j]) * measured > 0
    return agree, pairs


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
