"""The MeshSlice 2D GeMM on a virtual mesh (MeshSlice §3.1, Figure 5, Algorithms 1–2).

Every chip (i, j) of the logical r × c mesh runs, for s = 0 … S − 1 (Figure 5):

* OS ``C = A·B``: ``A' = AG_col(slice_col(A_ij))``, ``B' = AG_row(slice_row(B_ij))``,
  ``C_ij += A'·B'``.
* LS ``C = A·Bᵀ``: ``B' = AG_row(slice_row(B_ij))``, ``C' = A_ij·B'ᵀ``,
  ``slice_col(C_ij) = RdS_col(C')``.
* RS ``C = Aᵀ·B``: ``A' = AG_col(slice_col(A_ij))``, ``C' = A'ᵀ·B_ij``,
  ``slice_row(C_ij) = RdS_row(C')``.

Slicing is Algorithm 2's blocked form: ``slice_col(X, S, s)`` keeps the s-th of every S groups of
B contiguous columns (a reshape to ``(R, C/(S·B), S, B)`` and an index), ``slice_row`` the same
on rows. Sub-shard s of every chip then holds exactly the global indices whose block number is
s mod S, in ascending order, so the gathered A' and B' line up (§3.1.2) provided the sliced
extent is a multiple of ``S · B · lcm(r, c)``. S = 1 is the Collective 2D GeMM (Figure 2b).

A *transposed* GeMM runs on the transposed mesh: logical chip (i, j) is physical chip (j, i),
the logical row ring is physical axis 1 and the logical column ring physical axis 0. Sharding a
stored matrix T over the physical mesh and transposing every local shard gives exactly the
shards of Tᵀ over the logical mesh, so the canonical operands are sharded on the logical mesh.
"""

from __future__ import annotations

import numpy as np

from meshtune.cost.config import Config
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.collectives import all_gather, reduce_scatter
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard

ROW_RING = 0  # stacked axis of the ring of a logical mesh column (AG_row, RdS_row)
COL_RING = 1  # stacked axis of the ring of a logical mesh row (AG_col, RdS_col)


def _col_groups(x: Array, slices: int, block: int) -> Array:
    """View of ``x (..., R, C)`` as ``(..., R, C/(S·B), S, B)`` (Algorithm 2's reshape)."""
    *lead, rows, cols = x.shape
    if cols % (slices * block):
        raise ValueError(f"{cols} columns do not split into {slices} slices of {block}-blocks")
    return x.reshape(*lead, rows, cols // (slices * block), slices, block)


def _row_groups(x: Array, slices: int, block: int) -> Array:
    """View of ``x (..., R, C)`` as ``(..., R/(S·B), S, B, C)`` (Algorithm 2 on rows)."""
    *lead, rows, cols = x.shape
    if rows % (slices * block):
        raise ValueError(f"{rows} rows do not split into {slices} slices of {block}-blocks")
    return x.reshape(*lead, rows // (slices * block), slices, block, cols)


def slice_col(x: Array, slices: int, s: int, block: int) -> Array:
    """Algorithm 2: the s-th column sub-shard of ``x (..., R, C)``, shape ``(..., R, C/S)``."""
    *lead, rows, cols = x.shape
    return _col_groups(x, slices, block)[..., s, :].reshape(*lead, rows, cols // slices)


def slice_row(x: Array, slices: int, s: int, block: int) -> Array:
    """Algorithm 2 on rows: the s-th row sub-shard of ``x (..., R, C)``, ``(..., R/S, C)``."""
    *lead, rows, cols = x.shape
    return _row_groups(x, slices, block)[..., s, :, :].reshape(*lead, rows // slices, cols)


def meshslice(
    mesh: VirtualMesh,
    dataflow: Dataflow,
    a: Array,
    b: Array,
    *,
    slices: int,
    block: int,
    transposed: bool = False,
) -> Array:
    """Figure 5 on stacked shards ``a`` and ``b`` of the logical mesh; returns C's shards.

    Shapes (r × c logical mesh): OS ``a (r, c, m/r, k/c)``, ``b (r, c, k/r, n/c)``; LS
    ``a (r, c, m/r, k/c)``, ``b (r, c, n/r, k/c)``; RS ``a (r, c, k/r, m/c)``,
    ``b (r, c, k/r, n/c)``. The result is ``(r, c, m/r, n/c)``. Collectives are charged to
    ``mesh``'s counters.
    """
    r, c = a.shape[:2]
    if slices == 1:
        block = 1  # nothing is sliced: Collective needs no block alignment
    if dataflow is Dataflow.OS:
        out = np.zeros((r, c, a.shape[2], b.shape[3]))
        for s in range(slices):
            a_all = all_gather(
                mesh, slice_col(a, slices, s, block), COL_RING, transposed=transposed
            )
            b_all = all_gather(
                mesh, slice_row(b, slices, s, block), ROW_RING, transposed=transposed
            )
            out += a_all @ b_all
        return out
    if dataflow is Dataflow.LS:
        n = b.shape[2] * r
        out = np.zeros((r, c, a.shape[2], n // c))
        groups = _col_groups(out, slices, block)
        for s in range(slices):
            b_all = all_gather(
                mesh, slice_row(b, slices, s, block), ROW_RING, transposed=transposed
            )
            partial = a @ np.swapaxes(b_all, 2, 3)
            part = reduce_scatter(mesh, partial, COL_RING, transposed=transposed)
            target = groups[..., s, :]
            target[...] = part.reshape(target.shape)
        return out
    m = a.shape[3] * c
    out = np.zeros((r, c, m // r, b.shape[3]))
    groups = _row_groups(out, slices, block)
    for s in range(slices):
        a_all = all_gather(mesh, slice_col(a, slices, s, block), COL_RING, transposed=transposed)
        partial = np.swapaxes(a_all, 2, 3) @ b
        part = reduce_scatter(mesh, partial, ROW_RING, transposed=transposed)
        target = groups[..., s, :, :]
        target[...] = part.reshape(target.shape)
    return out


def execute(op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int) -> Array:
    """Shard dense ``a`` and ``b`` per ``op`` on ``mesh``, run MeshSlice, gather dense C.

    The logical mesh is ``mesh`` (P_r × P_c) or, for a transposed ``op``, P_c × P_r; the slice
    count is ``config["slices"]`` (1: the Collective 2D GeMM). Raises ``ValueError`` when a
    shape does not match ``op`` or does not divide over the mesh.
    """
    check_operands(op, a, b)
    r, c = (mesh.cols, mesh.rows) if op.transposed else (mesh.rows, mesh.cols)
    out = meshslice(
        mesh,
        op.dataflow,
        shard(a, r, c),
        shard(b, r, c),
        slices=config["slices"],
        block=block,
        transposed=op.transposed,
    )
    return unshard(out)
