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
from numpy.typing import NDArray

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


def skew(
    mesh: VirtualMesh, x: Array, stacked_axis: int, hops: NDArray[np.int64], *, transposed: bool
) -> Array:
    """Move the shards of ring ρ by ``hops[ρ]`` positions along ``stacked_axis`` (§2.3.2),
    each ring the shorter way round: h ≤ P/2 positions forward, else P − h backward.

    ``hops`` is indexed by the other stacked axis (which ring). The rings of the two directions
    run at once on their own links (each on a mesh of its own whose counters
    :meth:`VirtualMesh.merge_layers` charges); afterwards chip p of ring ρ holds what chip
    p − hops[ρ] held.
    """
    ring, physical = _ring(mesh, x, stacked_axis, transposed)
    hops = hops % ring
    ahead = 2 * hops <= ring
    forward, backward = np.where(ahead, hops, 0), np.where(ahead, 0, ring - hops)
    if not backward.any():
        return _skew_one_way(mesh, x, stacked_axis, physical, forward)
    ways = mesh.fresh(2)
    x = _skew_one_way(ways[0], x, stacked_axis, physical, forward)
    flipped = _skew_one_way(ways[1], np.flip(x, stacked_axis), stacked_axis, physical, backward)
    mesh.merge_layers(ways)
    return np.flip(flipped, stacked_axis)


def _skew_one_way(
    mesh: VirtualMesh, x: Array, stacked_axis: int, physical: int, hops: NDArray[np.int64]
) -> Array:
    """Ring ρ moved ``hops[ρ]`` positions forward: shift h = 1 … max(hops) is one send-recv
    launch in which only the rings with ``hops ≥ h`` send (on a ring flipped along
    ``stacked_axis``, backward)."""
    shape = (1, -1) if stacked_axis == 0 else (-1, 1)
    for h in range(1, int(hops.max(initial=0)) + 1):
        moving = np.broadcast_to((hops >= h).reshape(shape), x.shape[:2])
        mesh.launch(physical)
        moved = mesh.partial_step(x[None], moving[None], stacked_axis, physical)[0]
        mesh.settle(physical)
        x = np.where(moving[:, :, None, None], moved, x)
    return x


def shift(
    mesh: VirtualMesh, x: Array, stacked_axis: int, *, transposed: bool, direction: int = 1
) -> Array:
    """One send-recv ring shift (§2.3.2, §2.3.4): every chip hands its shard to the next chip
    (``direction`` 1) or to the previous one (−1).

    One launch and one step; chip p ends with what chip p − ``direction`` held.
    """
    _, physical = _ring(mesh, x, stacked_axis, transposed)
    mesh.launch(physical)
    return mesh.ring_step(x, stacked_axis, physical, direction)


def shifts(
    mesh: VirtualMesh,
    x: Array,
    stacked_axis: int,
    count: int,
    *,
    transposed: bool,
    direction: int = 1,
) -> Array:
    """``count`` successive send-recv shifts of a shard every chip forwards unchanged.

    Returns ``(count, *x.shape)``: entry s is what each chip holds after s + 1 shifts (the shard
    of the chip (s + 1) · ``direction`` positions before it); ``count`` launches and steps are
    counted.
    """
    _, physical = _ring(mesh, x, stacked_axis, transposed)
    for _ in range(count):
        mesh.launch(physical)
    return mesh.ring_steps(x, stacked_axis, physical, count, direction)


def _packets(x: Array, stacked_axis: int, packets: int) -> tuple[Array, int, int]:
    """Batched stacked ``x (B, r, c, h, w)`` ring-first as ``(B, ring, other, D, h·w / D)``."""
    local = np.moveaxis(x, stacked_axis + 1, 1)
    batch, ring, other, h, w = local.shape
    if (h * w) % packets:
        raise ValueError(f"a {h}x{w} shard does not split into {packets} packets")
    return local.reshape(batch, ring, other, packets, h * w // packets), h, w


def broadcast(
    mesh: VirtualMesh,
    x: Array,
    stacked_axis: int,
    roots: list[int],
    packets: int,
    *,
    transposed: bool,
) -> Array:
    """B pipelined ring broadcasts, operation b from position ``roots[b]`` of every ring
    (§2.3.3, Figure 3 left).

    ``x`` is ``(B, r, c, h, w)``. The root's shard is cut into ``packets`` (D) contiguous packets
    streamed down the ring: the chip d hops after the root forwards packet q at stage q + d
    (d = 0 … P − 2), so a broadcast takes P + D − 2 synchronised stages, every link but the one
    into the root carries the D packets once, and in each stage some links idle (the
    pipeline's bubbles). Returns every chip's copy of its ring's root shard, per operation.
    """
    ring, physical = _ring(mesh, x[0], stacked_axis, transposed)
    if ring == 1:
        return x
    local, h, w = _packets(x, stacked_axis, packets)
    batch = local.shape[0]
    for _ in range(batch):
        mesh.launch(physical)
    held = mesh.pipeline(local, np.asarray(roots), stacked_axis, physical, accumulate=False)
    out = held.reshape(batch, ring, -1, h, w)
    return np.ascontiguousarray(np.moveaxis(out, 1, stacked_axis + 1))


def reduce(
    mesh: VirtualMesh,
    x: Array,
    stacked_axis: int,
    roots: list[int],
    packets: int,
    *,
    transposed: bool,
) -> Array:
    """B pipelined ring reduces, operation b to position ``roots[b]`` of every ring (§2.3.3:
    the broadcast's pattern in reverse).

    Every chip's shard is cut into D packets; the chain starts one hop after the root: the chip
    d hops after the root (d = 1 … P − 1) sends packet q, its own plus what it received, at
    stage q + d − 1, and the root adds the last hop's packets: P + D − 2 stages. The root's
    entry of each operation holds its ring's sum (the other entries hold partial sums).
    """
    ring, physical = _ring(mesh, x[0], stacked_axis, transposed)
    if ring == 1:
        return x
    local, h, w = _packets(x, stacked_axis, packets)
    batch = local.shape[0]
    for _ in range(batch):
        mesh.launch(physical)
    first = (np.asarray(roots) + 1) % ring
    acc = mesh.pipeline(local, first, stacked_axis, physical, accumulate=True)
    out = acc.reshape(batch, ring, -1, h, w)
    return np.ascontiguousarray(np.moveaxis(out, 1, stacked_axis + 1))
