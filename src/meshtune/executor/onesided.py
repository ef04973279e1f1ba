"""The universal one-sided GeMM on the virtual mesh (Brock & Golin, §4.1–4.2, Algorithms 1–2).

Every process holds its own tiles of A and B (in each replica) and of its replica's C, as
separate NumPy arrays. It walks :class:`meshtune.partition.work.ProcessWork`: each remote input
piece arrives by one get (:meth:`VirtualMesh.one_sided`), each local multiply reads its slices of
those pieces (or of its own tiles) and adds into its stationary C tile or into a buffer for a C
piece, and each buffer is added into the local copy and accumulated into every other process
that holds that piece. Replicas r > 0 then accumulate their partial C into replica 0
(``reduce_replicas``), and C is read back from replica 0. The configuration is that of
:mod:`meshtune.cost.onesided`; an LS or RS operand is transposed locally into its logical form.
"""

from __future__ import annotations

import numpy as np

from meshtune.cost.config import Config
from meshtune.cost.onesided import problem_of
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.mesh import Array, VirtualMesh, check_operands
from meshtune.hardware.mesh import Mesh
from meshtune.partition.layout import Matrix, Rect

Tiles = dict[tuple[int, int], Array]


def _cut(array: Array, origin: Rect, rows: tuple[int, int], cols: tuple[int, int]) -> Array:
    """The part ``rows × cols`` (matrix coordinates) of ``array``, which covers ``origin``."""
    return array[
        rows[0] - origin[0] : rows[1] - origin[0], cols[0] - origin[2] : cols[1] - origin[2]
    ]


def execute(op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int) -> Array:
    """Run one pass with one-sided gets and accumulates; return dense C."""
    check_operands(op, a, b)
    dense = {
        "A": a.T if op.dataflow is Dataflow.RS else a,
        "B": b.T if op.dataflow is Dataflow.LS else b,
    }
    problem = problem_of(op, Mesh(mesh.rows, mesh.cols), config)
    per = problem.per_replica
    layouts = {x: problem.layout(x) for x in ("A", "B", "C")}
    # store[g][matrix][tile]: process g's own copy of a tile.
    store: list[dict[str, Tiles]] = []
    for g in range(problem.procs):
        q = g % per
        held: dict[str, Tiles] = {}
        for x, layout in layouts.items():
            held[x] = {}
            for tile in layout.owned(q):
                r0, r1, c0, c1 = layout.bounds(tile)
                if x == "C":
                    held[x][tile] = np.zeros((r1 - r0, c1 - c0))
                else:
                    held[x][tile] = np.array(dense[x][r0:r1, c0:c1])
        store.append(held)

    def own(g: int, x: Matrix, tile: tuple[int, int]) -> tuple[Array, Rect]:
        return store[g][x][tile], layouts[x].bounds(tile)

    works = problem.work()
    for work in works:
        g = work.process
        arrays: list[tuple[Array, Rect]] = []
        for piece in work.pieces:
            r0, r1, c0, c1 = piece.rect
            if piece.matrix == "C":
                arrays.append((np.zeros((r1 - r0, c1 - c0)), piece.rect))
            elif piece.source is None:
                arrays.append(own(g, piece.matrix, piece.tile))
            else:
                theirs, origin = own(piece.source, piece.matrix, piece.tile)
                got = mesh.one_sided(
                    g, piece.source, _cut(theirs, origin, (r0, r1), (c0, c1)), "get"
                )
                arrays.append((got, piece.rect))
        stat = problem.stationary
        for mult in work.multiplies:
            home = own(g, stat, work.stationary[mult.stationary][0])
            src_a = home if mult.a is None else arrays[mult.a]
            src_b = home if mult.b is None else arrays[mult.b]
            dst = home if mult.c is None else arrays[mult.c]
            _cut(*dst, mult.m, mult.n)[...] += _cut(*src_a, mult.m, mult.k) @ _cut(
                *src_b, mult.k, mult.n
            )
        for piece, (buffer, rect) in zip(work.pieces, arrays, strict=True):
            if piece.matrix != "C":
                continue
            rows, cols = (rect[0], rect[1]), (rect[2], rect[3])
            if piece.local:
                _cut(*own(g, "C", piece.tile), rows, cols)[...] += buffer
            for target in piece.targets:
                sent = mesh.one_sided(g, target, buffer, "accumulate")
                _cut(*own(target, "C", piece.tile), rows, cols)[...] += sent
    for work in works:
        for red in work.reductions:
            partial = store[work.process]["C"][red.tile]
            for target in red.targets:
                store[target]["C"][red.tile] += mesh.one_sided(
                    work.process, target, partial, "accumulate", "reduce"
                )
    mesh.settle_one_sided()
    c = np.zeros((op.m, op.n))
    for tile in layouts["C"].tiles():
        r0, r1, c0, c1 = layouts["C"].bounds(tile)
        c[r0:r1, c0:c1] = store[layouts["C"].owners(tile)[0]]["C"][tile]
    return c
