"""MeshSlice's pass floors on every mesh of a family at once.

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

from meshtune.cost.meshslice import move_columns, move_rings, schedule_floors
from meshtune.cost.vector import EXACT_INTEGER, chunks, family_links
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray


def meshslice_family_floors(
    meshes: Sequence[Mesh], profiles: Sequence[HardwareProfile]
) -> Callable[[Sequence[GemmOp]], FloatArray]:
    """:func:`~meshtune.cost.meshslice.meshslice_floors` of ``ops`` on each of ``meshes``
    (``profiles[i]`` the one ``meshes[i]`` is priced with) as a function of ``ops``: an array
    ``[i, j]`` = the floor of ``ops[j]`` on ``meshes[i]``
    (:data:`meshtune.cost.config.FamilyFloorBuilder`).

    Per mesh, op and collective, the fixed seconds ``t_launch + (ring − 1)·t_sync`` and the
    moving ones ``(ring − 1)·(elements / P · e) / bw`` of its S = 1 issue (0 on a ring of one
    chip) and whether the profile overlaps it, with the GeMM's ``2·m·n·k / (P·F)``, go
    through :func:`~meshtune.cost.meshslice.schedule_floors` for every (op, mesh), a chunk of
    them at a time (:func:`~meshtune.cost.vector.chunks`). The links depend on an op's
    (transposition, dataflow) alone: they are looked up once per distinct one and spread to
    its ops by one gather. The returned function looks each
    (kind, axis)'s links up on first use and raises :class:`~meshtune.errors.ProfileError`
    when a profile lacks one of a ring of more than one chip, ``ValueError`` for sizes
    float64 does not hold exactly (the scalar floors then decide, mesh by mesh)."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    chips = np.array([mesh.rows * mesh.cols for mesh in meshes], dtype=np.float64)
    rate = (
        np.array([p.effective_flops_per_s for p in profiles])
        * np.array([mesh.rows for mesh in meshes], dtype=np.float64)
        * np.array([mesh.cols for mesh in meshes], dtype=np.float64)
    )
    e = np.array([p.bytes_per_element for p in profiles], dtype=np.float64)
    rings = np.array([[mesh.rows for mesh in meshes], [mesh.cols for mesh in meshes]])
    family = family_links(rings, profiles)
    kinds: dict[tuple[CollectiveKind, int], FloatArray] = {}
    """(kind, axis) → fixed seconds, steps, bandwidth, hidden and blocking of that collective
    on each mesh."""

    def link(kind: CollectiveKind, axis: int) -> FloatArray:
        """(fixed seconds ``t_launch + steps·t_sync``, steps, bandwidth, hidden, blocking) × mesh
        of a ``kind`` collective on the rings of ``axis``
        (:func:`~meshtune.cost.vector.family_links`; 0 steps on a ring of one chip), looked
        up on first use."""
        if (kind, axis) not in kinds:
            ring = rings[axis]
            launch, sync, bw, hidden = family(kind, axis)
            steps = np.where(ring > 1, ring - 1, 0).astype(np.float64)
            kinds[kind, axis] = np.array([launch + steps * sync, steps, bw, hidden, 1.0 - hidden])
        return kinds[kind, axis]

    def parameters(rows: Sequence[tuple[bool, Dataflow]]) -> FloatArray:
        """The :func:`link` rows of the first then of the second collective of each of
        ``rows`` (transposition, dataflow), shape (10, rows, meshes)."""
        pairs = []
        for transposed, dataflow in rows:
            (kind1, axis1, _), (kind2, axis2, _) = move_rings(dataflow, transposed, meshes[0])
            pairs.append(np.concatenate([link(kind1, axis1), link(kind2, axis2)]))
        table: FloatArray = np.stack(pairs, axis=1)
        return table

    def floors(ops: Sequence[GemmOp]) -> FloatArray:
        if not ops:
            return np.empty((len(meshes), 0))
        distinct: dict[tuple[bool, Dataflow], int] = {}  # (transposition, dataflow) → index
        (m, n, k, *counts, _), which = move_columns(ops, distinct)
        largest = max(counts[0].max(), counts[1].max())
        if largest >= EXACT_INTEGER:
            raise ValueError(f"{largest:.0f} elements are past float64's exact integers")
        links = parameters(list(distinct))
        moved = np.array(counts)
        flops = 2.0 * m * n * k
        os = np.array([dataflow is Dataflow.OS for _, dataflow in distinct])
        found: FloatArray = np.empty((len(ops), len(meshes)))
        for part in chunks(len(ops), len(meshes)):
            rows = which[part]
            # (first / second collective, pass, mesh), as the scalar floors' int / int rounds it.
            shard_bytes = moved[:, part, None] / chips * e
            table = np.take(links, rows, axis=1)  # (parameter, pass, mesh)
            moving = table[1::5] * shard_bytes / table[2::5]
            fixed, hidden, blocking = table[0::5], table[3::5], table[4::5]
            first = (fixed[0], moving[0], hidden[0], blocking[0])
            compute = flops[part, None] / rate
            columns = (*first, fixed[1], moving[1], hidden[1], blocking[1])
            found[part] = schedule_floors(columns, compute, os[rows][:, None])
        found = found.T
        return found

    return floors
