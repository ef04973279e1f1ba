"""The scalar cost formulas evaluated as NumPy arrays (vectorised pricing).

An algorithm's communications for many configurations at once are :class:`CommColumns`
(:mod:`meshtune.cost.schedule`), built from the same lists the executor's traffic checks count.
This module prices them, and the local GeMMs, with the formulas of the scalar path:

* one issue of an entry, :meth:`meshtune.cost.schedule.Comm.time` of count 1:
  ``t_launch + steps · (t_sync + wire_bytes / bw)`` with the (kind, axis) link parameters,
  ``wire_bytes`` twice ``step_bytes`` for a both-ways entry on a half-duplex profile;
* the same for a schedule's *slots*, lists of at most one communication (:func:`single_table`),
  with whether the profile overlaps each one's kind with compute (``profile.overlaps``);
* :func:`meshtune.cost.compute.gemm_time` over an array of GeMM FLOPs
  (:func:`gemm_flop_times`): ``overhead + 2·m·n·k / (F · efficiency(2·m·n·k))``, the
  efficiency curve interpolated log-linearly between its points and held at its ends.

The algorithms' ``layer_times`` (:attr:`meshtune.algorithms.base.Algorithm.layer_times`) combine
them with their own schedule (prologue, steady state, epilogue). NumPy is imported inside the
functions, so that the CLI starts without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from meshtune.cost.schedule import AXES, KINDS, Comm, CommColumns
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile, ProfileMemo

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    IntArray = npt.NDArray[np.intp]

EXACT_INTEGER = 2**53
"""Integers below this convert to float64 exactly, so an array division of such integers rounds
once, as Python's ``int / int`` does: array pricing that must equal the scalar floats to the bit
checks its integers against it (the family floors, the split space's logits)."""


def link_table(profile: HardwareProfile) -> FloatArray:
    """``profile``'s link parameters, shape ``(3, len(KINDS) · AXES)``: t_launch, t_sync and
    bandwidth (rows) of link ``kind · AXES + axis`` (columns); NaN where the profile has no
    parameters for that axis, so that a time priced on it is not finite. Cached per profile
    object (profiles are frozen)."""
    return _LINKS.get(profile, None, lambda: _build_link_table(profile))


# link_table's answers: (profile, None) → its table.
_LINKS: ProfileMemo[None, FloatArray] = ProfileMemo(256)


def _build_link_table(profile: HardwareProfile) -> FloatArray:
    """:func:`link_table`, built."""
    import numpy as np

    table = np.full((3, len(KINDS) * AXES), np.nan)
    for index, kind in enumerate(KINDS):
        for axis in profile.axes(kind):
            if axis < AXES:
                link = profile.link(kind, axis)
                table[:, index * AXES + axis] = (
                    link.t_launch_s,
                    link.t_sync_s,
                    link.bw_bytes_per_s,
                )
    return table


def wire_bytes(cols: CommColumns, profile: HardwareProfile) -> FloatArray:
    """:meth:`~meshtune.cost.schedule.Comm.wire_bytes` of each entry: a both-ways step sends
    its two halves one after the other on a half-duplex link."""
    import numpy as np

    if profile.full_duplex:
        return cols.step_bytes
    doubled: FloatArray = np.where(cols.both_ways, 2.0 * cols.step_bytes, cols.step_bytes)
    return doubled


def issue_times(cols: CommColumns, profile: HardwareProfile) -> FloatArray:
    """Seconds of one issue of each entry (its ``issues`` not counted):
    ``t_launch + steps · (t_sync + wire_bytes / bw)``, broadcast over the columns' shapes."""
    launch, sync, bw = link_table(profile)
    link = cols.kind * AXES + cols.axis
    times: FloatArray = launch[link] + cols.steps * (
        sync[link] + wire_bytes(cols, profile) / bw[link]
    )
    return times


def single_table(lists: Sequence[Sequence[Comm]], profile: HardwareProfile) -> FloatArray:
    """Lists of at most one communication each (a schedule's slots: MeshSlice's two collectives
    of one iteration), as rows ``(fixed, moving, hidden, blocking)``: one issue takes ``fixed +
    moving`` seconds, ``fixed = t_launch + steps · t_sync`` and ``moving = steps · wire_bytes /
    bw`` with the (kind, axis) link's parameters (:meth:`Comm.time`'s launch + sync and
    transfer), and ``fixed + moving / S`` with 1 / S of the bytes; ``hidden`` is 1.0 where
    ``profile.overlaps`` the kind, ``blocking`` 1.0 − that. An empty list is ``(0, 0, 1, 0)``.
    Raises :class:`ProfileError` where the profile has no parameters for a link (as
    :meth:`Comm.time` does)."""
    import numpy as np

    links = _SLOT_LINKS.get(profile, None, dict)
    rows: list[tuple[float, ...]] = []
    for listed in lists:
        if not listed:
            rows.append(_EMPTY_SLOT)
            continue
        if len(listed) > 1:
            raise ValueError(f"a slot holds one communication, got {len(listed)}")
        (comm,) = listed
        wire = comm.wire_bytes(profile)
        rows.append(_slot_row(links, profile, comm.kind, comm.axis, comm.steps, wire))
    return np.array(rows, dtype=np.float64).reshape(len(lists), 4)


def ring_table(
    moves: Sequence[tuple[CollectiveKind, int, int, float]], profile: HardwareProfile
) -> FloatArray:
    """:func:`single_table` of ``[ring_collective(*move) for move in moves]``
    (:func:`meshtune.cost.schedule.ring_collective`: ``ring − 1`` steps of the shard, nothing
    on a ring of one chip), without building the lists: the search prices a layer's
    collectives this way for every layer it bounds."""
    import numpy as np

    links = _SLOT_LINKS.get(profile, None, dict)
    rows = [
        _EMPTY_SLOT if ring == 1 else _slot_row(links, profile, kind, axis, ring - 1, shard)
        for kind, axis, ring, shard in moves
    ]
    return np.array(rows, dtype=np.float64).reshape(len(moves), 4)


def _slot_row(
    links: dict[tuple[CollectiveKind, int], tuple[float, ...]],
    profile: HardwareProfile,
    kind: CollectiveKind,
    axis: int,
    steps: int,
    wire_bytes: float,
) -> tuple[float, ...]:
    """One row of :func:`single_table`: ``(t_launch + steps · t_sync, steps · wire_bytes / bw,
    hidden, blocking)`` of the (``kind``, ``axis``) link, its parameters kept in ``links``."""
    link = links.get((kind, axis))
    if link is None:
        link = links[(kind, axis)] = _slot_link(profile, kind, axis)
    launch, sync, bw, hidden = link
    return (launch + steps * sync, steps * wire_bytes / bw, hidden, 1.0 - hidden)


_EMPTY_SLOT = (0.0, 0.0, 1.0, 0.0)

# single_table's link rows: (profile, None) → {(kind, axis): (t_launch, t_sync, bw, hidden)}.
_SLOT_LINKS: ProfileMemo[None, dict[tuple[CollectiveKind, int], tuple[float, ...]]] = ProfileMemo(
    256
)


def _slot_link(profile: HardwareProfile, kind: CollectiveKind, axis: int) -> tuple[float, ...]:
    """(t_launch, t_sync, bw, 1.0 if ``profile`` overlaps ``kind`` else 0.0) of one link."""
    link = profile.link(kind, axis)
    hidden = 1.0 if profile.overlaps(kind) else 0.0
    return (link.t_launch_s, link.t_sync_s, link.bw_bytes_per_s, hidden)


FAMILY_CHUNK = 8192
"""(pass, mesh) entries the family floors price in one NumPy evaluation (:func:`chunks`): their
arrays then stay within a CPU's caches (Llama 3.1 405B at 55,440 chips has TP sizes of 1,044
passes on 120 meshes; priced at once, their schedule took about three times as long)."""


def chunks(rows: int, columns: int) -> list[slice]:
    """Consecutive slices of ``rows`` rows, each of at most :data:`FAMILY_CHUNK` entries of
    ``columns`` columns (one row at least), covering them all in order."""
    step = max(1, FAMILY_CHUNK // max(1, columns))
    return [slice(start, start + step) for start in range(0, rows, step)]


_NO_LINK = (0.0, 0.0, 1.0, 1.0)
"""A ring of one chip's row in :func:`family_links`: nothing runs there."""


def family_links(
    rings: npt.NDArray[np.int64], profiles: Sequence[HardwareProfile]
) -> Callable[[CollectiveKind, int], FloatArray]:
    """The links of every mesh of a family, as a function of (``kind``, ``axis``): rows
    t_launch, t_sync, bandwidth and hidden (1.0 if the profile overlaps ``kind``), a column per
    mesh, whose ring on ``axis`` has ``rings[axis][i]`` chips and is priced with
    ``profiles[i]``; 0, 0, 1, 1 where that ring has one chip (nothing runs there, and the
    profile need not have the link). Which meshes share a profile is worked out once, and each
    distinct profile looked up once per link (a family's meshes share a few); the function
    raises :class:`~meshtune.errors.ProfileError` when one lacks a link of a longer ring."""
    import numpy as np

    distinct: dict[int, int] = {}  # id of a profile → its index among the distinct ones
    which = np.array([distinct.setdefault(id(p), len(distinct)) for p in profiles], dtype=np.intp)
    firsts = list({id(p): p for p in profiles}.values())  # the distinct profiles, in order
    longer = rings > 1  # (axis, mesh): a ring of more than one chip
    used = [set(which[on].tolist()) for on in longer]  # per axis, the profiles it needs

    def links(kind: CollectiveKind, axis: int) -> FloatArray:
        params = np.array(
            [
                _slot_link(profile, kind, axis) if j in used[axis] else _NO_LINK
                for j, profile in enumerate(firsts)
            ],
            dtype=np.float64,
        )[which]
        rows: FloatArray = np.where(longer[axis][:, None], params, np.array(_NO_LINK)).T
        return rows

    return links


def stage_times(
    hidden: FloatArray, blocking: FloatArray, compute: FloatArray, slowdown: float
) -> FloatArray:
    """:func:`meshtune.cost.schedule.stage` from its parts, as arrays (element by element):
    ``max(H, W + C)`` with ``H`` the overlapped communications, ``W`` the blocking ones and
    ``C`` the compute, plus, when ``slowdown`` σ > 0, :func:`overlap_penalty`."""
    import numpy as np

    times: FloatArray = np.maximum(hidden, blocking + compute)
    if slowdown:
        times = times + overlap_penalty(hidden, blocking, compute, slowdown)
    return times


def overlap_penalty(
    hidden: FloatArray, blocking: FloatArray, compute: FloatArray, slowdown: float
) -> FloatArray:
    """:func:`meshtune.cost.schedule.overlap_penalty_s` of arrays (element by element): what a
    stage gains when its compute slows by ``slowdown`` beside the overlapped communications,
    ``max(0, (H − W)·k + min(0, W + C − H))``, ``k = σ / (1 + σ)``."""
    import numpy as np

    k = slowdown / (1.0 + slowdown)
    penalty: FloatArray = np.maximum(
        0.0, (hidden - blocking) * k + np.minimum(0.0, blocking + compute - hidden)
    )
    return penalty


def gemm_flop_times(profile: HardwareProfile, flops: FloatArray) -> FloatArray:
    """:func:`meshtune.cost.compute.gemm_time` of GeMMs of ``flops`` = 2·m·n·k each:
    ``flops / F``, or ``overhead + flops / (F · efficiency(flops))`` on a curve whose weight
    is ``log(flops / lo) / log(hi / lo)`` between its points ``lo`` and ``hi``, as the scalar
    :meth:`~meshtune.hardware.compute.GemmEfficiency.efficiency` computes it."""
    import numpy as np

    model = profile.gemm_efficiency
    rate = profile.effective_flops_per_s
    if model is None:
        times: FloatArray = flops / rate
        return times
    curve = model.curve
    if not curve:
        return model.overhead_s + flops / (rate * 1.0)
    values = np.array([p.efficiency for p in curve], dtype=np.float64)
    if len(curve) == 1:
        efficiency = np.full(np.shape(flops), values[0])
    else:
        points = np.array([p.flops for p in curve], dtype=np.float64)
        # Segment from points[upper - 1] to points[upper]: the first point at or above flops.
        upper = np.clip(np.searchsorted(points, flops, side="left"), 1, len(curve) - 1)
        lo, hi = points[upper - 1], points[upper]
        weight = np.log(flops / lo) / np.log(hi / lo)
        inside = values[upper - 1] + weight * (values[upper] - values[upper - 1])
        efficiency = np.where(
            flops <= points[0], values[0], np.where(flops > points[-1], values[-1], inside)
        )
    return model.overhead_s + flops / (rate * efficiency)
