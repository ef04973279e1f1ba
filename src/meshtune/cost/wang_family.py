"""Wang's pass floors on every mesh of a family at once.

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

from meshtune.cost.meshslice import move_columns, move_rings
from meshtune.cost.vector import EXACT_INTEGER, chunks, family_links
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray, IntArray


def wang_family_floors(
    meshes: Sequence[Mesh], profiles: Sequence[HardwareProfile]
) -> Callable[[Sequence[GemmOp]], FloatArray]:
    """:func:`~meshtune.cost.wang.wang_floors` of ``ops`` on each of ``meshes``
    (``profiles[i]`` the one ``meshes[i]`` is priced with) as a function of ``ops``: an array
    ``[i, j]`` = the floor of ``ops[j]`` on ``meshes[i]``
    (:data:`meshtune.cost.config.FamilyFloorBuilder`).

    A pass's two collectives (MeshSlice's S = 1 iteration) run on the two physical axes, so
    splitting axis ``a`` leaves the other one's collective plain: per mesh and split axis,
    ``max(plain, (p − 1)·sr)`` with ``sr`` the both-ways shift of the split collective's
    shard (a plain shift on a ring of two), the least over the split axes (those of a ring
    of more than one chip, else axis 0), and at least ``2·m·n·k / (P·F)``; a pass's links
    looked up once per distinct (transposition, dataflow), its (pass, mesh) entries priced a
    chunk at a time (:func:`~meshtune.cost.vector.chunks`). The returned function raises
    :class:`~meshtune.errors.ProfileError` when a profile lacks a link of a ring of more than
    one chip, ``ValueError`` for sizes float64 does not hold exactly (the scalar floors then
    decide, mesh by mesh)."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    rings = np.array([[mesh.rows for mesh in meshes], [mesh.cols for mesh in meshes]])
    sizes = rings.astype(np.float64)  # each axis's ring, as a float
    rows, cols = sizes
    chips = rows * cols
    rate = np.array([p.effective_flops_per_s for p in profiles]) * rows * cols
    e = np.array([p.bytes_per_element for p in profiles], dtype=np.float64)
    # a both-ways step sends its two halves one after the other on a half-duplex link
    both_ways_wire = np.array([1.0 if p.full_duplex else 2.0 for p in profiles])
    # split_axes: the axes of a ring of more than one chip, axis 0 when there is none
    allowed = (rings[0] > 1) | (rings[1] <= 1), rings[1] > 1
    family = family_links(rings, profiles)
    tables: dict[tuple[CollectiveKind, int], FloatArray] = {}
    """(kind, axis) → ``t_launch + (ring − 1)·t_sync``, t_launch + t_sync and bandwidth (rows)
    of every mesh (columns), from t_launch, t_sync and bandwidth 0, 0, 1 where its ring on
    ``axis`` has one chip (:func:`~meshtune.cost.vector.family_links`)."""

    def link(kind: CollectiveKind, axis: int) -> FloatArray:
        if (kind, axis) not in tables:
            launch, sync, bw, _ = family(kind, axis)
            steps = sizes[axis] - 1.0
            tables[kind, axis] = np.array([launch + steps * sync, launch + sync, bw])
        return tables[kind, axis]

    def layout(kinds: Sequence[tuple[bool, Dataflow]]) -> tuple[FloatArray, IntArray]:
        """Of the collective on axis 0 then of that on axis 1 of each of ``kinds``
        (transposition, dataflow): its fixed seconds and bandwidth (:func:`link`), shape
        (4, rows, meshes), and which of :func:`~meshtune.cost.meshslice.move_elements`' two
        counts it moves, shape (2, rows): a pass's two collectives run on the two axes."""
        links, counts = [], []
        for transposed, dataflow in kinds:
            pair = move_rings(dataflow, transposed, meshes[0])
            first_on_0 = pair[0][1] == 0
            on_0, on_1 = pair if first_on_0 else pair[::-1]
            links.append(np.concatenate([link(*on_0[:2])[::2], link(*on_1[:2])[::2]]))
            counts.append((0, 1) if first_on_0 else (1, 0))
        return np.stack(links, axis=1), np.array(counts, dtype=np.intp).T

    def floors(ops: Sequence[GemmOp]) -> FloatArray:
        if not ops:
            return np.empty((len(meshes), 0))
        distinct: dict[tuple[bool, Dataflow], int] = {}  # (transposition, dataflow) → index
        columns, which = move_columns(ops, distinct)
        largest = columns.max()
        if largest >= EXACT_INTEGER:
            raise ValueError(f"{largest:.0f} is past float64's exact integers")
        m, n, k, *counts, extent = columns
        links, moved = layout(list(distinct))
        elements = np.array(counts)[moved[:, which], np.arange(len(ops))]  # (axis, pass)
        flops = 2.0 * m * n * k
        shifts = [link(CollectiveKind.SEND_RECV, axis)[1:] for axis in (0, 1)]
        found: FloatArray = np.empty((len(ops), len(meshes)))
        for part in chunks(len(ops), len(meshes)):
            table = np.take(links, which[part], axis=1)
            fixed, bw = table[0::2], table[1::2]  # (axis, pass, mesh)
            # (axis, pass, mesh): the shard bytes and the time of the collective on each axis
            shards = elements[:, part, None] / chips * e
            seconds = fixed + (sizes - 1.0)[:, None, :] * shards / bw
            candidates = []
            for axis, ring, other in ((0, rows, cols), (1, cols, rows)):
                # the collective on the split axis is shifted, the one on the other axis plain
                shard = shards[axis]
                plain_s = np.where(other > 1, seconds[1 - axis], 0.0)
                # one shift (shift_both_ways): halves each way on a ring of more than two chips
                start, shift_bw = shifts[axis]
                parts = extent[part, None] / ring
                split = np.where(parts == np.floor(parts), np.ceil(parts / 2) / parts, 0.5)
                halves = start + shard * split * both_ways_wire / shift_bw
                sr = np.where(ring <= 2, start + shard / shift_bw, halves)
                candidates.append(np.maximum(plain_s, (ring - 1.0) * np.where(ring > 1, sr, 0.0)))
            least = np.where(
                allowed[0] & allowed[1],
                np.minimum(candidates[0], candidates[1]),
                np.where(allowed[0], candidates[0], candidates[1]),
            )
            found[part] = np.maximum(least, flops[part, None] / rate)
        found = found.T
        return found

    return floors
