"""Tesseract 2.5D on a virtual [q, q, d] mesh (Wang et al., ICPP 2022, §3.1, Algorithm 3).

Layout (Figure 4): the rows of the token-split operands (A and C for OS and LS, A and B for RS)
are cut into d bands, band l on depth layer l and sharded q × q there; the other operand of OS
and LS (the weight) is sharded q × q and every layer holds the same copy (replicated over
depth: the layout Tesseract keeps, nothing moves to set it up). Each layer runs SUMMA on its
own :meth:`~meshtune.executor.mesh.VirtualMesh.depth_layers` mesh
(:func:`meshtune.executor.summa.summa`); the layers' counters are merged as parallel rings.
For RS the layers' partial C shards are all-reduced over depth, as a ring reduce-scatter then
all-gather along :meth:`~meshtune.executor.mesh.VirtualMesh.depth_rings` (counted on axis 2).
"""

from __future__ import annotations

import numpy as np

from meshtune.cost.config import Config
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.collectives import all_gather, reduce_scatter
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard
from meshtune.executor.summa import summa


def execute(op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int) -> Array:
    """Run ``op`` with Tesseract on ``mesh`` (a [q, q, d] virtual mesh); dense C out.

    ``config`` gives SUMMA's packets D and slices S inside each layer; ``block`` is unused.
    """
    check_operands(op, a, b)
    q, d = mesh.rows, mesh.depth
    if mesh.cols != q:
        raise ValueError(f"Tesseract needs square layers, got {mesh.rows}x{mesh.cols}")
    rs = op.dataflow is Dataflow.RS
    a_bands = np.split(a, d, axis=0)
    b_bands = np.split(b, d, axis=0) if rs else [b] * d
    layers = mesh.depth_layers()
    results = [
        summa(
            layer,
            op.dataflow,
            shard(a_band, q, q),
            shard(b_band, q, q),
            packets=config["packets"],
            slices=config["slices"],
            transposed=op.transposed,
        )
        for layer, a_band, b_band in zip(layers, a_bands, b_bands, strict=True)
    ]
    mesh.merge_layers(layers)
    if not rs:
        return np.concatenate([unshard(c) for c in results], axis=0)
    partial = np.stack(results)  # (d, q, q, m/q, n/q): each layer's partial C
    rings = mesh.depth_rings()
    flat = partial.reshape(d, q * q, *partial.shape[3:])
    summed = all_gather(rings, reduce_scatter(rings, flat, 0), 0)
    return unshard(summed[0].reshape(partial.shape[1:]))
