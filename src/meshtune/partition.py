"""Distributed-matrix layouts and the slicing arithmetic of the universal one-sided GeMM.

Brock & Golin, "Slicing Is All You Need" (§3, §4.1, Algorithms 1–2). A distributed matrix is a
shape, a tile grid, a process grid and a replication factor c (c divides p): each of the c
replicas holds the whole matrix, spread over ``p / c`` processes. The tile grids
(:data:`KINDS`):

* ``rows`` — 1D row blocks, tile i on process i;
* ``cols`` — 1D column blocks, tile j on process j;
* ``blocks`` — 2D blocks over the most square process grid ``pr × pc`` of the replica;
* ``cyclic`` — 2D block-cyclic: a ``2pr × 2pc`` tile grid, tile (i, j) on process
  (i mod pr, j mod pc) (ScaLAPACK's convention);
* ``full`` — one tile that every process of the replica holds (Megatron's replicated input,
  sequence parallelism's replicated weight).

Extents need not divide: tile i of ``parts`` spans ``[i·h // parts, (i+1)·h // parts)``, so tiles
are ragged, and tiles of A, B and C need not line up with each other.

One matrix of ``C = A·B`` stays *stationary* (A, B or C; the paper keeps the largest by
default, meshtune ranks all three). Every process owns tiles of it and does every local
multiply that involves them (§4.1): for a tile of C it reads the overlapping tiles of A and B
(Algorithm 1), for a tile of A or B it reads the overlapping tiles of the other input and adds
into the overlapping tiles of C (Algorithm 2).
With replication, replica r does the part of the inner dimension k in its slice
``[r·k // c, (r+1)·k // c)`` and the replicas' partial C are reduced into replica 0 at the end
(``reduce_replicas``, §4.2). A piece of another matrix that the process does not hold is fetched
with one one-sided *get* (inputs) or added with one remote *accumulate* (C, into every process
that holds it). The *iteration offset* (§4.2) starts each stationary tile's walk over the moving
pieces at ``(i + j) mod count``, so that processes sharing a row or column of the tile grid do not
all read the same tile first.

Processes are numbered ``g = r · (p / c) + q`` (replica r, process q within it); on a
``P_r × P_c`` mesh process g sits at row ``g // P_c``, column ``g mod P_c``. A transfer between
two processes of one mesh row crosses the axis-1 ring, of one mesh column the axis-0 ring, and
any other crosses one link of each (:func:`transfer_axes`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Literal

from meshtune.errors import InfeasibleError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

Kind = Literal["rows", "cols", "blocks", "cyclic", "full"]
KINDS: tuple[Kind, ...] = ("rows", "cols", "blocks", "cyclic", "full")
Matrix = Literal["A", "B", "C"]
MATRICES: tuple[Matrix, ...] = ("A", "B", "C")
MAX_REPLICAS = 4

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
def _layout(kind: Kind, height: int, width: int, procs: int) -> Layout:
    """One shared :class:`Layout` per shape (its tile bounds are computed once)."""
    return Layout(kind, height, width, procs)


@dataclass(frozen=True)
class Partitioning:
    """The tile-grid kind of A, B and C."""

    a: Kind
    b: Kind
    c: Kind

    def kind(self, matrix: Matrix) -> Kind:
        """The kind of ``matrix``."""
        return {"A": self.a, "B": self.b, "C": self.c}[matrix]

    @property
    def spec(self) -> str:
        """``A=rows,B=cols,C=cols``."""
        return f"A={self.a},B={self.b},C={self.c}"

    @property
    def name(self) -> str:
        """The name users know it by (:data:`NAMED`), else its :attr:`spec`."""
        for name, known in NAMED.items():
            if known == self:
                return name
        return self.spec


NAMED: dict[str, Partitioning] = {
    # Megatron column-parallel linear with sequence parallelism (MeshSlice §4.3): the
    # token-sharded input is gathered, the weight and output are split over columns.
    "1d_tp_column": Partitioning("rows", "cols", "cols"),
    # Megatron row-parallel linear with sequence parallelism: partial outputs reduce-scattered
    # over tokens.
    "1d_tp_row": Partitioning("cols", "rows", "rows"),
    # Megatron without sequence parallelism: replicated input / replicated (all-reduced) output.
    "megatron_column": Partitioning("full", "cols", "cols"),
    "megatron_row": Partitioning("cols", "rows", "full"),
    # Sequence parallelism: tokens split, the weight replicated.
    "sequence_parallel": Partitioning("rows", "full", "rows"),
    # FSDP (MeshSlice §4.3): tokens split, the weight sharded over its input dimension and
    # gathered before use.
    "fsdp": Partitioning("rows", "rows", "rows"),
    # The paper's Figure 2–3 families.
    "column_block": Partitioning("cols", "cols", "cols"),
    "inner_product": Partitioning("rows", "cols", "blocks"),
    "outer_product": Partitioning("cols", "rows", "blocks"),
    "2d_blocks": Partitioning("blocks", "blocks", "blocks"),
    "block_cyclic": Partitioning("cyclic", "cyclic", "cyclic"),
}
"""Layouts by the names users know (the paper's "row block" family is FSDP's layout)."""


def explored_partitionings() -> tuple[Partitioning, ...]:
    """What the search ranks: every mix of row, column and 2D blocks for A, B and C (the
    paper's exhaustive set, §5.2), then block-cyclic; stable order. Layouts that replicate a
    whole operand on every process (``full``: Megatron without sequence parallelism, sequence
    parallelism) are evaluated when named, not searched: the paper leaves out partitionings
    that eliminate communication, and they hold a whole operand per process."""
    blocks: tuple[Kind, ...] = ("rows", "cols", "blocks")
    found = [Partitioning(a, b, c) for a in blocks for b in blocks for c in blocks]
    return (*found, NAMED["block_cyclic"])


def parse_partition(text: str) -> Partitioning:
    """A named layout (``fsdp``) or ``A=rows,B=cols,C=cols``; :class:`InfeasibleError` otherwise."""
    text = text.strip()
    if text in NAMED:
        return NAMED[text]
    kinds: dict[str, Kind] = {}
    for part in text.split(","):
        matrix, _, kind = part.partition("=")
        matrix, kind = matrix.strip().upper(), kind.strip().lower()
        if matrix not in MATRICES or matrix in kinds:
            raise InfeasibleError(
                f"partition '{text}': expected A=KIND,B=KIND,C=KIND or one of {', '.join(NAMED)}"
            )
        if kind not in KINDS:
            raise InfeasibleError(
                f"partition '{text}': unknown kind '{kind}' for {matrix}; known: {', '.join(KINDS)}"
            )
        kinds[matrix] = kind
    if set(kinds) != set(MATRICES):
        missing = ", ".join(m for m in MATRICES if m not in kinds)
        raise InfeasibleError(f"partition '{text}': no kind for {missing}")
    return Partitioning(kinds["A"], kinds["B"], kinds["C"])


def partition_problem(
    part: Partitioning, stationary: Matrix, replicas: int, procs: int
) -> str | None:
    """Why this choice cannot run on ``procs`` processes, or ``None``."""
    if replicas < 1 or procs % replicas:
        return f"replication factor {replicas} does not divide {procs} processes"
    if part.kind(stationary) == "full":
        return (
            f"stationary {stationary} is replicated on every process (kind 'full'); every "
            "process would repeat the whole multiply"
        )
    return None


@dataclass(frozen=True)
class Piece:
    """The part ``rect`` of tile ``tile`` of ``matrix`` that one process reads or updates.

    ``source`` is the process a get reads from (``None``: the process holds it);
    ``targets`` are the processes an accumulate adds into (C only; empty for inputs).
    """

    matrix: Matrix
    tile: tuple[int, int]
    rect: Rect
    source: int | None
    targets: tuple[int, ...]
    local: bool


@dataclass(frozen=True)
class Multiply:
    """One local multiply ``C[m, n] += A[m, k] · B[k, n]`` and the pieces it reads and writes
    (indices into :attr:`ProcessWork.pieces`; ``None`` for the stationary tile itself, which
    is entry ``stationary`` of :attr:`ProcessWork.stationary`)."""

    stationary: int
    m: tuple[int, int]
    k: tuple[int, int]
    n: tuple[int, int]
    a: int | None
    b: int | None
    c: int | None


@dataclass(frozen=True)
class Reduction:
    """``reduce_replicas``: add this process's partial tile ``tile`` (``rect``) of C into
    ``targets``."""

    tile: tuple[int, int]
    rect: Rect
    targets: tuple[int, ...]


@dataclass(frozen=True)
class ProcessWork:
    """What process ``process`` does: its stationary tiles, the pieces of the other two
    matrices it touches (gets and accumulates, in issue order), its local multiplies, and its
    share of the replica reduction."""

    process: int
    stationary: tuple[tuple[tuple[int, int], Rect], ...]
    pieces: tuple[Piece, ...]
    multiplies: tuple[Multiply, ...]
    reductions: tuple[Reduction, ...]


@dataclass(frozen=True)
class Problem:
    """``C(m×n) = A(m×k)·B(k×n)`` laid out by ``part`` with ``replicas`` replicas over
    ``procs`` processes, ``stationary`` staying in place."""

    m: int
    n: int
    k: int
    part: Partitioning
    stationary: Matrix
    replicas: int
    procs: int

    def __post_init__(self) -> None:
        problem = partition_problem(self.part, self.stationary, self.replicas, self.procs)
        if problem is not None:
            raise InfeasibleError(problem)

    @property
    def per_replica(self) -> int:
        """Processes per replica, ``p / c``."""
        return self.procs // self.replicas

    def layout(self, matrix: Matrix) -> Layout:
        """The layout of one replica of ``matrix``."""
        shape = {"A": (self.m, self.k), "B": (self.k, self.n), "C": (self.m, self.n)}[matrix]
        return _layout(self.part.kind(matrix), shape[0], shape[1], self.per_replica)

    def k_slice(self, replica: int) -> tuple[int, int]:
        """The part of the inner dimension replica ``replica`` multiplies."""
        bounds = split(self.k, self.replicas)
        return bounds[replica], bounds[replica + 1]

    def work(self) -> tuple[ProcessWork, ...]:
        """Every process's :class:`ProcessWork`, process 0 first."""
        return tuple(self._process(g) for g in range(self.procs))

    def _pieces(
        self, matrix: Matrix, rect: Rect, replica: int, process: int, offset: int
    ) -> list[Piece]:
        layout = self.layout(matrix)
        base = replica * self.per_replica
        found = []
        for tile, part in layout.overlapping(rect):
            owners = layout.owners(tile)
            local = process - base in owners
            if matrix == "C":
                targets = tuple(base + o for o in owners if o != process - base)
                found.append(Piece(matrix, tile, part, None, targets, local))
            else:
                source = None if local else base + owners[0]
                found.append(Piece(matrix, tile, part, source, (), local))
        if found:
            shift = offset % len(found)
            found = found[shift:] + found[:shift]
        return found

    def _process(self, g: int) -> ProcessWork:
        replica, q = divmod(g, self.per_replica)
        k0, k1 = self.k_slice(replica)
        m, n = self.m, self.n
        stat = self.layout(self.stationary)
        owned: list[tuple[tuple[int, int], Rect]] = []
        pieces: list[Piece] = []
        mults: list[Multiply] = []
        for tile in stat.owned(q):
            r0, r1, c0, c1 = stat.bounds(tile)
            offset = tile[0] + tile[1]
            if r1 <= r0 or c1 <= c0:  # an empty ragged tile: nothing to multiply
                continue
            if self.stationary == "C":
                owned.append((tile, (r0, r1, c0, c1)))
                a_pieces = self._pieces("A", (r0, r1, k0, k1), replica, g, offset)
                b_pieces = self._pieces("B", (k0, k1, c0, c1), replica, g, offset)
                a_at = len(pieces)
                b_at = a_at + len(a_pieces)
                pieces += a_pieces + b_pieces
                for ai, ap in enumerate(a_pieces):
                    for bi, bp in enumerate(b_pieces):
                        lo, hi = max(ap.rect[2], bp.rect[0]), min(ap.rect[3], bp.rect[1])
                        if hi > lo:
                            mults.append(
                                Multiply(
                                    len(owned) - 1,
                                    (ap.rect[0], ap.rect[1]),
                                    (lo, hi),
                                    (bp.rect[2], bp.rect[3]),
                                    a_at + ai,
                                    b_at + bi,
                                    None,
                                )
                            )
                continue
            # Stationary A (rows × k) or B (k × columns): this replica's part of k only.
            if self.stationary == "A":
                kk = (max(c0, k0), min(c1, k1))
                rect = (r0, r1, kk[0], kk[1])
                moving = self._pieces("B", (kk[0], kk[1], 0, n), replica, g, offset)
                updates = self._pieces("C", (r0, r1, 0, n), replica, g, offset)
            else:
                kk = (max(r0, k0), min(r1, k1))
                rect = (kk[0], kk[1], c0, c1)
                moving = self._pieces("A", (0, m, kk[0], kk[1]), replica, g, offset)
                updates = self._pieces("C", (0, m, c0, c1), replica, g, offset)
            if kk[1] <= kk[0]:
                continue
            owned.append((tile, rect))
            mv_at = len(pieces)
            up_at = mv_at + len(moving)
            pieces += moving + updates
            for mi, mp in enumerate(moving):
                for ui, up in enumerate(updates):
                    if self.stationary == "A":  # B piece (k × n) into C piece (rows × n)
                        lo, hi = max(mp.rect[2], up.rect[2]), min(mp.rect[3], up.rect[3])
                        if hi > lo:
                            mults.append(
                                Multiply(
                                    len(owned) - 1,
                                    (up.rect[0], up.rect[1]),
                                    (mp.rect[0], mp.rect[1]),
                                    (lo, hi),
                                    None,
                                    mv_at + mi,
                                    up_at + ui,
                                )
                            )
                    else:  # A piece (m × k) into C piece (m × columns)
                        lo, hi = max(mp.rect[0], up.rect[0]), min(mp.rect[1], up.rect[1])
                        if hi > lo:
                            mults.append(
                                Multiply(
                                    len(owned) - 1,
                                    (lo, hi),
                                    (mp.rect[2], mp.rect[3]),
                                    (up.rect[2], up.rect[3]),
                                    mv_at + mi,
                                    None,
                                    up_at + ui,
                                )
                            )
        return ProcessWork(g, tuple(owned), tuple(pieces), tuple(mults), self._reductions(g))

    def _reductions(self, g: int) -> tuple[Reduction, ...]:
        """Replica r > 0: the first holder of each non-empty C tile adds it into replica 0's
        holders."""
        replica, q = divmod(g, self.per_replica)
        if replica == 0:
            return ()
        layout = self.layout("C")
        return tuple(
            Reduction(t, layout.bounds(t), tuple(layout.owners(t)))
            for t in layout.tiles()
            if layout.owners(t)[0] == q and area(layout.bounds(t))
        )


def mesh_position(process: int, cols: int) -> tuple[int, int]:
    """Mesh (row, column) of ``process`` on a mesh with ``cols`` columns (row-major)."""
    return divmod(process, cols)


def transfer_axes(a: int, b: int, cols: int) -> tuple[int, ...]:
    """Physical axes a transfer between processes ``a`` and ``b`` crosses: (1,) within a mesh
    row, (0,) within a mesh column, (0, 1) otherwise (one link of each)."""
    (ra, ca), (rb, cb) = mesh_position(a, cols), mesh_position(b, cols)
    if ra == rb:
        return (1,)
    if ca == cb:
        return (0,)
    return (0, 1)


Phase = Literal["main", "reduce"]
TransferKind = Literal["get", "accumulate"]
GROUPS: tuple[tuple[Phase, TransferKind], ...] = (
    ("main", "get"),
    ("main", "accumulate"),
    ("reduce", "accumulate"),
)
"""The groups of one-sided operations a process issues: its gets and its accumulates during
the multiplies, then its replica-reduction accumulates."""


def busiest(moved: dict[int, int]) -> int | None:
    """The process moving the most elements (``process -> elements``); ties go to the lowest
    process; ``None`` when nothing moves."""
    if not moved or max(moved.values()) == 0:
        return None
    top = max(moved.values())
    return min(p for p, e in moved.items() if e == top)
