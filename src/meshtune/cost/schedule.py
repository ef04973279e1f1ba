"""What one distributed GeMM communicates, and how its time splits (MeshSlice §3.2.2, §4.2).

Every algorithm describes a pass as the list of its communication operations (:class:`Comm`).
The same list gives the traffic the executor must count (launches, synchronised steps, bytes over
the busiest link, per physical axis) and, priced with the profile's link parameters, the time:

    time(comm) = t_launch + steps · (t_sync + step_bytes / bw)

An all-gather or reduce-scatter on a ring of P chips has ``steps = P − 1`` and moves one shard
per step (§3.2.2); one send-recv shift has ``steps = 1`` (the profile's ``send_recv``
parameters); a pipelined broadcast or reduce of D packets takes ``P + D − 2`` steps of one
packet each (§2.3.3, Figure 3 left; the paper counts P + D − 1, see :mod:`meshtune.cost.summa`).
Because cost and traffic come from one list, they cannot drift apart. An operation issued
several times in a row is one :class:`Comm` with a ``count`` (:func:`repeated`), so a list's
length is the number of *distinct* operations of a pass, never its slice count or ring size.

A pass's time is ``prologue + (iterations − 1) · steady + epilogue`` (§4.2: the parts of the
first and last iterations that software pipelining cannot overlap, and one steady-state
iteration). :func:`stage` prices a pipeline stage in which communications of the two mesh
directions run in parallel, and those the profile lets overlap (``overlapped``) also run while
the chip computes, the compute slowed meanwhile on a chip whose collectives take its cores
(``overlap_slowdown``, :func:`overlap_penalty_s`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from meshtune.cost.collectives import CommTime, steps_time
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

AXES = 3  # physical axes a traffic record has: rows, columns, depth
KINDS: tuple[CollectiveKind, ...] = tuple(CollectiveKind)
"""The collective kinds in the order :attr:`CommColumns.kind` numbers them."""


@dataclass(frozen=True, init=False)
class Comm:
    """One communication operation, run on every ring of one physical axis at once, and issued
    ``count`` times in a row on that axis (one launch each).

    ``step_bytes`` is what the busiest link carries in one step (one direction of it);
    ``link_bytes`` what it carries in one issue of the operation (``steps · step_bytes`` unless
    pipeline bubbles idle it). ``both_ways``: every chip sends to both ring neighbours at once
    (:func:`shift_both_ways`); a full-duplex link carries the two directions side by side, a
    half-duplex one (``HardwareProfile.full_duplex`` false) one after the other.
    """

    kind: CollectiveKind
    axis: int
    ring: int
    steps: int
    step_bytes: float
    link_bytes: float
    count: int = 1
    both_ways: bool = False

    def __init__(
        self,
        kind: CollectiveKind,
        axis: int,
        ring: int,
        steps: int,
        step_bytes: float,
        link_bytes: float,
        count: int = 1,
        both_ways: bool = False,
    ) -> None:
        # The fields written at once: a frozen dataclass's own __init__ sets them one by one
        # through object.__setattr__, twice as slow, and the search builds many.
        self.__dict__.update(
            kind=kind,
            axis=axis,
            ring=ring,
            steps=steps,
            step_bytes=step_bytes,
            link_bytes=link_bytes,
            count=count,
            both_ways=both_ways,
        )

    def wire_bytes(self, profile: HardwareProfile) -> float:
        """Bytes one direction of the busiest link carries per step on ``profile``:
        ``step_bytes``, twice that for a both-ways operation on a half-duplex link."""
        return self.step_bytes * (2 if self.both_ways and not profile.full_duplex else 1)

    def time(self, profile: HardwareProfile) -> CommTime:
        """``count · (t_launch + steps · (t_sync + step_bytes / bw))`` with the (kind, axis)
        parameters; ``step_bytes`` counts twice for a both-ways operation on a half-duplex
        profile.

        The last profile's answer is kept on the operation (a cost model prices one operation
        several times: alone, per axis, per stage); profiles are frozen, so it
        cannot go stale.
        """
        memo: tuple[HardwareProfile, CommTime] | None = self.__dict__.get("_time")
        if memo is not None and memo[0] is profile:
            return memo[1]
        link = profile.link(self.kind, self.axis)
        once = steps_time(link, self.steps, self.wire_bytes(profile))
        found = once if self.count == 1 else once.scaled(self.count)
        object.__setattr__(self, "_time", (profile, found))
        return found


class CommColumns(NamedTuple):
    """Lists of communications as columns, one entry per :class:`Comm` (the search prices
    every configuration of a layer at once, :mod:`meshtune.search.arrays`).

    ``row``: the list an entry belongs to; ``kind``: its kind's index in :data:`KINDS`; the
    others are the :class:`Comm` fields its time depends on (``issues``: its ``count``).
    :func:`columns` builds them from lists, one entry per element, in list order; an algorithm
    may build its own without the lists (:attr:`meshtune.algorithms.base.Algorithm.comm_columns`; a
    registry-wide test checks that both price alike), with a leading axis of configurations
    (:meth:`for_configs`): then ``row`` and ``issues`` have the full shape and the other
    columns broadcast against it."""

    row: npt.NDArray[np.intp]
    kind: npt.NDArray[np.intp]
    axis: npt.NDArray[np.intp]
    steps: npt.NDArray[np.float64]
    step_bytes: npt.NDArray[np.float64]
    issues: npt.NDArray[np.float64]
    both_ways: npt.NDArray[np.bool_]

    def for_configs(self, configs: Sequence[int], width: int) -> CommColumns:
        """These columns, of ``width`` lists (one configuration's), as the lists of each
        configuration ``i`` in ``configs``: rows ``i · width`` … ``i · width + width − 1``, one
        line of the leading axis per configuration."""
        import numpy as np

        lines = np.asarray(configs)[:, None]
        return self._replace(
            row=lines * width + self.row, issues=self.issues * np.ones(lines.shape)
        )


_KIND_INDEX = {kind: index for index, kind in enumerate(KINDS)}


def columns(lists: Sequence[Sequence[Comm]]) -> CommColumns:
    """The communications of ``lists`` as :class:`CommColumns` (list ``i``'s have row ``i``).
    NumPy is imported here, not with the module, so that the CLI starts without it."""
    import numpy as np

    entries = [
        (row, _KIND_INDEX[c.kind], c.axis, c.steps, c.step_bytes, c.count, c.both_ways)
        for row, listed in enumerate(lists)
        for c in listed
    ]
    row, kind, axis, steps, step_bytes, count, both_ways = (
        zip(*entries, strict=True) if entries else [()] * 7
    )
    return CommColumns(
        row=np.array(row, dtype=np.intp),
        kind=np.array(kind, dtype=np.intp),
        axis=np.array(axis, dtype=np.intp),
        steps=np.array(steps, dtype=np.float64),
        step_bytes=np.array(step_bytes, dtype=np.float64),
        issues=np.array(count, dtype=np.float64),
        both_ways=np.array(both_ways, dtype=np.bool_),
    )


def repeated(comms: Iterable[Comm], times: int) -> list[Comm]:
    """``comms`` issued ``times`` times in a row: each operation's ``count`` multiplied, the list
    as long as ``comms`` (empty when ``times`` is 0). Prices and traffic equal those of the
    list ``comms * times``, built in O(len(comms))."""
    if times < 0:
        raise ValueError(f"an operation cannot be issued {times} times")
    if times == 0:
        return []
    if times == 1:
        return list(comms)
    return [
        Comm(
            c.kind,
            c.axis,
            c.ring,
            c.steps,
            c.step_bytes,
            c.link_bytes,
            c.count * times,
            both_ways=c.both_ways,
        )
        for c in comms
    ]


def ring_collective(kind: CollectiveKind, axis: int, ring: int, shard_bytes: float) -> list[Comm]:
    """An all-gather or reduce-scatter of ``shard_bytes`` per chip: P − 1 steps of one shard.

    A ring of one chip moves nothing: the list is empty.
    """
    if ring == 1:
        return []
    steps = ring - 1
    return [Comm(kind, axis, ring, steps, shard_bytes, steps * shard_bytes)]


def shift(axis: int, ring: int, shard_bytes: float) -> list[Comm]:
    """One send-recv ring shift of ``shard_bytes`` per chip (nothing on a ring of one chip)."""
    if ring == 1:
        return []
    return [Comm(CollectiveKind.SEND_RECV, axis, ring, 1, shard_bytes, shard_bytes)]


def skew_shifts(shifted: list[Comm], ring: int) -> list[Comm]:
    """The shifts of a skew that moves ring ρ by h(ρ) ∈ 0 … P − 1 positions (Cannon's, §2.3.2),
    each ring the shorter way round its torus: h ≤ P/2 hops forward, else P − h backward,
    the rings of both directions at once, so ⌊P / 2⌋ shifts of ``shifted`` (the artifact's
    ``estimateSkew``: ``mesh.shape[0] // 2`` steps, hwnam831/meshslice CostModel.py)."""
    return repeated(shifted, ring // 2)


def shift_both_ways(axis: int, ring: int, shard_bytes: float, extent: float) -> list[Comm]:
    """One send-recv shift of a shard cut in two along an ``extent`` rows (or columns) long:
    the first ⌈extent / 2⌉ go to the next chip, the rest to the previous one, in one launch and
    one step (the artifact's ``LogicalRing_*Split``: ``bytes / (2 · bw)`` per shift,
    hwnam831/meshslice CostModel.py). The busiest link direction carries the larger part,
    ``shard_bytes · ⌈extent / 2⌉ / extent`` (half the shard when ``extent`` is even or not a
    whole number). On a ring of two chips both neighbours are one chip over one link: a plain
    :func:`shift`.
    """
    if ring <= 2:
        return shift(axis, ring, shard_bytes)
    step = shard_bytes * larger_part(extent)
    return [Comm(CollectiveKind.SEND_RECV, axis, ring, 1, step, step, both_ways=True)]


def larger_part(extent: float) -> float:
    """The fraction of a shard cut in two along ``extent`` rows that the busier direction of
    :func:`shift_both_ways` carries: ``⌈extent / 2⌉ / extent``, 0.5 when ``extent`` is not a
    whole number."""
    return math.ceil(extent / 2) / extent if float(extent).is_integer() else 0.5


def comm_time(comms: Iterable[Comm], profile: HardwareProfile) -> CommTime:
    """Launch, sync and transfer summed over ``comms``."""
    launch = sync = transfer = 0.0
    for comm in comms:  # summed part by part in list order, as CommTime.__add__ would
        once = comm.time(profile)
        launch += once.launch_s
        sync += once.sync_s
        transfer += once.transfer_s
    return CommTime(launch, sync, transfer)


def parallel_time(comms: Iterable[Comm], profile: HardwareProfile, *, times: int = 1) -> float:
    """Wall time of ``comms`` issued together: each axis runs its own in sequence, axes overlap.

    ``times``: the whole list is issued that many times in a row (an unrolled loop), which
    multiplies each axis's sum.
    """
    per_axis = [0.0] * AXES
    for comm in comms:
        per_axis[comm.axis] += comm.time(profile).total_s
    return times * max(per_axis)


def stage(
    compute_s: float,
    comms: Iterable[Comm],
    profile: HardwareProfile,
    then: Iterable[Comm] = (),
    *,
    times: int = 1,
) -> float:
    """One pipeline stage: ``compute_s`` of GeMM beside ``comms`` of another iteration.

    Communications the profile overlaps run beside the compute; the others are synchronous:
    they hold the chip, one after another, before it computes (§4.1, §5.3: the real TPUv4 runs
    AG/RdS that way): ``max(parallel(overlapped), Σ blocking + compute)``. ``then`` are
    communications that can only start once ``comms`` have arrived (the second hop of a
    diagonal shift, :mod:`meshtune.cost.primepar`): ``max(parallel(overlapped) +
    parallel(overlapped then), Σ blocking + compute)``. ``times``: the communications are
    issued that many times in a row during the one compute (an unrolled loop).
    """
    overlaps = profile.overlaps
    items = list(comms)
    later = list(then)
    hidden = parallel_time([c for c in items if overlaps(c.kind)], profile, times=times)
    if later:  # (an empty list's parallel time is 0.0: nothing to add)
        hidden += parallel_time([c for c in later if overlaps(c.kind)], profile, times=times)
    blocking = [c for c in items + later if not overlaps(c.kind)]
    waiting = times * comm_time(blocking, profile).total_s if blocking else 0.0
    time = max(hidden, waiting + compute_s)
    if profile.overlap_slowdown:
        time += overlap_penalty_s(hidden, waiting, compute_s, profile.overlap_slowdown)
    return time


def overlap_penalty_s(
    hidden_s: float, blocking_s: float, compute_s: float, slowdown: float
) -> float:
    """What a stage gains when its compute runs ``1 + σ`` times slower while the overlapped
    communications run (``HardwareProfile.overlap_slowdown`` σ: a GPU's collective kernels
    take SMs and HBM bandwidth from the GeMMs; Lee et al., arXiv:2507.03114, 2025). The
    overlapped ones (``H``) start with the blocking ones (``W``), which the compute ``C``
    follows; the compute done while ``H`` still runs takes ``σ / (1 + σ)`` of that time
    longer: ``max(0, (H − W)·k + min(0, W + C − H))`` with ``k = σ / (1 + σ)``, added to
    ``max(H, W + C)``. 0 when σ = 0 or when the stage has no compute. The array form is
    :func:`meshtune.cost.vector.overlap_penalty`."""
    k = slowdown / (1.0 + slowdown)
    return max(0.0, (hidden_s - blocking_s) * k + min(0.0, blocking_s + compute_s - hidden_s))


class AxisTraffic(NamedTuple):
    """What the rings of one physical axis carry during one GeMM."""

    launches: int
    steps: int
    bytes_per_link: int


Traffic = tuple[AxisTraffic, ...]
"""One :class:`AxisTraffic` per physical axis (0, 1, 2)."""


def traffic(comms: Iterable[Comm]) -> Traffic:
    """Launches, steps and busiest-link bytes per physical axis of ``comms`` (each operation
    ``count`` times).

    Raises ``ValueError`` when a byte count is not whole (a shard that does not divide).
    """
    totals = [[0, 0, 0] for _ in range(AXES)]
    for comm in comms:
        if comm.link_bytes != int(comm.link_bytes):
            raise ValueError(f"{comm} moves a fractional number of bytes")
        row = totals[comm.axis]
        row[0] += comm.count
        row[1] += comm.count * comm.steps
        row[2] += comm.count * int(comm.link_bytes)
    return tuple(AxisTraffic(*row) for row in totals)


@dataclass(frozen=True, init=False)
class PassCost:
    """Predicted time of one GeMM, split the way reports show it (seconds).

    ``total_s = prologue_s + (iterations − 1) · steady_s + epilogue_s``. ``comm`` sums every
    communication of the pass (Figure 10's launch / sync / transfer); ``comm_wall_s`` is how
    long communication alone would take with the axes overlapped; ``exposed_s`` is the part of
    the wall time not covered by computation and ``hidden_s = comm_wall_s − exposed_s``.
    """

    iterations: int
    prologue_s: float
    steady_s: float
    epilogue_s: float
    compute_s: float
    comm: CommTime
    comm_wall_s: float

    def __init__(
        self,
        iterations: int,
        prologue_s: float,
        steady_s: float,
        epilogue_s: float,
        compute_s: float,
        comm: CommTime,
        comm_wall_s: float,
    ) -> None:
        # Written at once (see Comm.__init__): every priced configuration makes three.
        self.__dict__.update(
            iterations=iterations,
            prologue_s=prologue_s,
            steady_s=steady_s,
            epilogue_s=epilogue_s,
            compute_s=compute_s,
            comm=comm,
            comm_wall_s=comm_wall_s,
        )

    @property
    def total_s(self) -> float:
        """prologue + (iterations − 1) · steady + epilogue."""
        return self.prologue_s + (self.iterations - 1) * self.steady_s + self.epilogue_s

    def grouped(self, groups: int) -> PassCost:
        """The pass of ``groups`` GeMMs of this one, one after another, each its own software
        pipeline of prologue, steady state and epilogue (MeshSlice §4.2; a grouped layer's
        experts, :class:`~meshtune.model.layers.FcLayer`, GShard §2.2's per-expert GeMMs): every
        time multiplied by ``groups``, so ``prologue_s`` is the groups' prologues and ``steady_s``
        one steady iteration of each; ``total_s`` is ``groups ·`` this one's. ``self`` when
        ``groups`` is 1."""
        if groups == 1:
            return self
        return PassCost(
            iterations=self.iterations,
            prologue_s=groups * self.prologue_s,
            steady_s=groups * self.steady_s,
            epilogue_s=groups * self.epilogue_s,
            compute_s=groups * self.compute_s,
            comm=self.comm.scaled(groups),
            comm_wall_s=groups * self.comm_wall_s,
        )

    @property
    def finite(self) -> bool:
        """Whether every time of the pass is a finite number (no inf, no NaN)."""
        comm = self.comm
        parts = (self.prologue_s, self.steady_s, self.epilogue_s, self.compute_s, self.comm_wall_s)
        times = (*parts, comm.launch_s, comm.sync_s, comm.transfer_s, self.total_s)
        return all(math.isfinite(t) for t in times)

    @property
    def exposed_s(self) -> float:
        """Wall time during which the chip waits for communication."""
        return max(0.0, self.total_s - self.compute_s)

    @property
    def hidden_s(self) -> float:
        """Communication wall time overlapped with computation."""
        return max(0.0, self.comm_wall_s - self.exposed_s)
