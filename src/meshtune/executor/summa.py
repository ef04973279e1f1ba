"""SUMMA on a virtual mesh (MeshSlice §2.3.3, Figure 2a, §4.2; van de Geijn [30]).

The L = lcm(r, c) blocks of the sliced extent are visited in order: block p of the column-ring
operand lives in mesh column p // (L / c) (its (p mod L / c)-th block there), block p of the
row-ring operand in mesh row p // (L / r). Broadcasts and reduces are the pipelined ring
operations of :func:`meshtune.executor.collectives.broadcast` /
:func:`~meshtune.executor.collectives.reduce` with ``config["packets"]`` packets.
"""

from __future__ import annotations

import math

import numpy as np

from meshtune.cost.config import Config
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.collectives import broadcast, reduce
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard
from meshtune.executor.meshslice import COL_RING, ROW_RING

# Broadcasts handled per batch: bounds the memory of the blocks in flight.
BATCH_ELEMENTS = 1 << 22


def _blocks(x: Array, per: int, matrix_axis: int, blocks: range) -> Array:
    """``(len(blocks), r, c, ·, ·)``: entry p is every chip's local block p mod ``per`` of ``x``
    along ``matrix_axis`` (the block p of the chips that own it)."""
    r, c, h, w = x.shape
    local = [p % per for p in blocks]
    if matrix_axis == 2:
        return np.moveaxis(x.reshape(r, c, per, h // per, w)[:, :, local], 2, 0)
    return np.moveaxis(x.reshape(r, c, h, per, w // per)[:, :, :, local], 3, 0)


def summa(
    mesh: VirtualMesh,
    dataflow: Dataflow,
    a: Array,
    b: Array,
    *,
    packets: int,
    slices: int,
    transposed: bool = False,
) -> Array:
    """Figure 2a on stacked shards of the logical mesh (shapes as in
    :func:`meshtune.executor.meshslice.meshslice`); returns C's shards.

    The L broadcasts (and reduces) of one direction are independent operations: they run in
    batches of pipelined operations, each counted on its own. Unrolling to S iterations only
    groups the partial GeMMs (§4.2); it moves nothing differently, so the executor sums the
    partial products of a batch at once and checks that ``slices`` divides L.
    """
    r, c = a.shape[:2]
    big_l = math.lcm(r, c)
    if big_l % slices:
        raise ValueError(f"{slices} iterations do not divide lcm({r}, {c}) = {big_l}")
    per_c, per_r = big_l // c, big_l // r  # blocks a chip owns of a row / column operand
    swap = np.swapaxes
    per_block = max(a.size // per_c, b.size // per_r)
    size = max(1, BATCH_ELEMENTS // per_block)
    batches = [range(p, min(big_l, p + size)) for p in range(0, big_l, size)]

    def bcast(x: Array, ring: int, matrix_axis: int, blocks: range) -> Array:
        per = per_c if ring == COL_RING else per_r
        roots = [p // per for p in blocks]
        local = _blocks(x, per, matrix_axis, blocks)
        return broadcast(mesh, local, ring, roots, packets, transposed=transposed)

    if dataflow is Dataflow.OS:
        out = np.zeros((r, c, a.shape[2], b.shape[3]))
        for blocks in batches:
            a_all = bcast(a, COL_RING, 3, blocks)
            b_all = bcast(b, ROW_RING, 2, blocks)
            out += (a_all @ b_all).sum(axis=0)
        return out
    if dataflow is Dataflow.LS:
        width = b.shape[2] // per_r
        out = np.zeros((r, c, a.shape[2], width * per_c))
        for blocks in batches:
            partial = a[None] @ swap(bcast(b, ROW_RING, 2, blocks), 3, 4)  # (·, r, c, m/r, n/L)
            roots = [p // per_c for p in blocks]
            summed = reduce(mesh, partial, COL_RING, roots, packets, transposed=transposed)
            for p, result in zip(blocks, summed, strict=True):
                root, at = p // per_c, (p % per_c) * width
                out[:, root, :, at : at + width] = result[:, root]
        return out
    height = a.shape[3] // per_c
    out = np.zeros((r, c, height * per_r, b.shape[3]))
    for blocks in batches:
        partial = swap(bcast(a, COL_RING, 3, blocks), 3, 4) @ b[None]  # (·, r, c, m/L, n/c)
        roots = [p // per_r for p in blocks]
        summed = reduce(mesh, partial, ROW_RING, roots, packets, transposed=transposed)
        for p, result in zip(blocks, summed, strict=True):
            root, at = p // per_r, (p % per_r) * height
            out[root, :, at : at + height] = result[root]
    return out


def execute(op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int) -> Array:
    """Shard dense ``a`` and ``b`` per ``op`` on ``mesh``, run SUMMA, gather dense C.

    ``config`` gives the packet count D and the unrolled iteration count S; ``block`` is unused.
    """
    check_operands(op, a, b)
    r, c = (mesh.cols, mesh.rows) if op.transposed else (mesh.rows, mesh.cols)
    out = summa(
        mesh,
        op.dataflow,
        shard(a, r, c),
        shard(b, r, c),
        packets=config["packets"],
        slices=config["slices"],
        transposed=op.transposed,
    )
    return unshard(out)
