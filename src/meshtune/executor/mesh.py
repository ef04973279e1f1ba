"""A virtual P_r × P_c mesh of chips that counts what its rings move (MeshSlice §2.3.1, §2.3.4).

Chip (i, j) sits at mesh row i and mesh column j. A distributed matrix is held as one *stacked*
NumPy array of shape ``(ring0, ring1, h, w)``: ``x[i, j]`` is the local shard of the chip at
position (i, j), so every chip really holds its own ``h × w`` array and moving data between
chips means moving those arrays.

Two kinds of ring connect the chips (Figure 3): axis 0 is the ring of the P_r chips that share a
mesh column (inter-row traffic, AG_row / RdS_row); axis 1 is the ring of the P_c chips that share
a mesh row (inter-column traffic, AG_col / RdS_col). A GeMM on the *transposed* mesh sees chip
(i, j) as physical chip (j, i); its stacked arrays are indexed logically, so its stacked axis a
is physical axis ``1 − a`` (:meth:`VirtualMesh.physical_axis`).

The counters of each physical axis are filled from the arrays that :meth:`VirtualMesh.ring_step`
actually hands to a neighbour, never from a formula: launches, ring steps, and bytes per link,
where the bytes of an element are the plan's ``bytes_per_element`` (the executor computes in
float64; a link is charged ``elements × bytes_per_element``).

Pipelined broadcasts and reduces (§2.3.3 Figure 3 left), B independent operations at once
(e.g. the L broadcasts of SUMMA), run through :meth:`VirtualMesh.pipeline`: the P − 1 hops of
each chain in one vectorised pass, its P + D − 2 stages and its busiest link counted from the
packets that moved. Steps in which only some chips send (the skew of Cannon's algorithm,
§2.3.2) use :meth:`VirtualMesh.partial_step`: every such step is one synchronisation per
operation, and each chip's link load is accumulated until :meth:`VirtualMesh.settle` charges
every operation's busiest link total.
:meth:`VirtualMesh.ring_steps` runs several steps of a shard that is forwarded unchanged (the
shifts of Wang's split all-gather) in one call and counts each of them.

A mesh with a ``depth`` (a 2.5D algorithm's [P_r, P_c, d] mesh; Tesseract, ICPP 2022 §3.1) is
``depth`` layers of P_r × P_c chips. :meth:`VirtualMesh.depth_layers` hands out one 2D mesh
per layer with its own counters; the layers run at once on disjoint rings of axes 0 and 1, so
:meth:`VirtualMesh.merge_layers` charges each of those axes with its busiest layer's counts.
:meth:`VirtualMesh.depth_rings` views the ``rows · cols`` depth rings as a ``depth ×
(rows · cols)`` mesh whose stacked axis 0 is the depth ring and whose counters are this mesh's
axis-2 counters, so the ring collectives of :mod:`meshtune.executor.collectives` run along
depth on stacked ``(depth, rows · cols, h, w)`` arrays and are counted on axis 2.

One-sided operations (the universal one-sided GeMM, :mod:`meshtune.partition`) go through
:meth:`VirtualMesh.one_sided`: process g (mesh row ``g // P_c``, column ``g mod P_c``) gets a
piece from, or accumulates a piece into, another process; the counters of each process record
the operations and elements on every axis the transfer crosses, and
:meth:`VirtualMesh.settle_one_sided` charges the busiest process (most elements moved, ties to
the lowest process) to the axis counters: one launch and one step per operation per axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from meshtune.dataflow import Dataflow, GemmOp
from meshtune.partition.transfers import Phase, TransferKind, busiest, transfer_axes

Array = NDArray[np.float64]


@dataclass
class AxisCounter:
    """What one physical axis's rings did: collectives launched, ring steps, bytes per link."""

    launches: int = 0
    steps: int = 0
    bytes_per_link: int = 0

    def as_tuple(self) -> tuple[int, int, int]:
        """(launches, steps, bytes_per_link)."""
        return (self.launches, self.steps, self.bytes_per_link)


