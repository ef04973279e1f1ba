"""Wang's pass floors on every mesh of a family at once (issue 17).

The cluster search asks :func:`~meshtune.cost.wang.wang_floors` of one layer on every TP mesh
of a size before it prices any of them (:meth:`meshtune.search.costing.Costing.floors`). A
large chip count has hundreds of meshes per size and thousands of sizes, so asking mesh by mesh
made the floors most of a Wang search (Llama 3.1 405B at 55,440 chips: 96,000 calls, about
half of the ``plan`` command's CPU). :func:`wang_family_floors` looks the meshes' links up
once and prices the passes of any layer on all of them in one NumPy evaluation, with the same
operations in the same order as the scalar floors: its answer equals theirs to the bit (a
registry-wide test checks it, ``tests/test_vector_pricing.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from meshtune.cost.meshslice import move_elements, move_rings
from meshtune.cost.vector import EXACT_INTEGER, family_links
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.mesh import Mesh
from meshtune.specs import CollectiveKind, HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray


def wang_family_floors(
    meshes: Sequence[Mesh], profiles: Sequence[HardwareProfile]
) -> Callable[[Sequence[GemmOp]], FloatArray]:
    """:func:`~meshtune.cost.wang.wang_floors` of ``ops`` on each of ``meshes``
    (``profiles[i]`` the one ``meshes[i]`` is priced with) as a function of ``ops``: an array
    ``[i, j]`` = the floor of ``ops[j]`` on ``meshes[i]``
    (:data:`meshtune.algorithm.FamilyFloorBuilder`).

    A pass's two collectives (MeshSlice's S = 1 iteration) run on the two physical axes, so
    splitting axis ``a`` leaves the other one's collective plain: per mesh and split axis,
    ``max(plain, (p − 1)·sr)`` with ``sr`` the both-ways shift of the split collective's
    shard (a plain shift on a ring of two), the least over the split axes (those of a ring
    of more than one chip, else axis 0), and at least ``2·m·n·k / (P·F)``. The returned
    function raises :class:`~meshtune.errors.ProfileError` when a profile lacks a link of a
    ring of more than one chip, ``ValueError`` for sizes float64 does not hold exactly (the
    scalar floors then decide, mesh by mesh)."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    rings = np.array([[mesh.rows for mesh in meshes], [mesh.cols for mesh in meshes]])
    rows, cols = rings.astype(np.float64)
    chips = rows * cols
    rate = np.array([p.effective_flops_per_s for p in profiles]) * rows * cols
    e = np.array([p.bytes_per_element for p in profiles], dtype=np.float64)
    # a both-ways step sends its two halves one after the other on a half-duplex link
    both_ways_wire = np.array([1.0 if p.full_duplex else 2.0 for p in profiles])
    # split_axes: the axes of a ring of more than one chip, axis 0 when there is none
    allowed = (rings[0] > 1) | (rings[1] <= 1), rings[1] > 1
    tables: dict[tuple[CollectiveKind, int], FloatArray] = {}
    """(kind, axis) → t_launch, t_sync and bandwidth (rows) of every mesh (columns); 0, 0, 1
    where its ring on ``axis`` has one chip (:func:`~meshtune.cost.vector.family_links`)."""

    def link(kind: CollectiveKind, axis: int) -> FloatArray:
        if (kind, axis) not in tables:
            tables[kind, axis] = family_links(rings[axis], profiles, kind, axis)[:3]
        return tables[kind, axis]

    def seconds(links: FloatArray, steps: FloatArray | float, wire: FloatArray) -> FloatArray:
        """``Comm.time(profile).total_s`` on ``links`` (t_launch, t_sync, bandwidth): launch +
        steps · sync + steps · wire / bw."""
        launch, sync, bw = links
        found: FloatArray = launch + steps * sync + steps * wire / bw
        return found

    layouts: dict[tuple[tuple[bool, Dataflow], ...], tuple[FloatArray, ...]] = {}
    """(transposition, dataflow) of each pass → the t_launch / t_sync / bandwidth of their
    first and of their second collective, shape (3, pass, mesh) each, and whether the first
    runs on axis 0, shape (pass, 1) (a layer's rows recur for every layer of that kind)."""

    def layout(ops: Sequence[GemmOp]) -> tuple[FloatArray, ...]:
        rows = tuple((op.transposed, op.dataflow) for op in ops)
        if rows not in layouts:
            moves = [move_rings(dataflow, transposed, meshes[0]) for transposed, dataflow in rows]
            first, second = (
                np.stack([link(*pair[i][:2]) for pair in moves], axis=1) for i in (0, 1)
            )
            on_axis_0 = np.array([pair[0][1] == 0 for pair in moves])[:, None]
            layouts[rows] = first, second, on_axis_0
        return layouts[rows]

    def floors(ops: Sequence[GemmOp]) -> FloatArray:
        if not ops:
            return np.empty((len(meshes), 0))
        counts = [move_elements(op) for op in ops]
        largest = max(
            max(*pair, op.m, op.n, op.k, op.sliced_extent)
            for op, pair in zip(ops, counts, strict=True)
        )
        if largest >= EXACT_INTEGER:
            raise ValueError(f"{largest} is past float64's exact integers")
        first_links, second_links, on_axis_0 = layout(ops)
        # (collective, pass, mesh): shard bytes; (pass, mesh): each collective's ring and time
        shards = np.array(counts, dtype=np.float64).T[:, :, None] / chips * e
        first_ring = np.where(on_axis_0, rows, cols)
        second_ring = np.where(on_axis_0, cols, rows)
        first_s = seconds(first_links, first_ring - 1.0, shards[0])
        second_s = seconds(second_links, second_ring - 1.0, shards[1])
        extent = np.array([op.sliced_extent for op in ops], dtype=np.float64)[:, None]
        candidates = []
        for axis, ring, other in ((0, rows, cols), (1, cols, rows)):
            # the collective on the split axis is shifted, the one on the other axis is plain
            split_first = on_axis_0 if axis == 0 else np.logical_not(on_axis_0)
            shard = np.where(split_first, shards[0], shards[1])
            plain_s = np.where(other > 1, np.where(split_first, second_s, first_s), 0.0)
            # one shift (shift_both_ways): halves each way on a ring of more than two chips
            shifts = link(CollectiveKind.SEND_RECV, axis)[:, None, :]
            parts = extent / ring
            part = np.where(parts == np.floor(parts), np.ceil(parts / 2) / parts, 0.5)
            halves = seconds(shifts, 1.0, shard * part * both_ways_wire)
            sr = np.where(ring <= 2, seconds(shifts, 1.0, shard * 1.0), halves)
            candidates.append(np.maximum(plain_s, (ring - 1.0) * np.where(ring > 1, sr, 0.0)))
        least = np.where(
            allowed[0] & allowed[1],
            np.minimum(candidates[0], candidates[1]),
            np.where(allowed[0], candidates[0], candidates[1]),
        )
        compute = np.array([2.0 * op.m * op.n * op.k for op in ops])[:, None] / rate
        found: FloatArray = np.maximum(least, compute).T
        return found

    return floors
