"""SUMMA on a virtual mesh (MeshSlice §2.3.3, Figure 2a, §4.2; van de Geijn [30]).

The L = lcm(r, c) blocks of the sliced extent are visited in order, grouped into S unrolled
iterations of u blocks: block p of the column-ring operand lives in mesh column p // (L / c)
(its (p mod L / c)-th block there), block p of the row-ring operand in mesh row p // (L / r).
Broadcasts and reduces are the pipelined ring operations of
:func:`meshtune.executor.collectives.broadcast` / :func:`~meshtune.executor.collectives.reduce`
with ``config["packets"]`` packets; each unrolled iteration multiplies its u blocks at once.
"""

from __future__ import annotations

import math

import numpy as np

from meshtune.algorithm import Config
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.collectives import broadcast, reduce
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard
from meshtune.executor.meshslice import COL_RING, ROW_RING


def _part(x: Array, parts: int, index: int, matrix_axis: int) -> Array:
    """Block ``index`` of ``parts`` of every chip's ``x`` along ``matrix_axis``."""
    size = x.shape[matrix_axis] // parts
    return np.take(x, range(index * size, (index + 1) * size), axis=matrix_axis)


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
    :func:`meshtune.executor.meshslice.meshslice`); returns C's shards."""
    r, c = a.shape[:2]
    big_l = math.lcm(r, c)
    if big_l % slices:
        raise ValueError(f"{slices} iterations do not divide lcm({r}, {c}) = {big_l}")
    u = big_l // slices
    per_c, per_r = big_l // c, big_l // r  # blocks a chip owns of a row / column operand
    swap = np.swapaxes

    def bcast(x: Array, ring: int, root: int) -> Array:
        return broadcast(mesh, x, ring, root, packets, transposed=transposed)

    def gather(x: Array, ring: int, p: int, matrix_axis: int) -> Array:
        per = per_c if ring == COL_RING else per_r
        return bcast(_part(x, per, p % per, matrix_axis), ring, p // per)

    groups = [range(i * u, (i + 1) * u) for i in range(slices)]
    if dataflow is Dataflow.OS:
        out = np.zeros((r, c, a.shape[2], b.shape[3]))
        for group in groups:
            a_all = np.concatenate([gather(a, COL_RING, p, 3) for p in group], axis=3)
            b_all = np.concatenate([gather(b, ROW_RING, p, 2) for p in group], axis=2)
            out += a_all @ b_all
        return out
    if dataflow is Dataflow.LS:
        out = np.zeros((r, c, a.shape[2], b.shape[2] * r // c))
        for group in groups:
            b_all = np.concatenate([gather(b, ROW_RING, p, 2) for p in group], axis=2)
            for p, piece in zip(group, np.split(a @ swap(b_all, 2, 3), u, axis=3), strict=True):
                root = p // per_c
                summed = reduce(mesh, piece, COL_RING, root, packets, transposed=transposed)
                width = piece.shape[3]
                out[:, root, :, (p % per_c) * width : (p % per_c + 1) * width] = summed[:, root]
        return out
    out = np.zeros((r, c, a.shape[3] * c // r, b.shape[3]))
    for group in groups:
        a_all = np.concatenate([gather(a, COL_RING, p, 3) for p in group], axis=3)
        for p, piece in zip(group, np.split(swap(a_all, 2, 3) @ b, u, axis=2), strict=True):
            root = p // per_r
            summed = reduce(mesh, piece, ROW_RING, root, packets, transposed=transposed)
            height = piece.shape[2]
            out[root, :, (p % per_r) * height : (p % per_r + 1) * height] = summed[root]
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
