"""The fit's NumPy kernels against scipy as an oracle: Student's t table and the bounded
soft-L1 solve (the same minimum scipy.optimize.least_squares finds)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.calibrate.solve import robust_nonnegative, t_quantile_975


def test_t_quantile_by_hand_and_against_scipy() -> None:
    assert t_quantile_975(1) == 12.7062  # A&S Table 26.10
    assert t_quantile_975(10) == 2.22814
    assert t_quantile_975(10**9) == pytest.approx(1.959964, abs=1e-6)  # the normal's
    from scipy.stats import t

    for dof in (*range(1, 120), 500, 5000):
        assert t_quantile_975(dof) == pytest.approx(float(t.ppf(0.975, dof)), rel=1e-5), dof
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile_975(0)


def test_exact_data_is_fitted_exactly() -> None:
    # b = 2 + 3x on x = 1..5: the soft-L1 minimum is the exact line, residuals 0
    x = np.arange(1.0, 6.0)
    a = np.column_stack([np.ones_like(x), x])
    assert robust_nonnegative(a, 2 + 3 * x, 0.05) == pytest.approx([2.0, 3.0], rel=1e-12)


def test_a_negative_intercept_sits_on_its_bound() -> None:
    # b = -1 + x: unconstrained intercept -1; bounded, it is 0 and the slope refitted
    x = np.arange(1.0, 11.0)
    a = np.column_stack([np.ones_like(x), x])
    theta = robust_nonnegative(a, x - 1, 0.05)
    assert theta[0] == 0.0 and theta[1] > 0


def test_an_outlier_barely_moves_the_robust_fit() -> None:
    x = np.arange(1.0, 21.0)
    b = 1 + 2 * x
    b[7] *= 3  # one gross outlier
    a = np.column_stack([np.ones_like(x), x])
    theta = robust_nonnegative(a, b, 0.05)
    ordinary = np.linalg.lstsq(a, b, rcond=None)[0]
    assert abs(theta[1] - 2) < abs(ordinary[1] - 2) / 5


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    columns=st.integers(1, 3),
    noise=st.floats(0.001, 0.3),
)
def test_same_minimum_as_scipy(seed: int, columns: int, noise: float) -> None:
    from scipy.optimize import least_squares

    rng = np.random.default_rng(seed)
    a = rng.uniform(0.1, 1.0, size=(25, columns))
    a /= np.linalg.norm(a, axis=0)
    b = a @ rng.uniform(0.0, 2.0, size=columns) * rng.uniform(1 - noise, 1 + noise, size=25)
    ours = robust_nonnegative(a, b, 0.05)

    def loss(theta: np.ndarray) -> float:
        u = (a @ theta - b) / 0.05
        return float(np.sum(np.sqrt(1 + u * u)))

    start = np.maximum(np.linalg.lstsq(a, b, rcond=None)[0], 1e-6)
    theirs = least_squares(
        lambda q: a @ q - b, start, bounds=(0, np.inf), loss="soft_l1", f_scale=0.05
    ).x
    assert np.all(ours >= 0)
    assert loss(ours) <= loss(theirs) * (1 + 1e-7)  # never worse than scipy's minimum
