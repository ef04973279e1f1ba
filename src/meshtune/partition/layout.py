"""Tile grids of one replica of a matrix: the kinds, their ragged bounds and the processes
that hold each tile (Brock & Golin §3)."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

Kind = Literal["rows", "cols", "blocks", "cyclic", "full"]
KINDS: tuple[Kind, ...] = ("rows", "cols", "blocks", "cyclic", "full")
Matrix = Literal["A", "B", "C"]
MATRICES: tuple[Matrix, ...] = ("A", "B", "C")

Rect = tuple[int, int, int, int]
"""``(row0, row1, col0, col1)``: rows ``[row0, row1)`` and columns ``[col0, col1)``."""


@lru_cache(maxsize=4096)
def split(extent: int, parts: int) -> tuple[int, ...]:
    """Balanced bounds of ``parts`` ragged blocks of ``extent``: ``i·extent // parts``."""
    return tuple(i * extent // parts for i in range(parts + 1))


@lru_cache(maxsize=256)
def process_grid(procs: int) -> tuple[int, int]:
    """The most square ``pr × pc = procs`` with ``pr ≤ pc``."""
    pr = max(d for d in range(1, math.isqrt(procs) + 1) if procs % d == 0)
    return pr, procs // pr


def area(rect: Rect) -> int:
    """Elements of ``rect``."""
    return max(0, rect[1] - rect[0]) * max(0, rect[3] - rect[2])


def _overlap(lo: int, hi: int, bounds: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """``(tile, start, stop)`` of every tile of ``bounds`` that meets ``[lo, hi)``."""
    if hi <= lo:
        return []
    first = bisect.bisect_right(bounds, lo) - 1
    found = []
    for t in range(max(first, 0), len(bounds) - 1):
        start, stop = max(lo, bounds[t]), min(hi, bounds[t + 1])
        if bounds[t] >= hi:
            break
        if stop > start:
            found.append((t, start, stop))
    return found


@dataclass(frozen=True)
class Layout:
    """One replica of an ``height × width`` matrix laid out as ``kind`` over ``procs`` processes."""

    kind: Kind
    height: int
    width: int
    procs: int

    @cached_property
    def grid(self) -> tuple[int, int]:
        """Tiles per column and per row of the tile grid."""
        pr, pc = process_grid(self.procs)
        return {
            "rows": (self.procs, 1),
            "cols": (1, self.procs),
            "blocks": (pr, pc),
            "cyclic": (2 * pr, 2 * pc),
            "full": (1, 1),
        }[self.kind]

    @cached_property
    def row_bounds(self) -> tuple[int, ...]:
        """Row bounds of the tile grid."""
        return split(self.height, self.grid[0])

    @cached_property
    def col_bounds(self) -> tuple[int, ...]:
        """Column bounds of the tile grid."""
        return split(self.width, self.grid[1])

    def owners(self, tile: tuple[int, int]) -> tuple[int, ...]:
        """Processes of the replica that hold ``tile`` (all of them for ``full``)."""
        return self._owners[tile]

    @cached_property
    def _owners(self) -> dict[tuple[int, int], tuple[int, ...]]:
        return {tile: self._owners_of(tile) for tile in self.tiles()}

    def _owners_of(self, tile: tuple[int, int]) -> tuple[int, ...]:
        i, j = tile
        if self.kind == "full":
            return tuple(range(self.procs))
        if self.kind == "rows":
            return (i,)
        if self.kind == "cols":
            return (j,)
        pr, pc = process_grid(self.procs)
        return ((i % pr) * pc + j % pc,)

    def tiles(self) -> list[tuple[int, int]]:
        """Every tile index, row-major."""
        return [(i, j) for i in range(self.grid[0]) for j in range(self.grid[1])]

    def owned(self, process: int) -> list[tuple[int, int]]:
        """Tiles ``process`` holds, row-major."""
        return self._owned.get(process, [])

    @cached_property
    def _owned(self) -> dict[int, list[tuple[int, int]]]:
        found: dict[int, list[tuple[int, int]]] = {}
        for tile, owners in self._owners.items():
            for q in owners:
                found.setdefault(q, []).append(tile)
        return found

    @cached_property
    def owner_grid(self) -> NDArray[np.int64]:
        """The first holder of every tile, as a ``grid`` array."""
        import numpy as np

        rows, cols = self.grid
        return np.asarray(
            [[self._owners[(i, j)][0] for j in range(cols)] for i in range(rows)], dtype=np.int64
        )

    @cached_property
    def tile_table(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Every tile, row-major (the order of :meth:`tiles`): its :meth:`bounds` as rows of a
        ``(tiles, 4)`` array, and its first holder (:attr:`owner_grid` flattened)."""
        import numpy as np

        rows, cols = self.grid
        rb = np.asarray(self.row_bounds, dtype=np.int64)
        cb = np.asarray(self.col_bounds, dtype=np.int64)
        table = np.stack(
            [
                np.repeat(rb[:-1], cols),
                np.repeat(rb[1:], cols),
                np.tile(cb[:-1], rows),
                np.tile(cb[1:], rows),
            ],
            axis=1,
        )
        return table, self.owner_grid.reshape(-1)

    def bounds(self, tile: tuple[int, int]) -> Rect:
        """``tile_bounds``: the part of the matrix ``tile`` covers."""
        i, j = tile
        return (
            self.row_bounds[i],
            self.row_bounds[i + 1],
            self.col_bounds[j],
            self.col_bounds[j + 1],
        )

    def overlapping(self, rect: Rect) -> list[tuple[tuple[int, int], Rect]]:
        """``overlapping_tiles``: every tile that meets ``rect``, with the part it covers."""
        rows = _overlap(rect[0], rect[1], self.row_bounds)
        cols = _overlap(rect[2], rect[3], self.col_bounds)
        return [((i, j), (r0, r1, c0, c1)) for i, r0, r1 in rows for j, c0, c1 in cols]


@lru_cache(maxsize=4096)
def layout_of(kind: Kind, height: int, width: int, procs: int) -> Layout:
    """One shared :class:`Layout` per shape (its tile bounds are computed once)."""
    return Layout(kind, height, width, procs)
