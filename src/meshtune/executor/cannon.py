"""Cannon's 2D GeMM on a square virtual mesh (MeshSlice §2.3.2; Cannon 1969 [4]).

The schedules of :mod:`meshtune.cost.cannon`, run with real shifts on the P × P logical mesh:
the moving shards are skewed (:func:`meshtune.executor.collectives.skew`), then P steps each
multiply the shards held and shift them one hop (the running sums of C for LS/RS, which are
unskewed at the end). Every shift is one send-recv launch.
"""

from __future__ import annotations

import numpy as np

from meshtune.cost.config import Config
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.collectives import shift, skew
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard
from meshtune.executor.meshslice import COL_RING, ROW_RING


def cannon(
    mesh: VirtualMesh, dataflow: Dataflow, a: Array, b: Array, *, transposed: bool = False
) -> Array:
    """Cannon on stacked shards of the logical P × P mesh (shapes as in
    :func:`meshtune.executor.meshslice.meshslice`); returns C's shards."""
    p = a.shape[0]
    if a.shape[1] != p:
        raise ValueError(f"cannon needs a square mesh, got {a.shape[0]}x{a.shape[1]}")
    ring = np.arange(p)
    inward = (p - ring) % p  # skew: ring ρ moves by P − ρ hops
    outward = (ring + 1) % p  # unskew of the running sums: ring ρ moves by ρ + 1 hops
    swap = np.swapaxes
    if dataflow is Dataflow.OS:
        a = skew(mesh, a, COL_RING, inward, transposed=transposed)
        b = skew(mesh, b, ROW_RING, inward, transposed=transposed)
        out = np.zeros((p, p, a.shape[2], b.shape[3]))
        for t in range(p):
            out += a @ b
            if t < p - 1:
                a = shift(mesh, a, COL_RING, transposed=transposed)
                b = shift(mesh, b, ROW_RING, transposed=transposed)
        return out
    if dataflow is Dataflow.LS:
        b = skew(mesh, b, ROW_RING, inward, transposed=transposed)
        running = a @ swap(b, 2, 3)
        for _ in range(p - 1):
            b = shift(mesh, b, ROW_RING, transposed=transposed)
            running = shift(mesh, running, COL_RING, transposed=transposed) + a @ swap(b, 2, 3)
        return skew(mesh, running, COL_RING, outward, transposed=transposed)
    a = skew(mesh, a, COL_RING, inward, transposed=transposed)
    running = swap(a, 2, 3) @ b
    for _ in range(p - 1):
        a = shift(mesh, a, COL_RING, transposed=transposed)
        running = shift(mesh, running, ROW_RING, transposed=transposed) + swap(a, 2, 3) @ b
    return skew(mesh, running, ROW_RING, outward, transposed=transposed)


def execute(op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int) -> Array:
    """Shard dense ``a`` and ``b`` per ``op`` on the square ``mesh``, run Cannon, gather C."""
    check_operands(op, a, b)
    if mesh.rows != mesh.cols:
        raise ValueError(f"cannon needs a square mesh, got {mesh.rows}x{mesh.cols}")
    out = cannon(
        mesh,
        op.dataflow,
        shard(a, mesh.rows, mesh.cols),
        shard(b, mesh.rows, mesh.cols),
        transposed=op.transposed,
    )
    return unshard(out)
