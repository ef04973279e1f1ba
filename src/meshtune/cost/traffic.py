"""Predicted ring traffic of one MeshSlice GeMM (MeshSlice §3.2.2, Figure 3, Figure 5).

The §3.2.2 model charges a collective on a ring of P chips ``P − 1`` steps, each moving one
shard over every link; a ring of one chip moves nothing. MeshSlice runs S loop iterations, each
with one collective per direction, on the logical r × c mesh (P = r·c elements per shard
denominator, ``e`` bytes per element):

* OS ``C = A·B``: AG_col of m·k/(P·S) elements on the column ring, AG_row of k·n/(P·S) on the
  row ring.
* LS ``C = A·Bᵀ``: AG_row of n·k/(P·S) on the row ring, RdS_col of m·n/(P·S) on the column
  ring.
* RS ``C = Aᵀ·B``: AG_col of k·m/(P·S) on the column ring, RdS_row of m·n/(P·S) on the row ring.

Per physical axis whose ring has P_a > 1 chips: launches = S, ring steps = S·(P_a − 1), bytes
per link = S·(P_a − 1)·shard_elements·e. The row ring is physical axis 0 and the column ring
axis 1, swapped for a transposed GeMM (:meth:`MeshAxes.logical`).
"""

from __future__ import annotations

from typing import NamedTuple

from meshtune.cost.meshslice import MeshAxes
from meshtune.dataflow import Dataflow, GemmOp


class AxisTraffic(NamedTuple):
    """What the rings of one physical axis carry during one GeMM."""

    launches: int
    steps: int
    bytes_per_link: int


def predicted_traffic(
    op: GemmOp, mesh: MeshAxes, bytes_per_element: int, slices: int
) -> tuple[AxisTraffic, AxisTraffic]:
    """(axis 0, axis 1) traffic of ``op`` with ``slices`` slices (see module docstring).

    Raises ``ValueError`` for ``slices < 1`` or a shard that is not a whole number of elements.
    """
    if slices < 1:
        raise ValueError(f"slices must be >= 1, got {slices}")
    (r, row_axis), (c, col_axis) = mesh.logical(op.transposed)
    m, n, k = op.m, op.n, op.k
    # (ring size, physical axis, elements of the whole matrix whose sub-shard moves)
    moves = {
        Dataflow.OS: ((c, col_axis, m * k), (r, row_axis, k * n)),
        Dataflow.LS: ((r, row_axis, n * k), (c, col_axis, m * n)),
        Dataflow.RS: ((c, col_axis, k * m), (r, row_axis, m * n)),
    }[op.dataflow]
    totals = [[0, 0, 0], [0, 0, 0]]
    for ring, axis, elements in moves:
        if ring == 1:
            continue
        if elements % (mesh.chips * slices):
            raise ValueError(
                f"{elements} elements do not split into {mesh.chips} × {slices} sub-shards"
            )
        shard_bytes = elements // (mesh.chips * slices) * bytes_per_element
        totals[axis][0] += slices
        totals[axis][1] += slices * (ring - 1)
        totals[axis][2] += slices * (ring - 1) * shard_bytes
    return AxisTraffic(*totals[0]), AxisTraffic(*totals[1])
