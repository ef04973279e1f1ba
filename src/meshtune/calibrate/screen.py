"""Screening the regime cutoffs of a link fit: every candidate's closed-form leave-one-size-out
error in a few array operations instead of one least-squares solve per (cutoff, size).

The fit (:mod:`~meshtune.calibrate.link_model`) scores each candidate cutoff c by the mean
relative error at shards ≥ 1 MiB, each size predicted by the weighted least squares fitted
without it on the shards ≥ c. That fit minimises ``Σ (x_i·θ − y_i)²`` with
``x_i = √w_i·(1, k_i, k_i·s_i) / t_i`` and ``y_i = √w_i``, so it depends on the training points
only through the normal equations ``(Σ x_i x_iᵀ) θ = Σ x_i y_i``: those sums are taken once
per shard size, and the sums of any training set (the sizes ≥ c but the one left out) are one
matrix product away. Columns are scaled to unit norm first (as the solver does); with one
ring-step count the model has no t_sync column (``confounded``), as in the fit.

A training set whose solution has a negative parameter (the fit then holds it at its bound) or
whose equations are singular is handed back to ``solve_one`` (the fit's own bounded solve), so
the scores are those of the scalar fits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    Array = NDArray[np.float64]


def screen_scores(
    k: Array,
    s: Array,
    t: Array,
    w: Array,
    min_held: float,
    solve_one: Callable[[NDArray[np.bool_]], Array],
) -> list[tuple[float, float]] | None:
    """``(cutoff, LOO MAPE)`` for each candidate cutoff (every measured size but the smallest,
    while at least 3 sizes are kept), the left-out sizes those ≥ ``min_held``; ``solve_one(
    training mask)`` gives (t_launch, t_sync, 1/bw) for a set this cannot solve. ``None`` when
    the scaled data are not finite (the scalar fits say why)."""
    sizes, group = np.unique(s, return_inverse=True)
    group = group.reshape(-1)
    sw = np.sqrt(w)
    with np.errstate(all="ignore"):
        x = np.column_stack([np.ones_like(k), k, k * s]) * (sw / t)[:, None]
        norm = np.linalg.norm(x, axis=0)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(norm)) and np.all(norm > 0)):
        return None
    x = x / norm
    count = len(sizes)
    gram = np.zeros((count, 9))
    np.add.at(gram, group, (x[:, :, None] * x[:, None, :]).reshape(-1, 9))
    rhs = np.zeros((count, 3))
    np.add.at(rhs, group, x * sw[:, None])
    steps, step_index = np.unique(k, return_inverse=True)
    presence = np.zeros((count, len(steps)), dtype=bool)
    presence[group, step_index.reshape(-1)] = True
    held = np.flatnonzero(sizes >= min_held)
    cutoffs = [c for c in range(1, count) if count - c >= 3]
    cases = [(c, h) for c in cutoffs for h in held]
    train = np.zeros((len(cases), count), dtype=bool)
    for row, (c, h) in enumerate(cases):
        train[row, c:] = True
        train[row, h] = False
    usable = train.sum(axis=1) >= 2
    theta = _solve_normal(train, gram, rhs, presence) / norm
    scores: dict[int, list[float]] = {c: [0.0, 0.0] for c in cutoffs}
    for row, (c, h) in enumerate(cases):
        if not usable[row]:
            continue
        params = theta[row]
        if not np.all(np.isfinite(params)) or np.any(params < 0):
            params = solve_one(np.isin(group, np.flatnonzero(train[row])))
        at = group == h
        predicted = params[0] + k[at] * params[1] + k[at] * s[at] * params[2]
        scores[c][0] += float(np.sum(np.abs(predicted - t[at]) / t[at]))
        scores[c][1] += int(at.sum())
    return [(float(sizes[c]), total / n) for c, (total, n) in scores.items() if n]


def _solve_normal(
    train: NDArray[np.bool_], gram: Array, rhs: Array, presence: NDArray[np.bool_]
) -> Array:
    """θ of each training set's normal equations (NaN where singular), without the t_sync
    column where its points have one ring-step count."""
    sums = (train.astype(np.float64) @ gram).reshape(-1, 3, 3)
    right = train.astype(np.float64) @ rhs
    confounded = (train.astype(np.int64) @ presence.astype(np.int64) > 0).sum(axis=1) < 2
    theta = np.full((len(train), 3), np.nan)
    for flag, columns in ((False, np.array([0, 1, 2])), (True, np.array([0, 2]))):
        rows = np.flatnonzero(confounded == flag)
        if not len(rows):
            continue
        matrix = sums[np.ix_(rows, columns, columns)]
        vector = right[np.ix_(rows, columns)]
        solvable = np.abs(np.linalg.det(matrix)) > 1e-12
        if solvable.any():
            solved = np.linalg.solve(matrix[solvable], vector[solvable][..., None])[..., 0]
            block = np.zeros((int(solvable.sum()), 3))
            block[:, columns] = solved
            theta[rows[solvable]] = block
    return theta
