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

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from meshtune.algorithm import Config
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
    shape: tuple[int, ...], parts: int, ring_axis: int, offsets: range
) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.int32]]:
    """Fancy index into ``(r, c, p, ·, ·)`` blocks giving ``(T, r, c, ·, ·)``: entry (t, i, j)
    is block (q − t) mod p of chip (i, j), q its position along ``ring_axis``."""
    r, c = shape[:2]
    steps = np.arange(offsets.start, offsets.stop, dtype=np.int32)[:, None, None] % parts
    rows = np.arange(r, dtype=np.int32)[None, :, None]
    cols = np.arange(c, dtype=np.int32)[None, None, :]
    block = (rows if ring_axis == 0 else cols) - steps
    block[block < 0] += parts
    return rows, cols, block


class _Picker:
    """Block ``(q − t) mod p`` of every chip's ``x`` at step t (q its position on the ring)."""

    def __init__(self, x: Array, parts: int, matrix_axis: int, ring_axis: int) -> None:
        self.blocks = _block_view(x, parts, matrix_axis)
        self.parts, self.ring_axis = parts, ring_axis

    def at(self, offsets: range) -> Array:
        """``(T, r, c, ·, ·)``: the blocks of steps ``offsets`` (a gather of those blocks only)."""
        picked: Array = self.blocks[
            _rotation(self.blocks.shape, self.parts, self.ring_axis, offsets)
        ]
        return picked


class _Placer:
    """Writes step t's block into block ``(q − t) mod p`` of every chip's output."""

    def __init__(self, shape: tuple[int, int, int, int], parts: int, matrix_axis: int) -> None:
        r, c, h, w = shape
        self.parts, self.matrix_axis, self.shape = parts, matrix_axis, shape
        inner = (h // parts, w) if matrix_axis == 2 else (h, w // parts)
        self.blocks = np.zeros((r, c, parts, *inner))

    def put(self, values: Array, ring_axis: int, offsets: range) -> None:
        """Write ``values (T, r, c, ·, ·)`` for steps ``offsets`` (distinct blocks per chip)."""
        self.blocks[_rotation(self.blocks.shape, self.parts, ring_axis, offsets)] = values

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


def _held(
    mesh: VirtualMesh, own: Array, ring: int, transposed: bool
) -> Iterator[tuple[range, Array]]:
    """Split all-gather: per batch of steps, ``(T, …)`` the chunk every chip holds at each.

    Step t holds the chunk of the chip t positions before (its own at t = 0): every chunk after
    the first arrives by one counted send-recv shift of the chunk held one step earlier.
    """
    last: Array | None = None
    for steps in _batches(own.shape[ring], own.size):
        if last is None:
            later = shifts(mesh, own, ring, len(steps) - 1, transposed=transposed)
            chunks = np.concatenate([own[None], later])
        else:
            chunks = shifts(mesh, last, ring, len(steps), transposed=transposed)
        last = chunks[-1]
        yield steps, chunks


def _running_sum(
    mesh: VirtualMesh, running: Array | None, partials: Array, ring: int, transposed: bool
) -> Array:
    """Split reduce-scatter: add the received running sum to each step's partial, pass it on."""
    for partial in partials:
        running = (
            partial
            if running is None
            else shift(mesh, running, ring, transposed=transposed) + partial
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

    Unrolling to S iterations only groups the steps' partial GeMMs (§4.2); the shifts are the
    same, so the executor merges the GeMMs of a batch of steps (bounded by memory, not by S)
    and checks that S divides the ring.
    """
    p = a.shape[split]
    if p % slices:
        raise ValueError(f"{slices} iterations do not divide a ring of {p}")
    swap = np.swapaxes

    def ag(x: Array, ring: int) -> Array:
        return all_gather(mesh, x, ring, transposed=transposed)

    def rds(x: Array, ring: int) -> Array:
        return reduce_scatter(mesh, x, ring, transposed=transposed)

    if dataflow is Dataflow.OS:
        out = np.zeros((*a.shape[:3], b.shape[3]))
        if split == COL_RING:  # A shifts; B all-gathered first
            rows = _Picker(ag(b, ROW_RING), p, 2, COL_RING)
            for steps, chunks in _held(mesh, a, COL_RING, transposed):
                out += _merge(chunks, 3) @ _merge(rows.at(steps), 2)
        else:  # B shifts; A all-gathered first
            cols = _Picker(ag(a, COL_RING), p, 3, ROW_RING)
            for steps, chunks in _held(mesh, b, ROW_RING, transposed):
                out += _merge(cols.at(steps), 3) @ _merge(chunks, 2)
        return out
    if dataflow is Dataflow.LS and split == ROW_RING:  # B shifts, then RdS_col of C'
        placer = _Placer((a.shape[0], a.shape[1], a.shape[2], b.shape[2] * p), p, 3)
        for steps, chunks in _held(mesh, b, ROW_RING, transposed):
            products = a @ swap(_merge(chunks, 2), 2, 3)
            placer.put(_split(products, len(steps), 3), ROW_RING, steps)
        return rds(placer.result(), COL_RING)
    if dataflow is Dataflow.RS and split == COL_RING:  # A shifts, then RdS_row of C'
        placer = _Placer((a.shape[0], a.shape[1], a.shape[3] * p, b.shape[3]), p, 2)
        for steps, chunks in _held(mesh, a, COL_RING, transposed):
            products = swap(_merge(chunks, 3), 2, 3) @ b
            placer.put(_split(products, len(steps), 2), COL_RING, steps)
        return rds(placer.result(), ROW_RING)
    running: Array | None = None
    if dataflow is Dataflow.LS:  # B all-gathered first; C's running sums shift
        b_all = ag(b, ROW_RING)
        rows = _Picker(b_all, p, 2, COL_RING)
        for steps in _batches(p, a.shape[0] * a.shape[1] * a.shape[2] * b_all.shape[2] // p):
            block = _merge(rows.at(range(steps.start + 1, steps.stop + 1)), 2)
            partials = _split(a @ swap(block, 2, 3), len(steps), 3)
            running = _running_sum(mesh, running, partials, COL_RING, transposed)
    else:  # RS: A all-gathered first; C's running sums shift
        a_all = ag(a, COL_RING)
        cols = _Picker(a_all, p, 3, ROW_RING)
        for steps in _batches(p, a_all.shape[3] // p * b.size // b.shape[2]):
            block = _merge(cols.at(range(steps.start + 1, steps.stop + 1)), 3)
            partials = _split(swap(block, 2, 3) @ b, len(steps), 2)
            running = _running_sum(mesh, running, partials, ROW_RING, transposed)
    if running is None:
        raise ValueError("an empty ring")
    return running


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
