"""Wang's 2D GeMM on a virtual mesh (MeshSlice §2.3.4, §4.2; Wang et al. [34]).

One direction's collective runs as p − 1 send-recv ring shifts interleaved with partial GeMMs;
the other direction is a plain all-gather (before) or reduce-scatter (after). On the logical
r × c mesh, with the split ring along stacked axis ``x`` (p chips) and q a chip's position on it:

* split all-gather of the moving input: at step t = 0 … p − 1 the chip holds the chunk of the
  chip q − t (its own at t = 0), multiplies it with block (q − t) mod p of the other operand
  along the sliced extent, and passes the chunk on (p − 1 shifts);
* split reduce-scatter of the output: at step t the chip computes output block (q − t − 1) mod p,
  adds the running sum it received and passes it on; after p steps chip q holds block q summed
  over the ring.

Loop unrolling (§4.2) groups the p steps into S iterations of u = p / S: an iteration does one
GeMM over its u chunks and u shifts. The sliced extent (k for OS, n for LS, m for RS) is what the
chunks split, as in :mod:`meshtune.cost.wang`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from meshtune.cost.config import Config
from meshtune.cost.wang import split_axis
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.collectives import all_gather, reduce_scatter, shift, shifts
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard
from meshtune.executor.meshslice import COL_RING, ROW_RING

# Steps handled per batch: bounds the memory of the held chunks and partial products.
BATCH_ELEMENTS = 1 << 21


def _batches(p: int, array_size: int) -> list[range]:
    """Steps 0 … p − 1 cut into batches of at most BATCH_ELEMENTS held elements."""
    size = max(1, BATCH_ELEMENTS // max(1, array_size))
    return [range(t, min(p, t + size)) for t in range(0, p, size)]


def _block_view(x: Array, parts: int, matrix_axis: int) -> Array:
    """View of stacked ``x (r, c, h, w)`` as ``(r, c, parts, ·, ·)``: blocks of ``matrix_axis``."""
    r, c, h, w = x.shape
    if matrix_axis == 2:
        return x.reshape(r, c, parts, h // parts, w)
    return x.reshape(r, c, h, parts, w // parts).transpose(0, 1, 3, 2, 4)


def _rotation(
    shape: tuple[int, ...], parts: int, ring_axis: int, offsets: range, direction: int
) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.int32]]:
    """Fancy index into ``(r, c, p, ·, ·)`` blocks giving ``(T, r, c, ·, ·)``: entry (t, i, j)
    is block (q − direction · t) mod p of chip (i, j), q its position along ``ring_axis``."""
    r, c = shape[:2]
    steps = direction * np.arange(offsets.start, offsets.stop, dtype=np.int32)[:, None, None]
    rows = np.arange(r, dtype=np.int32)[None, :, None]
    cols = np.arange(c, dtype=np.int32)[None, None, :]
    block = ((rows if ring_axis == 0 else cols) - steps) % parts
    return rows, cols, block


class _Picker:
    """Block ``(q − direction · t) mod p`` of every chip's ``x`` at step t (q its position on
    the ring)."""

    def __init__(
        self, x: Array, parts: int, matrix_axis: int, ring_axis: int, direction: int
    ) -> None:
        self.blocks = _block_view(x, parts, matrix_axis)
        self.parts, self.ring_axis, self.direction = parts, ring_axis, direction

    def at(self, offsets: range) -> Array:
        """``(T, r, c, ·, ·)``: the blocks of steps ``offsets`` (a gather of those blocks only)."""
        index = _rotation(self.blocks.shape, self.parts, self.ring_axis, offsets, self.direction)
        picked: Array = self.blocks[index]
        return picked


class _Placer:
    """Writes step t's block into block ``(q − direction · t) mod p`` of every chip's output."""

    def __init__(
        self, shape: tuple[int, int, int, int], parts: int, matrix_axis: int, direction: int
    ) -> None:
        r, c, h, w = shape
        self.parts, self.matrix_axis, self.shape = parts, matrix_axis, shape
        self.direction = direction
        inner = (h // parts, w) if matrix_axis == 2 else (h, w // parts)
        self.blocks = np.zeros((r, c, parts, *inner))

    def put(self, values: Array, ring_axis: int, offsets: range) -> None:
        """Write ``values (T, r, c, ·, ·)`` for steps ``offsets`` (distinct blocks per chip)."""
        index = _rotation(self.blocks.shape, self.parts, ring_axis, offsets, self.direction)
        self.blocks[index] = values

    def result(self) -> Array:
        """The output ``(r, c, h, w)``: every block was written once."""
        if self.matrix_axis == 2:
            return self.blocks.reshape(self.shape)
        return np.ascontiguousarray(self.blocks.transpose(0, 1, 3, 2, 4)).reshape(self.shape)


def _merge(x: Array, matrix_axis: int) -> Array:
    """``(T, r, c, h, w)`` → ``(r, c, ·, ·)``, the T blocks concatenated along ``matrix_axis``
    (the merged GeMM operand of §4.2's unrolling)."""
    t, r, c, h, w = x.shape
    if matrix_axis == 2:
        return np.moveaxis(x, 0, 2).reshape(r, c, t * h, w)
    return np.moveaxis(x, 0, 3).reshape(r, c, h, t * w)


def _split(x: Array, parts: int, matrix_axis: int) -> Array:
    """Inverse of :func:`_merge`: ``(r, c, ·, ·)`` → ``(T, r, c, h, w)``."""
    r, c, h, w = x.shape
    if matrix_axis == 2:
        return np.moveaxis(x.reshape(r, c, parts, h // parts, w), 2, 0)
    return np.moveaxis(x.reshape(r, c, h, parts, w // parts), 3, 0)


def _halves(x: Array, parts: int, matrix_axis: int, ways: int) -> list[Array]:
    """``x``'s ``parts`` blocks along ``matrix_axis`` cut in ``ways`` (1 or 2) pieces each:
    with 2, the first ⌈size / 2⌉ of every block, then the rest, each piece the blocks' parts
    concatenated in block order (what travels one way round the ring, and what the other)."""
    if ways == 1:
        return [x]
    view = _block_view(x, parts, matrix_axis)
    cut = (view.shape[3 if matrix_axis == 2 else 4] + 1) // 2
    pieces = (
        (view[:, :, :, :cut], view[:, :, :, cut:])
        if matrix_axis == 2
        else (
            view[..., :cut],
            view[..., cut:],
        )
    )
    return [_unview(piece, matrix_axis) for piece in pieces]


def _join(pieces: list[Array], parts: int, matrix_axis: int) -> Array:
    """Inverse of :func:`_halves`: every block's pieces put back side by side."""
    if len(pieces) == 1:
        return pieces[0]
    views = [_block_view(piece, parts, matrix_axis) for piece in pieces]
    return _unview(np.concatenate(views, axis=3 if matrix_axis == 2 else 4), matrix_axis)


def _unview(view: Array, matrix_axis: int) -> Array:
    """Inverse of :func:`_block_view`: ``(r, c, parts, ·, ·)`` → ``(r, c, h, w)``."""
    r, c, parts, h, w = view.shape
    if matrix_axis == 2:
        return np.ascontiguousarray(view).reshape(r, c, parts * h, w)
    return np.ascontiguousarray(view.transpose(0, 1, 3, 2, 4)).reshape(r, c, h, parts * w)


def _held(
    mesh: VirtualMesh, own: Array, ring: int, transposed: bool, direction: int
) -> Iterator[tuple[range, Array]]:
    """Split all-gather: per batch of steps, ``(T, …)`` the chunk every chip holds at each.

    Step t holds the chunk of the chip t positions before (``direction`` 1) or after (−1), its
    own at t = 0: every chunk after the first arrives by one counted send-recv shift of the
    chunk held one step earlier.
    """
    last: Array | None = None
    for steps in _batches(own.shape[ring], own.size):
        if last is None:
            count, start = len(steps) - 1, own
        else:
            count, start = len(steps), last
        later = shifts(mesh, start, ring, count, transposed=transposed, direction=direction)
        chunks = np.concatenate([own[None], later]) if last is None else later
        last = chunks[-1]
        yield steps, chunks


def _running_sum(
    mesh: VirtualMesh,
    running: Array | None,
    partials: Array,
    ring: int,
    transposed: bool,
    direction: int,
) -> Array:
    """Split reduce-scatter: add the received running sum to each step's partial, pass it on."""
    for partial in partials:
        running = (
            partial
            if running is None
            else shift(mesh, running, ring, transposed=transposed, direction=direction) + partial
        )
    if running is None:
        raise ValueError("no partial products to reduce")
    return running


def wang(
    mesh: VirtualMesh,
    dataflow: Dataflow,
    a: Array,
    b: Array,
    *,
    split: int,
    slices: int,
    transposed: bool = False,
) -> Array:
    """Wang's algorithm on stacked shards of the logical mesh (shapes as in
    :func:`meshtune.executor.meshslice.meshslice`); ``split`` is the stacked axis whose
    collective becomes shifts (:data:`ROW_RING` or :data:`COL_RING`). Returns C's shards.

    On a ring of more than two chips the shifts run both ways: every moving chunk (and the
    blocks of the other operand or of C that meet it) is cut in two along the sliced extent,
    the first part travels to the next chip, the second to the previous one, each on a mesh
    of its own whose counters :meth:`VirtualMesh.merge_layers` charges as the one step they
    share (full-duplex links carry both at once). The plain collective runs once.

    Unrolling to S iterations only groups the steps' partial GeMMs (§4.2); the shifts are the
    same, so the executor merges the GeMMs of a batch of steps (bounded by memory, not by S)
    and checks that S divides the ring.
    """
    p = a.shape[split]
    if p % slices:
        raise ValueError(f"{slices} iterations do not divide a ring of {p}")
    ways = 2 if p > 2 else 1
    ring = _Ring(mesh, mesh.fresh(ways) if ways == 2 else [mesh], (1, -1)[:ways], p, transposed)
    if dataflow is Dataflow.OS:
        return _os(ring, a, b, split)
    if dataflow is Dataflow.LS and split == ROW_RING:
        return _ls_shifting_b(ring, a, b)
    if dataflow is Dataflow.RS and split == COL_RING:
        return _rs_shifting_a(ring, a, b)
    if dataflow is Dataflow.LS:
        return _ls_shifting_sums(ring, a, b)
    return _rs_shifting_sums(ring, a, b)


_Step = Callable[[VirtualMesh, int, Array, Array], Array]
"""One direction's share of a split collective: ``step(mesh, direction, x piece, y piece)``."""


@dataclass(frozen=True)
class _Ring:
    """The split ring of one call: ``mesh`` (charged with every counter), one mesh per direction
    the shifts run (``meshes``, ``directions``: 1 to the next chip, −1 to the previous), the ring
    size ``p`` and whether the operands are transposed."""

    mesh: VirtualMesh
    meshes: list[VirtualMesh]
    directions: tuple[int, ...]
    p: int
    transposed: bool

    @property
    def ways(self) -> int:
        """How many directions the shifts run (2 on a ring of more than two chips)."""
        return len(self.directions)

    def ag(self, x: Array, ring: int) -> Array:
        """The plain all-gather of ``x`` along ``ring``."""
        return all_gather(self.mesh, x, ring, transposed=self.transposed)

    def rds(self, x: Array, ring: int) -> Array:
        """The plain reduce-scatter of ``x`` along ``ring``."""
        return reduce_scatter(self.mesh, x, ring, transposed=self.transposed)

    def both(self, run: _Step, x: list[Array], y: list[Array]) -> list[Array]:
        """``run(mesh, direction, x piece, y piece)`` for each direction."""
        return [
            run(m, d, xi, yi)
            for m, d, xi, yi in zip(self.meshes, self.directions, x, y, strict=True)
        ]

    def merge_counts(self) -> None:
        """Charge :attr:`mesh` with the directions' counters (see :func:`_merge_counts`)."""
        _merge_counts(self.mesh, self.meshes)


def _os(ring: _Ring, a: Array, b: Array, split: int) -> Array:
    """OS: the split input shifts, the other is all-gathered first; every step adds its partial
    product into C."""
    p, ways, transposed = ring.p, ring.ways, ring.transposed
    if split == COL_RING:  # A shifts; B all-gathered first
        moving, other = _halves(a, 1, 3, ways), _halves(ring.ag(b, ROW_RING), p, 2, ways)

        def os_step(m: VirtualMesh, d: int, own: Array, gathered: Array) -> Array:
            rows = _Picker(gathered, p, 2, COL_RING, d)
            out = np.zeros((*own.shape[:3], gathered.shape[3]))
            for steps, chunks in _held(m, own, COL_RING, transposed, d):
                out += _merge(chunks, 3) @ _merge(rows.at(steps), 2)
            return out

    else:  # B shifts; A all-gathered first
        moving, other = _halves(b, 1, 2, ways), _halves(ring.ag(a, COL_RING), p, 3, ways)

        def os_step(m: VirtualMesh, d: int, own: Array, gathered: Array) -> Array:
            cols = _Picker(gathered, p, 3, ROW_RING, d)
            out = np.zeros((*gathered.shape[:3], own.shape[3]))
            for steps, chunks in _held(m, own, ROW_RING, transposed, d):
                out += _merge(cols.at(steps), 3) @ _merge(chunks, 2)
            return out

    out: Array = sum(ring.both(os_step, moving, other), np.zeros(()))
    ring.merge_counts()
    return out


def _ls_shifting_b(ring: _Ring, a: Array, b: Array) -> Array:
    """LS split along the rows: B shifts, then the reduce-scatter of C' along the columns."""
    p, transposed = ring.p, ring.transposed

    def ls_step(m: VirtualMesh, d: int, own: Array, _: Array) -> Array:
        placer = _Placer((a.shape[0], a.shape[1], a.shape[2], own.shape[2] * p), p, 3, d)
        for steps, chunks in _held(m, own, ROW_RING, transposed, d):
            products = a @ np.swapaxes(_merge(chunks, 2), 2, 3)
            placer.put(_split(products, len(steps), 3), ROW_RING, steps)
        return placer.result()

    pieces = _halves(b, 1, 2, ring.ways)
    c_partial = _join(ring.both(ls_step, pieces, pieces), p, 3)
    ring.merge_counts()
    return ring.rds(c_partial, COL_RING)


def _rs_shifting_a(ring: _Ring, a: Array, b: Array) -> Array:
    """RS split along the columns: A shifts, then the reduce-scatter of C' along the rows."""
    p, transposed = ring.p, ring.transposed

    def rs_step(m: VirtualMesh, d: int, own: Array, _: Array) -> Array:
        placer = _Placer((a.shape[0], a.shape[1], own.shape[3] * p, b.shape[3]), p, 2, d)
        for steps, chunks in _held(m, own, COL_RING, transposed, d):
            products = np.swapaxes(_merge(chunks, 3), 2, 3) @ b
            placer.put(_split(products, len(steps), 2), COL_RING, steps)
        return placer.result()

    pieces = _halves(a, 1, 3, ring.ways)
    c_partial = _join(ring.both(rs_step, pieces, pieces), p, 2)
    ring.merge_counts()
    return ring.rds(c_partial, ROW_RING)


def _ls_shifting_sums(ring: _Ring, a: Array, b: Array) -> Array:
    """LS split along the columns: B all-gathered first; C's running sums shift."""
    p, transposed = ring.p, ring.transposed
    b_pieces = _halves(ring.ag(b, ROW_RING), p, 2, ring.ways)

    def ls_sum(m: VirtualMesh, d: int, b_all: Array, _: Array) -> Array:
        rows = _Picker(b_all, p, 2, COL_RING, d)
        running: Array | None = None
        for steps in _batches(p, a.shape[0] * a.shape[1] * a.shape[2] * b_all.shape[2] // p):
            block = _merge(rows.at(range(steps.start + 1, steps.stop + 1)), 2)
            partials = _split(a @ np.swapaxes(block, 2, 3), len(steps), 3)
            running = _running_sum(m, running, partials, COL_RING, transposed, d)
        return _received(running)

    out = np.concatenate(ring.both(ls_sum, b_pieces, b_pieces), axis=3)
    ring.merge_counts()
    return out


def _rs_shifting_sums(ring: _Ring, a: Array, b: Array) -> Array:
    """RS split along the rows: A all-gathered first; C's running sums shift."""
    p, transposed = ring.p, ring.transposed
    a_pieces = _halves(ring.ag(a, COL_RING), p, 3, ring.ways)

    def rs_sum(m: VirtualMesh, d: int, a_all: Array, _: Array) -> Array:
        cols = _Picker(a_all, p, 3, ROW_RING, d)
        running: Array | None = None
        for steps in _batches(p, a_all.shape[3] // p * b.size // b.shape[2]):
            block = _merge(cols.at(range(steps.start + 1, steps.stop + 1)), 3)
            partials = _split(np.swapaxes(block, 2, 3) @ b, len(steps), 2)
            running = _running_sum(m, running, partials, ROW_RING, transposed, d)
        return _received(running)

    out = np.concatenate(ring.both(rs_sum, a_pieces, a_pieces), axis=2)
    ring.merge_counts()
    return out


def _received(running: Array | None) -> Array:
    """The running sum a ring ended with (``ValueError`` for an empty ring)."""
    if running is None:
        raise ValueError("an empty ring")
    return running


def _merge_counts(mesh: VirtualMesh, meshes: list[VirtualMesh]) -> None:
    """Charge ``mesh`` with the two directions' counters (nothing when it ran one way on
    ``mesh`` itself)."""
    if len(meshes) > 1:
        mesh.merge_layers(meshes)


def execute(op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int) -> Array:
    """Shard dense ``a`` and ``b`` per ``op``, run Wang's algorithm, gather dense C.

    ``config["split"]`` is the mesh dimension (1: P_r, 2: P_c) whose collective is split and
    ``config["slices"]`` the number of unrolled iterations; ``block`` is unused (nothing is
    sliced below a shard).
    """
    check_operands(op, a, b)
    r, c = (mesh.cols, mesh.rows) if op.transposed else (mesh.rows, mesh.cols)
    out = wang(
        mesh,
        op.dataflow,
        shard(a, r, c),
        shard(b, r, c),
        split=mesh.physical_axis(split_axis(config), op.transposed),
        slices=config["slices"],
        transposed=op.transposed,
    )
    return unshard(out)
