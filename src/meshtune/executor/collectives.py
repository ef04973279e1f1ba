"""Ring all-gather and reduce-scatter, step by step (MeshSlice §2.3.4, Figure 3 right).

Both run on every ring of one mesh axis at once. On a ring of P chips they take P − 1
synchronised steps; in each step every chip sends one shard to its ring neighbour through
:meth:`~meshtune.executor.mesh.VirtualMesh.ring_step`, which is what the counters see. A ring of
one chip returns its input and counts nothing.

``stacked_axis`` 0 is the ring of a (logical) mesh column: an AG_row concatenates, and an
RdS_row scatters, along matrix rows. ``stacked_axis`` 1 is the ring of a mesh row (AG_col,
RdS_col): along matrix columns. ``transposed`` says whether the stacked array is indexed on the
transposed mesh, which decides the physical axis that is charged.
"""

from __future__ import annotations

import numpy as np

from meshtune.executor.mesh import Array, VirtualMesh


def _slots(x: Array, stacked_axis: int, ring: int) -> Array:
    """View of ``x`` with the matrix axis of ``stacked_axis`` split into ``ring`` slots.

    Stacked axis 0 (a mesh column's ring) works on matrix rows, stacked axis 1 on matrix
    columns: ``(r, c, ring·h, w) -> (r, c, ring, h, w)`` or ``(r, c, h, ring·w) ->
    (r, c, h, ring, w)``.
    """
    r, c, h, w = x.shape
    if stacked_axis == 0:
        return x.reshape(r, c, ring, h // ring, w)
    return x.reshape(r, c, h, ring, w // ring)


def _diagonals(slots: Array, stacked_axis: int, shift: int) -> list[tuple[slice, Array]]:
    """Views of slot ``(p − shift) mod P`` of every ring position p, without fancy indexing.

    Returns ``(positions, view)`` pairs covering p = shift … P − 1 and p = 0 … shift − 1: each
    view is stacked like a chip array restricted to those positions (a strided diagonal of the
    (position, slot) plane), so reads and writes are plain strided copies.
    """
    ring_axis, slot_axis = (0, 2) if stacked_axis == 0 else (1, 3)
    ring = slots.shape[ring_axis]
    out = []
    for first_p, first_slot, length in ((shift, 0, ring - shift), (0, ring - shift, shift)):
        if length == 0:
            continue
        index: list[slice] = [slice(None)] * slots.ndim
        index[ring_axis] = slice(first_p, None)
        index[slot_axis] = slice(first_slot, None)
        corner = slots[tuple(index)]
        shape = list(slots.shape)
        strides = list(slots.strides)
        shape[ring_axis] = length
        strides[ring_axis] += strides[slot_axis]
        del shape[slot_axis], strides[slot_axis]
        view = np.lib.stride_tricks.as_strided(corner, shape, strides, writeable=True)
        out.append((slice(first_p, first_p + length), view))
    return out


def _pick(slots: Array, stacked_axis: int, shift: int) -> Array:
    """For every ring position p, slot ``(p − shift) mod P`` of chip p's buffer, stacked."""
    r, c = slots.shape[:2]
    picked = np.empty(
        (r, c, *(slots.shape[3:] if stacked_axis == 0 else (slots.shape[2], slots.shape[4]))),
        slots.dtype,
    )
    for positions, view in _diagonals(slots, stacked_axis, shift):
        index = (positions,) if stacked_axis == 0 else (slice(None), positions)
        picked[index] = view
    return picked


def _place(slots: Array, stacked_axis: int, shift: int, value: Array) -> None:
    """Write ``value[p]`` (stacked) into slot ``(p − shift) mod P`` of chip p's buffer."""
    for positions, view in _diagonals(slots, stacked_axis, shift):
        index = (positions,) if stacked_axis == 0 else (slice(None), positions)
        view[...] = value[index]


def _ring(mesh: VirtualMesh, x: Array, stacked_axis: int, transposed: bool) -> tuple[int, int]:
    """(ring size, physical axis) of a collective, checked against the mesh."""
    physical = mesh.physical_axis(stacked_axis, transposed)
    ring = x.shape[stacked_axis]
    if x.ndim != 4 or ring != mesh.ring_size(physical):
        raise ValueError(
            f"a stacked array of shape {x.shape} does not fit a ring of physical axis "
            f"{physical} ({mesh.ring_size(physical)} chips)"
        )
    return ring, physical


def all_gather(
    mesh: VirtualMesh, x: Array, stacked_axis: int, *, transposed: bool = False
) -> Array:
    """AG along ``stacked_axis``: every chip ends with its ring's shards, concatenated in order.

    Step t = 1 … P − 1: every chip forwards the shard it received last (its own at t = 1) to the
    next chip, so chip p receives chip (p − t)'s shard and stores it in slot p − t (mod P).
    """
    ring, physical = _ring(mesh, x, stacked_axis, transposed)
    if ring == 1:
        return x
    mesh.launch(physical)
    r, c, h, w = x.shape
    out = np.empty((r, c, h * ring, w) if stacked_axis == 0 else (r, c, h, w * ring), x.dtype)
    slots = _slots(out, stacked_axis, ring)
    _place(slots, stacked_axis, 0, x)
    moving = x
    for step in range(1, ring):
        moving = mesh.ring_step(moving, stacked_axis, physical)
        _place(slots, stacked_axis, step, moving)
    return out


def reduce_scatter(
    mesh: VirtualMesh, x: Array, stacked_axis: int, *, transposed: bool = False
) -> Array:
    """RdS along ``stacked_axis``: chip p ends with the ring's sum of chunk p of its buffer.

    Each chip splits its buffer into P equal chunks along the scattered matrix axis. Step
    t = 0 … P − 2: chip p sends its running sum of chunk (p − t − 1) mod P to the next chip,
    which adds its own copy of that chunk; after P − 1 steps chip p holds chunk p summed over
    the ring.
    """
    ring, physical = _ring(mesh, x, stacked_axis, transposed)
    if ring == 1:
        return x
    extent = x.shape[2 + stacked_axis]
    if extent % ring:
        raise ValueError(f"cannot reduce-scatter an extent of {extent} over a ring of {ring}")
    chunks = _slots(x, stacked_axis, ring)
    mesh.launch(physical)
    running = _pick(chunks, stacked_axis, 1)
    for step in range(ring - 1):
        received = mesh.ring_step(running, stacked_axis, physical)
        running = received + _pick(chunks, stacked_axis, (step + 2) % ring)
    return running
