"""meshtune.ranks: the dense ranks np.unique gives, by counting where the values are small."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.ranks import COUNTED, ranks


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(0, 3 * COUNTED), max_size=300),
    shift=st.sampled_from([0, -5, 10**12]),
)
def test_ranks_are_numpys_unique_with_its_inverse(values: list[int], shift: int) -> None:
    # counted (small non-negative values) or sorted (negative, or past the table), the same
    # distinct values, dtype and flat inverse as np.unique
    array = np.array(values, dtype=np.int64) + shift
    distinct, inverse = ranks(array)
    expected, where = np.unique(array, return_inverse=True)
    assert distinct.dtype == expected.dtype == np.int64
    assert distinct.tolist() == expected.tolist()
    assert inverse.tolist() == where.reshape(-1).tolist()
    assert (distinct[inverse] == array).all()


def test_a_long_column_of_small_values_is_counted() -> None:
    # the case the search has: many elements, few distinct small values
    array = np.tile(np.array([7, 3, 3, 120_000], dtype=np.int64), 50_000)
    distinct, inverse = ranks(array)
    assert distinct.tolist() == [3, 7, 120_000]
    assert inverse[:4].tolist() == [1, 0, 0, 2]
