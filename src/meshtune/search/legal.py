"""The splits the cluster search enumerates: every legal ``(dp, pp, micro_batches, vpp)``.

:func:`split_columns` lists them as columns, at array speed (:func:`splits` as tuples); the
space (:mod:`meshtune.search.space`) then keeps those whose memory fits and bounds their steps
with the step model (:mod:`meshtune.step.bounds`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from meshtune.hardware.mesh import divisors
from meshtune.model.spec import ModelSpec
from meshtune.step.options import ClusterOptions
from meshtune.step.pipeline import dualpipe_legal, interleavings

if TYPE_CHECKING:
    from meshtune.ranks import IntArray


class SplitColumns(NamedTuple):
    """Splits as four integer columns (one row a split ``(dp, pp, micro_batches, vpp)``): a
    large search enumerates a hundred thousand (Llama 3.1 405B at 55,440 chips: 107,232), which
    as tuples cost more than everything the search then does with most of them."""

    dp: IntArray
    pp: IntArray
    m: IntArray
    vpp: IntArray

    def rows(self) -> list[tuple[int, int, int, int]]:
        """The splits as tuples, in order."""
        return list(zip(*(column.tolist() for column in self), strict=True))


def split_columns(
    model: ModelSpec, chips: int, batch: int, options: ClusterOptions
) -> SplitColumns:
    """Every (dp, pp, micro_batches, vpp) allowed by the pins, the chip count and the batch, in
    the order DP, PP, micro-batch count, v (each ascending): DP a divisor of gcd(chips, batch),
    PP of the chips left (at most one block per stage), the micro-batch count of the replica's
    batch, v from :func:`meshtune.step.pipeline.interleavings` (DualPipe: the splits it runs,
    :func:`meshtune.step.pipeline.dualpipe_legal`). A pin that breaks a rule gives nothing.

    The legal v of a (pp, m) depend on m only through ``m mod pp = 0`` (and, under DualPipe,
    m even and ``m ≥ 2·pp``): each such class is looked up once, with a member m, and every
    (dp, pp, m) is expanded by its class's v at array speed."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    cells: list[tuple[IntArray, IntArray, IntArray]] = []  # per DP: (dp, pp, m) of each cell
    for dp in (options.dp,) if options.dp is not None else divisors(math.gcd(chips, batch)):
        if chips % dp or batch % dp:
            continue
        replica = batch // dp
        counts = (
            (options.micro_batches,) if options.micro_batches is not None else divisors(replica)
        )
        ms = np.array([m for m in counts if replica % m == 0], dtype=np.int64)
        pps = np.array(
            [
                pp
                for pp in ((options.pp,) if options.pp is not None else divisors(chips // dp))
                if (chips // dp) % pp == 0 and pp <= model.blocks
            ],
            dtype=np.int64,
        )
        pp_grid, m_grid = (grid.reshape(-1) for grid in np.meshgrid(pps, ms, indexing="ij"))
        cells.append((np.full(len(pp_grid), dp, dtype=np.int64), pp_grid, m_grid))
    if not cells:
        empty = np.zeros(0, dtype=np.int64)
        return SplitColumns(empty, empty, empty, empty)
    dp_cell, pp_cell, m_cell = (np.concatenate(column) for column in zip(*cells, strict=True))
    kind = (m_cell % pp_cell == 0).astype(np.int64)  # the class of each cell's v
    if options.step.schedule == "dualpipe":
        kind += 2 * (m_cell % 2 == 0) + 4 * (m_cell >= 2 * pp_cell)
    # (pp, class) → its v, looked up at the first cell of it
    _, first, which = np.unique(pp_cell * 8 + kind, return_index=True, return_inverse=True)
    pool: list[int] = []  # every class's v, one after another
    starts, sizes = [], []
    for i in first.tolist():
        pp, m = int(pp_cell[i]), int(m_cell[i])
        legal = interleavings(model.blocks, pp, m)
        if options.step.schedule == "dualpipe":
            legal = [v for v in legal if dualpipe_legal(pp, m, v)]
        if options.vpp is not None:
            legal = [v for v in legal if v == options.vpp]
        starts.append(len(pool))
        sizes.append(len(legal))
        pool.extend(legal)
    which = which.reshape(-1)
    count = np.array(sizes, dtype=np.int64)[which]  # v per cell
    cell = np.repeat(np.arange(len(which)), count)
    # each row's place in its cell's v, then in the pool
    offset = np.arange(len(cell)) - np.repeat(np.cumsum(count) - count, count)
    vpp = np.array(pool, dtype=np.int64)[np.array(starts, dtype=np.int64)[which][cell] + offset]
    return SplitColumns(dp_cell[cell], pp_cell[cell], m_cell[cell], vpp)


def splits(
    model: ModelSpec, chips: int, batch: int, options: ClusterOptions
) -> list[tuple[int, int, int, int]]:
    """:func:`split_columns` as tuples."""
    return split_columns(model, chips, batch, options).rows()