@dataclass
class VirtualMesh:
    """P_r × P_c (× ``depth``) chips with traffic counters per physical axis.

    ``counters[2]`` belongs to the depth axis of 2.5D algorithms and stays zero on a 2D mesh.
    """

    rows: int
    cols: int
    bytes_per_element: int
    depth: int = 1
    counters: tuple[AxisCounter, AxisCounter, AxisCounter] = field(
        default_factory=lambda: (AxisCounter(), AxisCounter(), AxisCounter())
    )
    _loads: dict[int, NDArray[np.int64]] = field(default_factory=dict, repr=False)
    _one_sided: dict[int, dict[tuple[str, str, int], list[int]]] = field(
        default_factory=dict, repr=False
    )
    _moved: dict[int, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if min(self.rows, self.cols, self.depth) < 1:
            raise ValueError(
                f"mesh must be at least 1x1x1, got {self.rows}x{self.cols}x{self.depth}"
            )
        if self.bytes_per_element < 1:
            raise ValueError(f"bytes_per_element must be >= 1, got {self.bytes_per_element}")

    def ring_size(self, physical_axis: int) -> int:
        """Chips on one ring of ``physical_axis``: P_r for axis 0, P_c for axis 1, depth for 2."""
        return (self.rows, self.cols, self.depth)[physical_axis]

    def depth_layers(self) -> list[VirtualMesh]:
        """One ``rows × cols`` mesh per depth layer, each with fresh counters (see the module
        docstring; charge them with :meth:`merge_layers`)."""
        return self.fresh(self.depth)

    def fresh(self, count: int) -> list[VirtualMesh]:
        """``count`` ``rows × cols`` meshes with fresh counters, for work that runs at once on
        disjoint links (depth layers; the two directions of a full-duplex ring); charge them
        with :meth:`merge_layers`."""
        return [VirtualMesh(self.rows, self.cols, self.bytes_per_element) for _ in range(count)]

    def merge_layers(self, layers: list[VirtualMesh]) -> None:
        """Charge axes 0 and 1 with the busiest layer's launches, steps and bytes per link: the
        layers run at once on disjoint rings (or on the two directions of full-duplex links),
        as the rings of one axis do."""
        for axis in (0, 1):
            counter = self.counters[axis]
            counter.launches += max(layer.counters[axis].launches for layer in layers)
            counter.steps += max(layer.counters[axis].steps for layer in layers)
            counter.bytes_per_link += max(layer.counters[axis].bytes_per_link for layer in layers)

    def depth_rings(self) -> VirtualMesh:
        """The depth rings as a ``depth × (rows · cols)`` mesh counting on this mesh's axis 2
        (its physical axis 0 *is* this mesh's axis-2 counter)."""
        return VirtualMesh(
            self.depth,
            self.rows * self.cols,
            self.bytes_per_element,
            counters=(self.counters[2], AxisCounter(), AxisCounter()),
        )

    @staticmethod
    def physical_axis(stacked_axis: int, transposed: bool) -> int:
        """The physical axis behind stacked axis 0 or 1 of a (possibly transposed) GeMM."""
        return 1 - stacked_axis if transposed else stacked_axis

    def launch(self, physical_axis: int) -> None:
        """Record one collective launched on every ring of ``physical_axis``."""
        self.counters[physical_axis].launches += 1

    def ring_step(
        self, outgoing: Array, stacked_axis: int, physical_axis: int, direction: int = 1
    ) -> Array:
        """One synchronised ring step: every chip sends its ``outgoing`` shard to the next chip.

        ``outgoing[i, j]`` is what chip (i, j) sends; the chip at position p along
        ``stacked_axis`` receives from position p − ``direction`` (mod ring size): the previous
        chip for ``direction`` 1, the next one (the other way round the ring) for −1. Every
        chip sends exactly one shard over its own link, so a link carries
        ``outgoing.size / chips`` elements. Returns what every chip received.
        """
        self._check(outgoing.shape[stacked_axis], stacked_axis, physical_axis)
        moved = np.roll(outgoing, _unit(direction), axis=stacked_axis)
        chips = outgoing.shape[0] * outgoing.shape[1]
        counter = self.counters[physical_axis]
        counter.steps += 1
        counter.bytes_per_link += outgoing.size // chips * self.bytes_per_element
        return moved

    def ring_steps(
        self,
        outgoing: Array,
        stacked_axis: int,
        physical_axis: int,
        count: int,
        direction: int = 1,
    ) -> Array:
        """``count`` successive :meth:`ring_step` s of a shard that every chip forwards unchanged.

        Returns ``(count, *outgoing.shape)``: entry s is what every chip holds after s + 1 steps
        (the shard of the chip (s + 1) · ``direction`` positions before it). Every step is
        counted as :meth:`ring_step` counts it.
        """
        ring = self._check(outgoing.shape[stacked_axis], stacked_axis, physical_axis)
        chips = outgoing.shape[0] * outgoing.shape[1]
        hops = _unit(direction) * np.arange(1, count + 1)[:, None]
        sources = (np.arange(ring)[None, :] - hops) % ring
        moved: Array = np.moveaxis(
            np.moveaxis(outgoing, stacked_axis, 0)[sources], 1, stacked_axis + 1
        )
        counter = self.counters[physical_axis]
        counter.steps += count
        counter.bytes_per_link += count * (outgoing.size // chips) * self.bytes_per_element
        return moved

    def partial_step(
        self, outgoing: Array, sending: NDArray[np.bool_], stacked_axis: int, physical_axis: int
    ) -> Array:
        """One synchronised step of each of B independent operations, in which only the chips
        where ``sending`` is true send.

        ``outgoing`` is ``(B, rows, cols, h, w)``: operation b's shard per chip; ``sending`` is
        ``(B, rows, cols)``. Along ``stacked_axis`` the chip at position p receives from position
        p − 1 (mod ring size); what a chip that does not send would have handed on is replaced
        by zeros. Every operation's step is one synchronisation; each sender's link load grows by
        its shard's elements, and :meth:`settle` charges each operation's busiest link once the
        operations are over.
        """
        if sending.shape != outgoing.shape[:3]:
            raise ValueError(f"sending mask {sending.shape} does not fit {outgoing.shape[:3]}")
        batch = outgoing.shape[0]
        per_chip = outgoing[0, 0, 0].size
        load = self._loads.setdefault(physical_axis, np.zeros(sending.shape, dtype=np.int64))
        if load.shape != sending.shape:
            raise ValueError("a partial-step operation changed its shape before it settled")
        load += sending * per_chip
        self.counters[physical_axis].steps += batch
        masked = np.where(sending[..., None, None], outgoing, 0.0)
        self._check(outgoing.shape[stacked_axis + 1], stacked_axis, physical_axis)
        return np.roll(masked, 1, axis=stacked_axis + 1)

    def pipeline(
        self,
        held: Array,
        first: NDArray[np.int64],
        stacked_axis: int,
        physical_axis: int,
        *,
        accumulate: bool,
    ) -> Array:
        """B pipelined chains down the rings of ``stacked_axis`` at once (§2.3.3, Figure 3 left).

        ``held`` is ``(B, ring, other, D, packet)``, ring-first: operation b's D packets per chip.
        Chain b starts at ring position ``first[b]`` and visits the P positions in ring order;
        hop j (j = 0 … P − 2) hands the D packets its sender holds to the next position, packet q
        at stage j + q, so an operation takes P + D − 2 synchronised stages and every sender's
        link carries its D packets once. A receiver stores what arrives (``accumulate`` false: a
        broadcast from ``first``) or adds its own packets to it (a reduce that ends one position
        before ``first``). The hops run along the chain in one vectorised pass (a copy or a
        running sum over the chain axis); each operation's stages and its busiest link's load are
        counted from the packets that moved. Returns what every chip holds afterwards.
        """
        batch, ring, _, packets, _ = held.shape
        self._check(ring, stacked_axis, physical_axis)
        ops = np.arange(batch)[:, None]
        order = (first[:, None] + np.arange(ring)[None, :]) % ring  # chain position -> ring
        out = np.empty_like(held)
        if accumulate:
            chain = held[ops.T, order.T]  # chain-first: (ring, B, …), the sums run over axis 0
            np.cumsum(chain, axis=0, out=chain)
            out[ops.T, order.T] = chain
            moved = np.moveaxis(chain[:-1], 0, 1)  # hop j carries the sum of positions 0 … j
        else:
            # Every hop forwards what its sender received: the first position's packets.
            moved = np.broadcast_to(held[ops, order[:, :1]], (batch, ring - 1, *held.shape[2:]))
            out[:] = held[ops, order[:, :1]]
        hops = moved.shape[1]
        sending = np.zeros((batch, ring), dtype=bool)
        sending[ops, order[:, :hops]] = True
        per_chip = moved[0, 0, 0].size if hops else 0
        counter = self.counters[physical_axis]
        counter.steps += batch * (hops + packets - 1) if hops else 0
        busiest = int((sending * per_chip).max(axis=1).sum())
        counter.bytes_per_link += busiest * self.bytes_per_element
        return out

    def _check(self, ring: int, stacked_axis: int, physical_axis: int) -> int:
        """``ring`` (the chips along ``stacked_axis``), checked against the physical axis."""
        if ring != self.ring_size(physical_axis):
            raise ValueError(
                f"stacked axis {stacked_axis} has {ring} chips, but a ring of physical axis "
                f"{physical_axis} has {self.ring_size(physical_axis)}"
            )
        return ring

    def settle(self, physical_axis: int) -> None:
        """End partial-step operations: charge each one's busiest link total as bytes."""
        load = self._loads.pop(physical_axis, None)
        if load is not None:
            busiest = load.reshape(load.shape[0], -1).max(axis=1).sum()
            self.counters[physical_axis].bytes_per_link += int(busiest) * self.bytes_per_element

    def one_sided(
        self, process: int, peer: int, piece: Array, kind: TransferKind, phase: Phase = "main"
    ) -> Array:
        """One one-sided get (``process`` reads ``piece`` held by ``peer``) or accumulate
        (``process`` adds ``piece`` into ``peer``'s copy); returns the copy that crossed.

        Counted for ``process`` in its group (``phase``, ``kind``): one operation and
        ``piece.size`` elements on every physical axis the transfer crosses
        (:func:`meshtune.partition.transfers.transfer_axes`).
        """
        chips = self.rows * self.cols
        if not (0 <= process < chips and 0 <= peer < chips) or process == peer:
            raise ValueError(f"no one-sided transfer from {process} to {peer} on {chips} chips")
        groups = self._one_sided.setdefault(process, {})
        for axis in transfer_axes(process, peer, self.cols):
            record = groups.setdefault((phase, kind, axis), [0, 0])
            record[0] += 1
            record[1] += piece.size
        self._moved[process] = self._moved.get(process, 0) + piece.size
        return np.array(piece, copy=True)

    def settle_one_sided(self) -> None:
        """Charge the busiest process's one-sided operations to the axis counters: per axis,
        one launch per group of operations, one step per operation, and their bytes."""
        top = busiest(self._moved)
        if top is not None:
            for (_, _, axis), (count, elements) in self._one_sided[top].items():
                counter = self.counters[axis]
                counter.launches += 1
                counter.steps += count
                counter.bytes_per_link += elements * self.bytes_per_element
        self._one_sided.clear()
        self._moved.clear()


def _unit(direction: int) -> int:
    """``direction`` checked: 1 (from the previous chip) or −1 (from the next one)."""
    if direction not in (1, -1):
        raise ValueError(f"a ring step goes one position either way (1 or -1), got {direction}")
    return direction


def shard(matrix: Array, rows: int, cols: int) -> Array:
    """Split ``matrix`` into ``rows × cols`` blocks, block (i, j) on chip (i, j) (§2.3.1).

    Matrix rows go over mesh rows and matrix columns over mesh columns; both extents must
    divide evenly. Returns the stacked ``(rows, cols, h / rows, w / cols)`` array.
    """
    h, w = matrix.shape
    if h % rows or w % cols:
        raise ValueError(f"a {h}x{w} matrix does not split over a {rows}x{cols} mesh")
    blocks = matrix.reshape(rows, h // rows, cols, w // cols).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(blocks)


def unshard(stacked: Array) -> Array:
    """The dense matrix whose :func:`shard` is ``stacked`` (inverse of :func:`shard`)."""
    rows, cols, h, w = stacked.shape
    return stacked.transpose(0, 2, 1, 3).reshape(rows * h, cols * w)


def dense_gemm(op: GemmOp, a: Array, b: Array) -> Array:
    """The single-chip reference of Figure 5's canonical form: OS ``A·B``, LS ``A·Bᵀ``, RS
    ``Aᵀ·B``."""
    if op.dataflow is Dataflow.OS:
        return a @ b
    if op.dataflow is Dataflow.LS:
        return a @ b.T
    return a.T @ b


def check_operands(op: GemmOp, a: Array, b: Array) -> None:
    """``ValueError`` unless ``a`` and ``b`` have the dense shapes of ``op``'s canonical form."""
    if (a.shape, b.shape) != op.operand_shapes:
        raise ValueError(f"operands {a.shape}, {b.shape} do not fit {op.dataflow.value} {op}")
