"""Every process's one-sided traffic and multiplies for a partitioned GeMM, by overlap arithmetic.

Brock & Golin, "Slicing Is All You Need" (§4.1–4.2): :func:`loads` counts, for every process of
a :class:`~meshtune.partition.work.Problem`, the gets, accumulates and replica-reduction accumulates
it issues and the shapes of its local multiplies, as NumPy overlap arithmetic over the tile
grids: the same pieces :meth:`~meshtune.partition.work.Problem.work` lists one by one.

The arithmetic depends on the sizes only through the tile bounds, so problems whose sizes are
multiples of one another share it (:func:`reduced`): the search explores each layout once per
process count, not once per layer, pass and micro-batch size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from meshtune.partition.layout import MATRICES, Matrix
from meshtune.partition.transfers import GROUPS
from meshtune.partition.work import Problem

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


@dataclass(frozen=True)
class Loads:
    """Per process ``g``: the elements of each matrix (``A``, ``B``, ``C``: the order of
    :data:`~meshtune.partition.layout.MATRICES`) it moves (``moved_by[g, matrix]``); per group of
    :data:`~meshtune.partition.transfers.GROUPS`, per physical axis, its operation count
    (``ops[group][g, axis]``) and elements per matrix (``elements[group][g, axis, matrix]``);
    the shape ``(m, n, k)`` of every stationary tile's share of the multiply (``shapes``: rows
    ``(process, m, n, k)``)."""

    moved_by: NDArray[np.int64]
    ops: tuple[NDArray[np.int64], ...]
    elements: tuple[NDArray[np.int64], ...]
    shapes: NDArray[np.int64]

    @property
    def moved(self) -> dict[int, int]:
        """Elements every process moves, all matrices together (``process -> elements``)."""
        return dict(enumerate(self.moved_by.sum(axis=1).tolist()))


def reduced(problem: Problem) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """The sizes ``(m, n, k)`` of the smallest problem whose :func:`loads` scale exactly to
    ``problem``'s (same layout, stationary matrix, replicas and processes), and the scales
    ``(s_m, s_n, s_k)``.

    Every tile bound is ``i·d // parts`` and every replica's k slice ``r·k // c``, where
    ``parts`` (``p/c`` for rows and columns, ``pr``, ``pc`` for blocks, ``2pr``, ``2pc`` for
    block-cyclic, 1 for full) and ``c`` divide ``U = 2p``. A size ``d = s·U`` therefore has
    every bound ``s`` times the bound for ``U``: every overlap length scales by ``s`` and
    no empty overlap becomes non-empty or back. So operation counts are those of the reduced
    problem, elements of A scale by ``s_m·s_k``, of B by ``s_k·s_n``, of C by ``s_m·s_n``, and
    multiply shapes by ``(s_m, s_n, s_k)``. A size ``U`` does not divide keeps scale 1.
    """
    unit = 2 * problem.procs
    m, n, k = (unit if d % unit == 0 else d for d in (problem.m, problem.n, problem.k))
    return (m, n, k), (problem.m // m, problem.n // n, problem.k // k)


def matrix_scales(scales: tuple[int, int, int]) -> tuple[int, int, int]:
    """How the elements of A (m×k), B (k×n) and C (m×n) scale under :func:`reduced`'s
    ``(s_m, s_n, s_k)``."""
    s_m, s_n, s_k = scales
    return s_m * s_k, s_k * s_n, s_m * s_n


def _ranges(
    lo: NDArray[np.int64], hi: NDArray[np.int64], bounds: tuple[int, ...]
) -> NDArray[np.int64]:
    """Overlap lengths of every ``[lo, hi)`` with every tile of ``bounds``: ``(len(lo), tiles)``."""
    import numpy as np

    b = np.asarray(bounds, dtype=np.int64)
    start = np.maximum(lo[:, None], b[None, :-1])
    stop = np.minimum(hi[:, None], b[None, 1:])
    lengths: NDArray[np.int64] = np.clip(stop - start, 0, None)
    return lengths


def loads(problem: Problem, cols: int) -> Loads:
    """The one-sided traffic and compute of every process of ``problem`` on a mesh with
    ``cols`` columns, by vectorized overlap arithmetic over the tile grids (the same pieces
    :meth:`Problem.work` lists one by one; empty ragged tiles do nothing). NumPy is imported
    here, not with the module, so that the CLI starts without it."""
    import numpy as np

    p, per, stationary = problem.procs, problem.per_replica, problem.stationary
    stat = problem.layout(stationary)
    # One entry per stationary tile and replica: its process and the part it multiplies.
    bounds, owner = stat.tile_table
    kr = np.asarray([problem.k_slice(r) for r in range(problem.replicas)], dtype=np.int64)
    reps = np.repeat(np.arange(problem.replicas), len(owner))
    table = np.concatenate(
        [
            (reps * per + np.tile(owner, problem.replicas))[:, None],
            np.tile(bounds, (problem.replicas, 1)),
        ],
        axis=1,
    )
    if stationary == "A":
        table[:, 3] = np.maximum(table[:, 3], kr[reps, 0])
        table[:, 4] = np.minimum(table[:, 4], kr[reps, 1])
    elif stationary == "B":
        table[:, 1] = np.maximum(table[:, 1], kr[reps, 0])
        table[:, 2] = np.minimum(table[:, 2], kr[reps, 1])
    table = table[(table[:, 2] > table[:, 1]) & (table[:, 4] > table[:, 3])]
    ops = tuple(np.zeros((p, 2), dtype=np.int64) for _ in GROUPS)
    elements = tuple(np.zeros((p, 2, len(MATRICES)), dtype=np.int64) for _ in GROUPS)
    moved = np.zeros((p, len(MATRICES)), dtype=np.int64)
    m, n = problem.m, problem.n
    height, width = table[:, 2] - table[:, 1], table[:, 4] - table[:, 3]
    inner = {
        "C": (height, width, kr[table[:, 0] // per, 1] - kr[table[:, 0] // per, 0]),
        "A": (height, np.full_like(height, n), width),
        "B": (np.full_like(height, m), width, height),
    }[stationary]
    shapes = np.stack([table[:, 0], *inner], axis=1)
    g_e = table[:, 0]
    q_e = g_e % per
    base = g_e - q_e
    row_e, col_e = g_e // cols, g_e % cols
    k_lo, k_hi = kr[g_e // per, 0], kr[g_e // per, 1]
    zero, full_m, full_n = np.zeros_like(g_e), np.full_like(g_e, m), np.full_like(g_e, n)
    r0, r1, c0, c1 = table[:, 1], table[:, 2], table[:, 3], table[:, 4]
    others: dict[Matrix, tuple[NDArray[np.int64], ...]]
    if stationary == "C":
        others = {"A": (r0, r1, k_lo, k_hi), "B": (k_lo, k_hi, c0, c1)}
    elif stationary == "A":
        others = {"B": (c0, c1, zero, full_n), "C": (r0, r1, zero, full_n)}
    else:
        others = {"A": (zero, full_m, r0, r1), "C": (zero, full_m, c0, c1)}
    # For every process: how many of its replica's other processes each axis reaches (a
    # process in another mesh row crosses axis 0, in another mesh column axis 1).
    everyone = np.arange(p)
    same = (everyone[:, None] // per) == (everyone[None, :] // per)
    other_row = (everyone[:, None] // cols) != (everyone[None, :] // cols)
    other_col = (everyone[:, None] % cols) != (everyone[None, :] % cols)
    reach = np.stack([(same & other_row).sum(axis=1), (same & other_col).sum(axis=1)], axis=1)
    for matrix, (lo_r, hi_r, lo_c, hi_c) in others.items():
        layout = problem.layout(matrix)
        group, which = (1 if matrix == "C" else 0), MATRICES.index(matrix)
        area_ = (
            _ranges(lo_r, hi_r, layout.row_bounds)[:, :, None]
            * _ranges(lo_c, hi_c, layout.col_bounds)[:, None, :]
        )
        if layout.kind == "full":
            if matrix == "C":  # every other holder gets an accumulate of every piece
                pieces = (area_ > 0).sum(axis=(1, 2))
                total = area_.sum(axis=(1, 2))
                np.add.at(moved[:, which], g_e, (per - 1) * total)
                for axis in (0, 1):
                    np.add.at(ops[group][:, axis], g_e, pieces * reach[g_e, axis])
                    np.add.at(elements[group][:, axis, which], g_e, total * reach[g_e, axis])
            continue
        owner = layout.owner_grid
        peer = base[:, None, None] + owner[None, :, :]
        remote = (area_ > 0) & (owner[None, :, :] != q_e[:, None, None])
        same_row = (peer // cols) == row_e[:, None, None]
        same_col = (peer % cols) == col_e[:, None, None]
        np.add.at(moved[:, which], g_e, (area_ * remote).sum(axis=(1, 2)))
        for axis, crosses in ((0, ~same_row), (1, ~same_col)):
            hit = remote & crosses
            np.add.at(ops[group][:, axis], g_e, hit.sum(axis=(1, 2)))
            np.add.at(elements[group][:, axis, which], g_e, (area_ * hit).sum(axis=(1, 2)))
    if problem.replicas > 1:
        _reduction(problem, cols, moved, ops[2], elements[2])
    return Loads(moved, ops, elements, shapes)


def _reduction(
    problem: Problem,
    cols: int,
    moved: NDArray[np.int64],
    ops: NDArray[np.int64],
    elements: NDArray[np.int64],
) -> None:
    """Add ``reduce_replicas`` into the counts: in every replica r > 0 the first holder of each
    non-empty C tile adds it into each of replica 0's holders of that tile, one accumulate per
    holder, over the axes :func:`~meshtune.partition.transfers.transfer_axes` names."""
    import numpy as np

    per, which = problem.per_replica, MATRICES.index("C")
    layout = problem.layout("C")
    table, first = layout.tile_table
    size = (table[:, 1] - table[:, 0]) * (table[:, 3] - table[:, 2])
    keep = size > 0
    size, first = size[keep], first[keep]
    # Replica 0's holders of each tile: the first one, or every process for a full C.
    holders = (
        np.broadcast_to(np.arange(per), (len(first), per))
        if layout.kind == "full"
        else first[:, None]
    )
    # One entry per (replica r > 0, tile, holder), flat: NumPy's add.at on a strided view
    # mis-adds with a broadcast 2D index.
    source = (np.arange(1, problem.replicas)[:, None] * per + first[None, :]).reshape(-1)
    sizes = np.tile(size, problem.replicas - 1)
    np.add.at(moved[:, which], source, sizes * holders.shape[1])
    src = np.repeat(source, holders.shape[1])
    dst = np.tile(holders, (problem.replicas - 1, 1)).reshape(-1)
    sizes = np.repeat(sizes, holders.shape[1])
    for axis, crosses in ((0, src // cols != dst // cols), (1, src % cols != dst % cols)):
        np.add.at(ops[:, axis], src[crosses], 1)
        np.add.at(elements[:, axis, which], src[crosses], sizes[crosses])
