"""Megatron-LM tensor parallelism on a virtual ring of P chips (Shoeybi et al. 2019, §3;
Korthikanti et al. 2022, §4.2.2; the schedule of :mod:`meshtune.cost.megatron`).

Stacked arrays are ``(P, 1, h, w)``: ``x[p, 0]`` is chip p's local matrix. Three layouts occur:

* *token shards* (SP): chip p holds rows ``p·T/P …`` of a T-row activation
  (:func:`~meshtune.executor.mesh.shard` over P × 1);
* *column blocks*: chip p holds the p-th block of columns (W of a column-parallel layer, the Y
  it produces, the X a row-parallel layer receives);
* *replicas*: every chip holds the whole matrix (activations without SP).

The ring all-gather and reduce-scatter of :mod:`meshtune.executor.collectives` run along stacked
axis 0, i.e. over matrix rows: over tokens for activations. An all-reduce is a reduce-scatter
over tokens then an all-gather. Every collective moves real shards through
:meth:`~meshtune.executor.mesh.VirtualMesh.ring_step`, which counts them on physical axis 0.
The row-parallel weight gradient receives Y' whole on every chip without communication: its
backward-data pass gathered it (SP) or it was replicated already.
"""

from __future__ import annotations

import numpy as np

from meshtune.cost.config import Config
from meshtune.cost.megatron import check_op, row_parallel, sequence_parallel
from meshtune.dataflow import GemmOp, Pass
from meshtune.executor.collectives import all_gather, reduce_scatter
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard


def column_blocks(matrix: Array, ring: int) -> Array:
    """Chip p holds the p-th block of ``matrix``'s columns: ``(ring, 1, h, w / ring)``."""
    return np.swapaxes(shard(matrix, 1, ring), 0, 1)


def replicas(matrix: Array, ring: int) -> Array:
    """Every chip holds ``matrix``: ``(ring, 1, h, w)`` (a read-only broadcast view)."""
    return np.broadcast_to(matrix, (ring, 1, *matrix.shape))


def gathered(mesh: VirtualMesh, matrix: Array, sp: bool) -> Array:
    """An activation every chip needs whole: with SP all-gathered from its token shards, else
    already replicated."""
    if sp:
        return all_gather(mesh, shard(matrix, mesh.rows, 1), 0)
    return replicas(matrix, mesh.rows)


def reduced(mesh: VirtualMesh, partials: Array, sp: bool) -> Array:
    """The sum of every chip's ``partials``: reduce-scattered to token shards with SP, else
    all-reduced to replicas (reduce-scatter then all-gather over tokens)."""
    scattered = reduce_scatter(mesh, partials, 0)
    return scattered if sp else all_gather(mesh, scattered, 0)


def dense(stacked: Array, sp: bool) -> Array:
    """The matrix held as token shards (SP) or as replicas (chip 0's copy)."""
    return unshard(stacked) if sp else stacked[0, 0]


def from_columns(stacked: Array) -> Array:
    """The dense matrix whose :func:`column_blocks` is ``stacked``."""
    return unshard(np.swapaxes(stacked, 0, 1))


def execute(op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int) -> Array:
    """Run one Megatron pass on the virtual ring: dense A and B of the Y-stationary row in (the
    forward ``X·W``, backward-data ``Y'·Wᵀ``, backward-weight ``Xᵀ·Y'``), dense C out.

    ``config["parallel"]`` picks the layer's role (1: column, 2: row) and
    ``config["seq_shards"]`` sequence parallelism (P: on, 1: off); ``block`` is unused.
    """
    check_operands(op, a, b)
    check_op(op)
    if mesh.cols != 1 or mesh.depth != 1:
        raise ValueError(f"megatron runs on a ring (P x 1), got {mesh.rows}x{mesh.cols}")
    p, swap = mesh.rows, np.swapaxes
    sp = sequence_parallel(config, p)
    if row_parallel(config):  # W split over in (rows); X arrives in column blocks
        if op.pass_ is Pass.FORWARD:  # Y = X·W: partial sums of Y, then g (or ḡ)
            return dense(reduced(mesh, column_blocks(a, p) @ shard(b, p, 1), sp), sp)
        if op.pass_ is Pass.BACKWARD_DATA:  # X' = Y'·Wᵀ: Y' gathered, X' in column blocks
            return from_columns(gathered(mesh, a, sp) @ swap(shard(b, p, 1), 2, 3))
        # W' = Xᵀ·Y': Y' as the backward-data pass left it (whole), W' in row blocks
        return unshard(swap(column_blocks(a, p), 2, 3) @ replicas(b, p))
    # column-parallel: W split over out (columns); Y, Y' and W' in column blocks
    if op.pass_ is Pass.FORWARD:  # Y = X·W after f (or g: the sequence all-gather)
        return from_columns(gathered(mesh, a, sp) @ column_blocks(b, p))
    if op.pass_ is Pass.BACKWARD_DATA:  # X' = Y'·Wᵀ: partial sums of X', then the reduction
        partials = column_blocks(a, p) @ swap(column_blocks(b, p), 2, 3)
        return dense(reduced(mesh, partials, sp), sp)
    # W' = Xᵀ·Y': X gathered a second time (SP)
    return from_columns(swap(gathered(mesh, a, sp), 2, 3) @ column_blocks(b, p))
