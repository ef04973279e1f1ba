"""MeshSlice's pass floors on every mesh of a family at once (issue 17).

The cluster search asks :func:`~meshtune.cost.meshslice.meshslice_floors` of one layer on every
TP mesh of a size before it prices any of them. Those floors' rings and links depend on the
meshes and their profiles alone, so :func:`meshslice_family_floors` looks them up once and
returns a function that prices the passes of any layer on all the meshes in one NumPy
evaluation, with the same operations in the same order as the scalar floors: its answer
equals theirs to the bit (a registry-wide test checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from meshtune.cost.meshslice import move_elements, move_rings
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.mesh import Mesh
from meshtune.specs import HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray

_EXACT = 2**53
"""Integers below this convert to float64 exactly: the element counts divided by P are then
rounded once, as Python's ``int / int`` rounds them."""


def meshslice_family_floors(
    meshes: Sequence[Mesh], profiles: Sequence[HardwareProfile]
) -> Callable[[Sequence[GemmOp]], FloatArray]:
    """:func:`~meshtune.cost.meshslice.meshslice_floors` of ``ops`` on each of ``meshes``
    (``profiles[i]`` the one ``meshes[i]`` is priced with) as a function of ``ops``: an array
    ``[i, j]`` = the floor of ``ops[j]`` on ``meshes[i]``
    (:data:`meshtune.algorithm.FamilyFloorBuilder`).

    Per mesh, op and collective ``τ = t_launch + (ring − 1)·(t_sync + elements / P · e /
    bw)`` (0 on a ring of one chip), a pass's floor ``max(0, τ₁, τ₂, 2·m·n·k / (P·F))``.
    The returned function looks each (transposition, dataflow)'s links up on first use and
    raises :class:`~meshtune.errors.ProfileError` when a profile lacks one of a ring of more
    than one chip, ``ValueError`` for sizes float64 does not hold exactly (the scalar floors
    then decide, mesh by mesh)."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    chips = np.array([mesh.rows * mesh.cols for mesh in meshes], dtype=np.float64)
    rate = (
        np.array([p.effective_flops_per_s for p in profiles])
        * np.array([mesh.rows for mesh in meshes], dtype=np.float64)
        * np.array([mesh.cols for mesh in meshes], dtype=np.float64)
    )
    e = np.array([p.bytes_per_element for p in profiles], dtype=np.float64)
    tables: dict[tuple[bool, Dataflow], FloatArray] = {}

    def links(transposed: bool, dataflow: Dataflow) -> FloatArray:
        """(launch, steps, sync, bandwidth) × (first, second collective) × mesh; 0, 0, 0, 1
        on a ring of one chip (looked up on first use: a layer's passes use three)."""
        if (transposed, dataflow) not in tables:
            values = []
            for mesh, profile in zip(meshes, profiles, strict=True):
                for kind, axis, ring in move_rings(dataflow, transposed, mesh):
                    if ring > 1:
                        link = profile.link(kind, axis)
                        params = (link.t_launch_s, ring - 1, link.t_sync_s, link.bw_bytes_per_s)
                        values.append(params)
                    else:
                        values.append((0.0, 0, 0.0, 1.0))
            table = np.array(values, dtype=np.float64).reshape(len(meshes), 2, 4)
            tables[transposed, dataflow] = table.transpose(2, 1, 0)
        return tables[transposed, dataflow]

    def floors(ops: Sequence[GemmOp]) -> FloatArray:
        out = np.empty((len(meshes), len(ops)))
        for j, op in enumerate(ops):
            launch, steps, sync, bw = links(op.transposed, op.dataflow)
            comm = np.zeros(len(meshes))
            for c, elements in enumerate(move_elements(op)):
                if elements >= _EXACT:
                    raise ValueError(f"{elements} elements are past float64's exact integers")
                shard_bytes = float(elements) / chips * e
                once = launch[c] + steps[c] * (sync[c] + shard_bytes / bw[c])
                comm = np.maximum(comm, once)
            out[:, j] = np.maximum(comm, 2.0 * op.m * op.n * op.k / rate)
        return out

    return floors
