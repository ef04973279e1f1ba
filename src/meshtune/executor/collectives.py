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


def _ring_first(x: Array, stacked_axis: int) -> Array:
    """``x`` as ``(ring, other ring, extent, other)``: the ring first, its matrix axis third."""
    moved = np.moveaxis(x, stacked_axis, 0)
    return moved if stacked_axis == 0 else np.swapaxes(moved, 2, 3)


def _ring_back(x: Array, stacked_axis: int) -> Array:
    """Inverse of :func:`_ring_first`, as a contiguous array."""
    moved = x if stacked_axis == 0 else np.swapaxes(x, 2, 3)
    return np.ascontiguousarray(np.moveaxis(moved, 0, stacked_axis))


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
    local = _ring_first(x, stacked_axis)
    p, q, extent, other = local.shape
    slots = np.empty((p, q, ring, extent, other), dtype=x.dtype)
    position = np.arange(ring)
    slots[position, :, position] = local
    moving = x
    for step in range(1, ring):
        moving = mesh.ring_step(moving, stacked_axis, physical)
        slots[position, :, (position - step) % ring] = _ring_first(moving, stacked_axis)
    return _ring_back(slots.reshape(p, q, ring * extent, other), stacked_axis)


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
    local = _ring_first(x, stacked_axis)
    p, q, extent, other = local.shape
    if extent % ring:
        raise ValueError(f"cannot reduce-scatter an extent of {extent} over a ring of {ring}")
    chunks = local.reshape(p, q, ring, extent // ring, other)
    mesh.launch(physical)
    position = np.arange(ring)
    running = _ring_back(chunks[position, :, (position - 1) % ring], stacked_axis)
    for step in range(ring - 1):
        received = _ring_first(mesh.ring_step(running, stacked_axis, physical), stacked_axis)
        own = chunks[position, :, (position - step - 2) % ring]
        running = _ring_back(received + own, stacked_axis)
    return running


def skew(
    mesh: VirtualMesh, x: Array, stacked_axis: int, hops: NDArray[np.int64], *, transposed: bool
) -> Array:
    """Move the shards of ring ρ by ``hops[ρ]`` positions along ``stacked_axis`` (§2.3.2).

    ``hops`` is indexed by the other stacked axis (which ring). Shift h = 1 … max(hops) is one
    send-recv launch in which only the rings with ``hops ≥ h`` send; afterwards chip p of ring ρ
    holds what chip p − hops[ρ] held.
    """
    _, physical = _ring(mesh, x, stacked_axis, transposed)
    shape = (1, -1) if stacked_axis == 0 else (-1, 1)
    for h in range(1, int(hops.max(initial=0)) + 1):
        moving = np.broadcast_to((hops >= h).reshape(shape), x.shape[:2])
        mesh.launch(physical)
        moved = mesh.partial_step(x, moving, stacked_axis, physical)
        mesh.settle(physical)
        x = np.where(moving[:, :, None, None], moved, x)
    return x


def shift(mesh: VirtualMesh, x: Array, stacked_axis: int, *, transposed: bool) -> Array:
    """One send-recv ring shift (§2.3.2, §2.3.4): every chip hands its shard to the next chip.

    One launch and one step; chip p ends with what chip p − 1 held.
    """
    _, physical = _ring(mesh, x, stacked_axis, transposed)
    mesh.launch(physical)
    return mesh.ring_step(x, stacked_axis, physical)


def _pipeline(
    mesh: VirtualMesh,
    packets_held: NDArray[np.float64],
    stacked_axis: int,
    physical: int,
    sender_packet: NDArray[np.int64],
    accumulate: bool,
) -> None:
    """The P + D − 2 stages of a pipelined ring broadcast or reduce (§2.3.3, Figure 3 left).

    ``packets_held`` is ``(ring, other ring, D, packet)`` in ring-first order and is updated in
    place. ``sender_packet[p]`` is the packet position p sends at stage 0 (it sends packet
    ``stage + sender_packet[p]`` at each later stage while that is a packet; positions that
    never send have a value below −(P + D)). Receivers store (broadcast) or add (reduce) it.
    """
    ring, other, packets, size = packets_held.shape
    for stage in range(ring + packets - 2):
        packet = stage + sender_packet
        senders = np.flatnonzero((packet >= 0) & (packet < packets))
        outgoing = np.zeros((ring, other, 1, size))
        outgoing[senders, :, 0] = packets_held[senders, :, packet[senders]]
        sending = np.zeros((ring, other), dtype=bool)
        sending[senders] = True
        moved = mesh.partial_step(
            np.moveaxis(outgoing, 0, stacked_axis),
            sending if stacked_axis == 0 else sending.T,
            stacked_axis,
            physical,
        )
        received = np.moveaxis(moved, stacked_axis, 0)[:, :, 0]
        receivers = (senders + 1) % ring
        if accumulate:
            packets_held[receivers, :, packet[senders]] += received[receivers]
        else:
            packets_held[receivers, :, packet[senders]] = received[receivers]
    mesh.settle(physical)


def broadcast(
    mesh: VirtualMesh, x: Array, stacked_axis: int, root: int, packets: int, *, transposed: bool
) -> Array:
    """Pipelined ring broadcast from position ``root`` of every ring (§2.3.3, Figure 3 left).

    The root's shard is cut into ``packets`` (D) contiguous packets streamed down the ring: the
    chip d hops after the root forwards packet q at stage q + d (d = 0 … P − 2), so the
    broadcast takes P + D − 2 synchronised stages, every link but the one into the root carries
    the D packets once, and each stage some links idle (the pipeline's bubbles). Returns every
    chip's copy of its ring's root shard.
    """
    ring, physical = _ring(mesh, x, stacked_axis, transposed)
    if ring == 1:
        return x
    local = np.moveaxis(x, stacked_axis, 0)
    _, other, h, w = local.shape
    if (h * w) % packets:
        raise ValueError(f"a {h}x{w} shard does not split into {packets} packets")
    held = np.zeros((ring, other, packets, h * w // packets))
    held[root] = local[root].reshape(other, packets, -1)
    distance = (np.arange(ring) - root) % ring
    start = np.where(distance <= ring - 2, -distance, -2 * (ring + packets))
    mesh.launch(physical)
    _pipeline(mesh, held, stacked_axis, physical, start, accumulate=False)
    return np.ascontiguousarray(np.moveaxis(held.reshape(ring, other, h, w), 0, stacked_axis))


def reduce(
    mesh: VirtualMesh, x: Array, stacked_axis: int, root: int, packets: int, *, transposed: bool
) -> Array:
    """Pipelined ring reduce to position ``root`` of every ring (§2.3.3: the broadcast's pattern).

    Every chip's shard is cut into D packets; the chain starts one hop after the root: the chip
    d hops after the root (d = 1 … P − 1) sends packet q, its own plus what it received, at
    stage q + d − 1, and the root adds the last hop's packets: P + D − 2 stages. The root's
    entry of the result holds the ring's sum (the other entries hold partial sums).
    """
    ring, physical = _ring(mesh, x, stacked_axis, transposed)
    if ring == 1:
        return x
    local = np.moveaxis(x, stacked_axis, 0)
    _, other, h, w = local.shape
    if (h * w) % packets:
        raise ValueError(f"a {h}x{w} shard does not split into {packets} packets")
    acc = local.reshape(ring, other, packets, h * w // packets).copy()
    distance = (np.arange(ring) - root) % ring
    start = np.where(distance >= 1, 1 - distance, -2 * (ring + packets))
    mesh.launch(physical)
    _pipeline(mesh, acc, stacked_axis, physical, start, accumulate=True)
    return np.ascontiguousarray(np.moveaxis(acc.reshape(ring, other, h, w), 0, stacked_axis))
