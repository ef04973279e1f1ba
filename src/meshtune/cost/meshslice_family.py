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
    Raises :class:`~meshtune.errors.ProfileError` when a profile lacks a link of a ring of
    more than one chip (any dataflow's: the scalar floors then decide, op by op), and
    ``ValueError`` from the returned function for sizes float64 does not hold exactly."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    keys = [(transposed, dataflow) for transposed in (False, True) for dataflow in Dataflow]
    # (key, collective, mesh): launch, steps, sync, bandwidth; 0, 0, 0, 1 on a ring of one
    table = np.zeros((4, len(keys), 2, len(meshes)))
    table[3] = 1.0
    for m, (mesh, profile) in enumerate(zip(meshes, profiles, strict=True)):
        for k, (transposed, dataflow) in enumerate(keys):
            for c, (kind, axis, ring) in enumerate(move_rings(dataflow, transposed, mesh)):
                if ring > 1:
                    link = profile.link(kind, axis)
                    table[:, k, c, m] = (
                        link.t_launch_s,
                        ring - 1,
                        link.t_sync_s,
                        link.bw_bytes_per_s,
                    )
    launch, steps, sync, bw = table
    chips = np.array([mesh.rows * mesh.cols for mesh in meshes], dtype=np.float64)
    rate = (
        np.array([p.effective_flops_per_s for p in profiles])
        * np.array([mesh.rows for mesh in meshes], dtype=np.float64)
        * np.array([mesh.cols for mesh in meshes], dtype=np.float64)
    )
    e = np.array([p.bytes_per_element for p in profiles], dtype=np.float64)
    index = {key: k for k, key in enumerate(keys)}

    def floors(ops: Sequence[GemmOp]) -> FloatArray:
        out = np.empty((len(meshes), len(ops)))
        for j, op in enumerate(ops):
            k = index[op.transposed, op.dataflow]
            comm = np.zeros(len(meshes))
            for c, elements in enumerate(move_elements(op)):
                if elements >= _EXACT:
                    raise ValueError(f"{elements} elements are past float64's exact integers")
                once = launch[k, c] + steps[k, c] * (
                    sync[k, c] + float(elements) / chips * e / bw[k, c]
                )
                comm = np.maximum(comm, once)
            out[:, j] = np.maximum(comm, 2.0 * op.m * op.n * op.k / rate)
        return out

    return floors
