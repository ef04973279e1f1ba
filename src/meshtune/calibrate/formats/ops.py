"""The benchmarked ops: every spelling a log uses for one, and their ring arithmetic.

A log names its op in a benchmark binary (``all_gather_perf``), a heading (``Allgather``) or a
file name (``nccl_allgather.log``); :func:`op_from_name` and :func:`op_from_filename` read them
all through one table, :data:`OP_NAMES`. The ring arithmetic converts what a tool reports into
the cost model's terms (§3.2.2): ring steps, nccl-tests' bus bandwidth, and the per-rank shard.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from meshtune.calibrate.formats.records import UnusableFileError
from meshtune.hardware.calibration import MeasuredOp

OP_NAMES: dict[str, MeasuredOp] = {
    "allgather": MeasuredOp.ALL_GATHER,
    "reducescatter": MeasuredOp.REDUCE_SCATTER,
    "sendrecv": MeasuredOp.SEND_RECV,
    "latency": MeasuredOp.SEND_RECV,  # osu_latency: one message between two ranks
    "allreduce": MeasuredOp.ALL_REDUCE,
    "alltoall": MeasuredOp.ALL_TO_ALL,
}
"""Every spelling of a benchmarked op, lower-cased with everything but letters removed and a
trailing ``perf`` / ``perfmpi`` dropped (``all_gather_perf_mpi``, ``Allgather``,
``osu_allreduce``)."""


def op_key(name: str) -> str:
    """``name`` lower-cased, letters only, without a benchmark-binary suffix."""
    key = re.sub(r"[^a-z]", "", name.lower())
    for suffix in ("perfmpi", "perf"):
        key = key.removesuffix(suffix)
    return key.removeprefix("osu").removeprefix("nccl").removeprefix("mpi")


def op_from_name(name: str, where: str) -> MeasuredOp:
    """The op a benchmark name means (``all_gather_perf``, ``Allgather``, ``osu_allreduce``).

    Raises :class:`UnusableFileError` for a collective the cost model has no use for.
    """
    key = op_key(name)
    if key in OP_NAMES:
        return OP_NAMES[key]
    inside = {op for n, op in OP_NAMES.items() if n != "latency" and n in key}
    if len(inside) == 1:  # all_gather_ici, nccl_allreduce_bf16
        return inside.pop()
    known = ", ".join(op.value for op in MeasuredOp)
    raise UnusableFileError(
        f"{where}: benchmark '{name}' is not one the cost model uses (use {known})"
    )


def op_from_filename(path: str) -> MeasuredOp | None:
    """The op a file name mentions (``nccl_allgather.log``), or ``None`` if it names none or two."""
    key = re.sub(r"[^a-z]", "", PurePath(path).stem.lower())
    found = {op for name, op in OP_NAMES.items() if name != "latency" and name in key}
    return found.pop() if len(found) == 1 else None


def ring_steps(op: MeasuredOp, ranks: int) -> int:
    """Ring steps of one measured op: P − 1 for all-gather / reduce-scatter (and all-to-all:
    P − 1 exchanges of one shard each), 2(P − 1) for a ring all-reduce (a reduce-scatter then
    an all-gather), 1 for send/recv (one shift)."""
    if op is MeasuredOp.SEND_RECV:
        return 1
    if op is MeasuredOp.ALL_REDUCE:
        return 2 * (ranks - 1)
    return ranks - 1


def busbw_factor(op: MeasuredOp, ranks: int) -> float:
    """busbw / algbw as nccl-tests defines it: (P − 1)/P, 2(P − 1)/P (all-reduce), 1 (sendrecv)."""
    if op is MeasuredOp.SEND_RECV:
        return 1.0
    return ring_steps(op, ranks) / ranks


def shard_bytes_of(op: MeasuredOp, reported_bytes: float, ranks: int) -> float:
    """Per-rank shard from a size that counts the whole buffer (nccl-tests, OSU reduce-scatter).

    An all-gather's total is the gathered output, P shards; a reduce-scatter's total is each
    rank's input, P output shards; an all-reduce's buffer is cut into P shards, each
    reduce-scattered then all-gathered; an all-to-all's buffer holds one shard per rank; a
    send/recv message is one shard.
    """
    if op is MeasuredOp.SEND_RECV:
        return float(reported_bytes)
    return reported_bytes / ranks
