"""What every process of the universal one-sided GeMM does (Brock & Golin §4.1, Algorithms 1–2):
the pieces it gets and accumulates, its local multiplies, and its share of the replica reduction
(§4.2)."""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.errors import InfeasibleError
from meshtune.partition.layout import Layout, Matrix, Rect, area, layout_of, split
from meshtune.partition.partitioning import Partitioning, partition_problem


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
        return layout_of(self.part.kind(matrix), shape[0], shape[1], self.per_replica)

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
