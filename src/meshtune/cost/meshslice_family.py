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

from meshtune.cost.meshslice import move_elements, move_rings, schedule_floors
from meshtune.cost.vector import EXACT_INTEGER, family_links
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.mesh import Mesh
from meshtune.specs import CollectiveKind, HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray


def meshslice_family_floors(
    meshes: Sequence[Mesh], profiles: Sequence[HardwareProfile]
) -> Callable[[Sequence[GemmOp]], FloatArray]:
    """:func:`~meshtune.cost.meshslice.meshslice_floors` of ``ops`` on each of ``meshes``
    (``profiles[i]`` the one ``meshes[i]`` is priced with) as a function of ``ops``: an array
    ``[i, j]`` = the floor of ``ops[j]`` on ``meshes[i]``
    (:data:`meshtune.algorithm.FamilyFloorBuilder`).

    Per mesh, op and collective, the fixed seconds ``t_launch + (ring − 1)·t_sync`` and the
    moving ones ``(ring − 1)·(elements / P · e) / bw`` of its S = 1 issue (0 on a ring of one
    chip) and whether the profile overlaps it, with the GeMM's ``2·m·n·k / (P·F)``, go
    through :func:`~meshtune.cost.meshslice.schedule_floors` for every (op, mesh) at once.
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
    stacked: dict[tuple[tuple[bool, Dataflow], ...], tuple[FloatArray, ...]] = {}
    """(transposition, dataflow) of each pass → fixed seconds, steps, bandwidth, hidden and
    blocking of their collectives, shape (first / second collective, passes, meshes) each
    (a layer's rows recur for every layer of that kind)."""

    rings = np.array([[mesh.rows for mesh in meshes], [mesh.cols for mesh in meshes]])
    kinds: dict[tuple[CollectiveKind, int], FloatArray] = {}
    """(kind, axis) → launch, steps, sync, bandwidth, hidden of that collective on each mesh."""

    def link(kind: CollectiveKind, axis: int) -> FloatArray:
        """(launch, steps, sync, bandwidth, hidden) × mesh of a ``kind`` collective on the
        rings of ``axis`` (:func:`~meshtune.cost.vector.family_links`; 0 steps on a ring of
        one chip), looked up on first use."""
        if (kind, axis) not in kinds:
            ring = rings[axis]
            launch, sync, bw, hidden = family_links(ring, profiles, kind, axis)
            steps = np.where(ring > 1, ring - 1, 0).astype(np.float64)
            kinds[kind, axis] = np.array([launch, steps, sync, bw, hidden])
        return kinds[kind, axis]

    def links(transposed: bool, dataflow: Dataflow) -> FloatArray:
        """(launch, steps, sync, bandwidth, hidden) × (first, second collective) × mesh of a
        pass (a layer's passes use three; two collectives of four (kind, axis) in all)."""
        if (transposed, dataflow) not in tables:
            rings_of = move_rings(dataflow, transposed, meshes[0])
            pair = [link(kind, axis) for kind, axis, _ in rings_of]
            tables[transposed, dataflow] = np.stack(pair, axis=1)
        return tables[transposed, dataflow]

    def parameters(ops: Sequence[GemmOp]) -> tuple[FloatArray, ...]:
        """Fixed seconds, steps, bandwidth, hidden, blocking of ``ops``' collectives (cached by
        rows)."""
        rows = tuple((op.transposed, op.dataflow) for op in ops)
        if rows not in stacked:
            distinct = {row: i for i, row in enumerate(dict.fromkeys(rows))}  # row → its index
            table = np.stack([links(*row) for row in distinct], axis=2)
            launch, steps, sync, bw, hidden = table[:, :, [distinct[row] for row in rows]]
            stacked[rows] = (launch + steps * sync, steps, bw, hidden, 1.0 - hidden)
        return stacked[rows]

    def floors(ops: Sequence[GemmOp]) -> FloatArray:
        if not ops:
            return np.empty((len(meshes), 0))
        fixed, steps, bw, hidden, blocking = parameters(ops)
        counts = [move_elements(op) for op in ops]
        if any(elements >= EXACT_INTEGER for pair in counts for elements in pair):
            raise ValueError(f"{max(map(max, counts))} elements are past float64's exact integers")
        # (first / second collective, pass, mesh), as the scalar floors' int / int rounds it.
        shard_bytes = np.array(counts, dtype=np.float64).T[:, :, None] / chips * e
        moving = steps * shard_bytes / bw
        first = (fixed[0], moving[0], hidden[0], blocking[0])
        table = (*first, fixed[1], moving[1], hidden[1], blocking[1])
        compute = np.array([2.0 * op.m * op.n * op.k for op in ops])[:, None] / rate
        output = np.array([op.dataflow is Dataflow.OS for op in ops])[:, None]
        found: FloatArray = schedule_floors(table, compute, output).T
        return found

    return floors
