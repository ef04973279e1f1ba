"""Uneven sizes padded as GSPMD pads them (Xu et al., 2021, §3.5).

A layer dimension that does not divide over the mesh axes it is sharded on is rounded up to the
next multiple, and if the algorithm still has no legal configuration, the sliced dimension is
rounded up to a multiple of Algorithm 2's slicing unit ``B · lcm(P_r, P_c)`` (MeshSlice
§3.1.2). The padded sizes are what is costed and what the plan records; the padding waste is
``1 − exact / padded`` FC FLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from meshtune.algorithms.base import Algorithm
from meshtune.cost.config import Candidates
from meshtune.cost.meshslice import sharding_units
from meshtune.dataflow import BlockDataflow, Dim, LayerDataflow
from meshtune.dataflow import layer_dataflow as build_layer_dataflow
from meshtune.hardware.mesh import Mesh
from meshtune.model.layers import FcLayer


def padded_layer(
    choice: LayerDataflow, mesh: Mesh, algorithm: Algorithm, slice_block: int
) -> tuple[LayerDataflow, Candidates]:
    """``choice`` with its sizes rounded up as in the module docstring, with the algorithm's
    legal configurations there (or the reason even padded sizes have none). Sizes that divide
    are left as they are."""
    fc = choice.layer
    units = sharding_units(choice, mesh)
    sizes: dict[Dim, int] = {"tokens": fc.tokens, "in": fc.in_features, "out": fc.out_features}

    def rebuilt(unit: dict[Dim, int]) -> LayerDataflow:
        size = {d: -(-sizes[d] // unit[d]) * unit[d] for d in sizes}
        if size == sizes:
            return choice
        layer = FcLayer(fc.name, size["tokens"], size["in"], size["out"], fc.fed_by, fc.groups)
        return build_layer_dataflow(layer, choice.stationary, choice.transposed)

    padded = rebuilt(dict(units))
    found = algorithm.configs(padded, mesh, slice_block)
    if found[1] is None:
        return padded, found
    sliced = choice.sliced_dim
    units[sliced] = math.lcm(units[sliced], slice_block * math.lcm(mesh.rows, mesh.cols))
    padded = rebuilt(dict(units))
    return padded, algorithm.configs(padded, mesh, slice_block)


def padded_block(
    block: BlockDataflow, mesh: Mesh, algorithm: Algorithm, slice_block: int
) -> tuple[BlockDataflow, str | None]:
    """Every layer of ``block`` padded on ``mesh`` (:func:`padded_layer`); the first reason a
    layer cannot run even padded, or ``None``."""
    layers = []
    for choice in block.layers:
        padded, (_, reason) = padded_layer(choice, mesh, algorithm, slice_block)
        if reason is not None:
            return block, f"{mesh.label}: {reason}"
        layers.append(padded)
    return BlockDataflow(tuple(layers), block.transposes), None


def padding_waste(exact: Sequence[FcLayer], padded: Sequence[FcLayer]) -> float:
    """1 − exact FLOPs / padded FLOPs of one block (0 when nothing is padded)."""
    want = sum(layer.flops_per_pass for layer in exact)
    got = sum(layer.flops_per_pass for layer in padded)
    return 1.0 - want / got
