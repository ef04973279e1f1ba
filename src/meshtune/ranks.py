"""Dense ranks of an integer column: its distinct values, ascending, and each element's index
among them, what ``numpy.unique(values, return_inverse=True)`` gives.

The cluster search ranks columns of a hundred thousand splits by their micro-batch, their
pipeline layout or their TP size. ``numpy.unique`` sorts them, about 17 ms for
150,000 elements on the 2-core machine BENCHMARKS.md names; where the values are small
non-negative integers (at most a few times the column's length) counting them is about a
millisecond, and gives the same arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    IntArray = npt.NDArray[np.int64]

COUNTED = 1 << 16
"""Values below ``COUNTED + 4 · len(values)`` are ranked by counting (a table that long)."""


def ranks(values: IntArray) -> tuple[IntArray, IntArray]:
    """``numpy.unique(values, return_inverse=True)`` of a 1-D integer array, the inverse flat:
    by counting where every value is in ``[0, COUNTED + 4 · len(values))``, else by sorting."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    if not len(values) or values.min() < 0 or values.max() >= COUNTED + 4 * len(values):
        distinct, inverse = np.unique(values, return_inverse=True)
        return distinct, inverse.reshape(-1)
    present = np.flatnonzero(np.bincount(values))
    index = np.zeros(int(present[-1]) + 1, dtype=np.int64)
    index[present] = np.arange(len(present))
    return present.astype(values.dtype), index[values]
