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

import numpy as np

from meshtune.algorithm import Config
from meshtune.cost.wang import split_axis
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.collectives import all_gather, reduce_scatter, shift
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard
from meshtune.executor.meshslice import COL_RING, ROW_RING


def _blocks(x: Array, parts: int, matrix_axis: int) -> Array:
    """View of stacked ``x (r, c, h, w)`` as ``(r, c, parts, ·, ·)``, blocks of ``matrix_axis``."""
    r, c, h, w = x.shape
    if matrix_axis == 2:
        return x.reshape(r, c, parts, h // parts, w)
    return x.reshape(r, c, h, parts, w // parts).transpose(0, 1, 3, 2, 4)


def _index(x: Array, ring_axis: int, offset: int, parts: int) -> np.ndarray:
    """Per chip, ``(q − offset) mod parts`` for its position q along ``ring_axis``."""
    shape = [1, 1, 1, 1, 1]
    shape[ring_axis] = x.shape[ring_axis]
    return ((np.arange(x.shape[ring_axis]) - offset) % parts).reshape(shape)


def pick(x: Array, parts: int, matrix_axis: int, ring_axis: int, offset: int) -> Array:
    """Every chip's block ``(q − offset) mod parts`` of its ``x`` along ``matrix_axis``."""
    blocks = _blocks(x, parts, matrix_axis)
    picked: Array = np.take_along_axis(blocks, _index(x, ring_axis, offset, parts), axis=2)
    return picked[:, :, 0]


def put(target: Array, value: Array, matrix_axis: int, ring_axis: int, offset: int) -> None:
    """Write ``value`` into every chip's block ``(q − offset) mod parts`` of ``target``."""
    parts = target.shape[matrix_axis] // value.shape[matrix_axis]
    blocks = _blocks(target, parts, matrix_axis)
    np.put_along_axis(blocks, _index(target, ring_axis, offset, parts), value[:, :, None], axis=2)


def _held_chunks(mesh: VirtualMesh, own: Array, ring: int, transposed: bool) -> list[Array]:
    """Split all-gather: the chunk every chip holds at steps 0 … p − 1 (p − 1 shifts)."""
    p = own.shape[ring]
    held = [own]
    for _ in range(p - 1):
        held.append(shift(mesh, held[-1], ring, transposed=transposed))
    return held


def _groups(items: list[Array], slices: int, axis: int) -> list[Array]:
    """The p per-step arrays merged into S iterations of u = p / S (concatenated on ``axis``)."""
    u = len(items) // slices
    return [np.concatenate(items[i * u : (i + 1) * u], axis=axis) for i in range(slices)]


def _pieces(x: Array, parts: int, axis: int) -> list[Array]:
    """``x`` cut into ``parts`` equal pieces along matrix ``axis``."""
    return list(np.split(x, parts, axis=axis))


def _reduce_steps(mesh: VirtualMesh, partials: list[Array], ring: int, transposed: bool) -> Array:
    """Split reduce-scatter: add the received running sum to step t's partial, pass it on."""
    running = partials[0]
    for partial in partials[1:]:
        running = shift(mesh, running, ring, transposed=transposed) + partial
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
    collective becomes shifts (:data:`ROW_RING` or :data:`COL_RING`). Returns C's shards."""
    p = a.shape[split]
    if p % slices:
        raise ValueError(f"{slices} iterations do not divide a ring of {p}")
    u = p // slices
    t_all = range(p)

    def ag(x: Array, ring: int) -> Array:
        return all_gather(mesh, x, ring, transposed=transposed)

    def rds(x: Array, ring: int) -> Array:
        return reduce_scatter(mesh, x, ring, transposed=transposed)

    swap = np.swapaxes
    if dataflow is Dataflow.OS and split == COL_RING:  # A shifts, B all-gathered first
        b_all = ag(b, ROW_RING)
        held = _held_chunks(mesh, a, COL_RING, transposed)
        rows = [pick(b_all, p, 2, COL_RING, t) for t in t_all]
        return sum(
            (
                x @ y
                for x, y in zip(_groups(held, slices, 3), _groups(rows, slices, 2), strict=True)
            ),
            np.zeros((*a.shape[:3], b.shape[3])),
        )
    if dataflow is Dataflow.OS:  # B shifts, A all-gathered first
        a_all = ag(a, COL_RING)
        held = _held_chunks(mesh, b, ROW_RING, transposed)
        cols = [pick(a_all, p, 3, ROW_RING, t) for t in t_all]
        return sum(
            (
                x @ y
                for x, y in zip(_groups(cols, slices, 3), _groups(held, slices, 2), strict=True)
            ),
            np.zeros((*a.shape[:3], b.shape[3])),
        )
    if dataflow is Dataflow.LS and split == ROW_RING:  # B shifts, then RdS_col of C'
        held = _held_chunks(mesh, b, ROW_RING, transposed)
        partial = np.zeros((*a.shape[:3], b.shape[2] * p))
        for i, chunk in enumerate(_groups(held, slices, 2)):
            for j, piece in enumerate(_pieces(a @ swap(chunk, 2, 3), u, 3)):
                put(partial, piece, 3, ROW_RING, i * u + j)
        return rds(partial, COL_RING)
    if dataflow is Dataflow.LS:  # B all-gathered first, C's running sums shift
        b_all = ag(b, ROW_RING)
        rows = [pick(b_all, p, 2, COL_RING, t + 1) for t in t_all]
        partials = [
            piece
            for chunk in _groups(rows, slices, 2)
            for piece in _pieces(a @ swap(chunk, 2, 3), u, 3)
        ]
        return _reduce_steps(mesh, partials, COL_RING, transposed)
    if split == COL_RING:  # RS: A shifts, then RdS_row of C'
        held = _held_chunks(mesh, a, COL_RING, transposed)
        partial = np.zeros((a.shape[0], a.shape[1], a.shape[3] * p, b.shape[3]))
        for i, chunk in enumerate(_groups(held, slices, 3)):
            for j, piece in enumerate(_pieces(swap(chunk, 2, 3) @ b, u, 2)):
                put(partial, piece, 2, COL_RING, i * u + j)
        return rds(partial, ROW_RING)
    a_all = ag(a, COL_RING)  # RS: A all-gathered first, C's running sums shift
    cols = [pick(a_all, p, 3, ROW_RING, t + 1) for t in t_all]
    partials = [
        piece
        for chunk in _groups(cols, slices, 3)
        for piece in _pieces(swap(chunk, 2, 3) @ b, u, 2)
    ]
    return _reduce_steps(mesh, partials, ROW_RING, transposed)


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
