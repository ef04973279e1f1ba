"""Lower bounds of a split's memory and step, priced with the step model's own functions.

The cluster search (:mod:`meshtune.search`) enumerates splits ``(dp, pp, micro_batches, vpp)``
and drops or skips them by these bounds before any mesh is costed; a bound that stopped being
one would drop the best plan, so each is the step model's formula at a cheaper argument, never
a copy of it:

* **memory**: :func:`fitting_zero` prices a split's memory without communication buffers
  (which only add) and keeps the lowest allowed ZeRO stage that fits (:func:`fitting_zeros`:
  every split at once, as arrays, the same floats);
* **step**: :func:`lower_bound` prices the step with :func:`~meshtune.step.model.step_time` on
  the FC layers' compute time alone (:func:`compute_fc`: no TP communication), the DP tail at
  its floor (the reductions themselves), a lower bound of every mesh's step; with the slope
  that bounds how fast the step grows with one block's FC time (the pace is the slowest chip's
  time, at least the time of the chip that sets it in the bound, which grows by ``slots · its
  blocks`` per second of block time,
  :func:`~meshtune.step.pipeline.pipeline_slots`), and under ZeRO-3 a floor of the step at any
  block time (its exposed gathers, :func:`~meshtune.step.model.zero3_exposed`). Every split
  of one (micro-batch, TP, CP, EP) shares that bound's block work (:func:`bound_work`);
* **cheaper floors** of that bound, to order and skip splits with no step priced: the quick
  bound (:func:`pipeline_spans`: the pipeline of the FC compute alone) and
  :func:`budget_ceiling`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from meshtune.cost.compute import at_precision
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec
from meshtune.ranks import ranks
from meshtune.step.block import BlockFc, BlockWork, block_work
from meshtune.step.memory import MemoryBreakdown, fits, in_flight, usable_bytes
from meshtune.step.memory_terms import SplitMemory
from meshtune.step.model import step_time, zero3_exposed
from meshtune.step.options import ZERO_STAGES, ClusterOptions, Zero
from meshtune.step.pipeline import (
    Schedule,
    bubble_in_slots,
    model_copies,
    pipeline_slots,
    stage_extremes,
    stage_layout,
)

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray
    from meshtune.ranks import IntArray


@dataclass(frozen=True)
class Bound:
    """A split's lower bound: ``step ≥ step_s + slope · (t − block_s)`` for every mesh whose
    block FC time is ``t ≥ block_s`` (one micro-batch), and ``step ≥ floor_s`` at every
    ``t`` (ZeRO-3's gathers: :func:`lower_bound`)."""

    step_s: float
    block_s: float
    slope: float
    floor_s: float = 0.0

    def beaten(self, best_s: float) -> bool:
        """Whether no mesh's step can be below ``best_s``."""
        return self.step_s >= best_s or self.floor_s >= best_s

    def budget(self, best_s: float) -> float:
        """The largest block FC time that could still beat ``best_s`` (any, with no slope)."""
        if self.slope <= 0.0:
            return math.inf
        return self.block_s + (best_s - self.step_s) / self.slope


NO_STAGE = -1
""":func:`fitting_zeros`' stage of a split no ZeRO stage fits."""


def zero_stages(dp: int, options: ClusterOptions) -> tuple[Zero, ...]:
    """The ZeRO stages :func:`fitting_zero` tries for a split of ``dp`` replicas, in order:
    with dp = 1 every stage is the same, so stage 0 if allowed; with dp > 1 and no pinned
    stage, stage 0 is skipped (stage 1 moves the bytes of stage 0 and holds less)."""
    stages = options.zero_stages()
    if dp == 1 and 0 in stages:
        return (0,)
    if dp > 1 and options.zero is None and not options.zero1:
        return stages[1:]
    return stages


def split_memory(
    model: ModelSpec, profile: HardwareProfile, seq_len: int, options: ClusterOptions
) -> SplitMemory:
    """The :class:`~meshtune.step.memory_terms.SplitMemory` of :func:`fitting_zero` for
    sequences of ``seq_len`` tokens on one CP rank."""
    return SplitMemory(
        model,
        seq_len=seq_len,
        bytes_per_element=profile.bytes_per_element,
        recompute=options.step.recompute,
        attention=options.step.attention,
        precision=options.step.precision,
        copies=model_copies(options.step.schedule),
    )


def fitting_zero(
    model: ModelSpec,
    profile: HardwareProfile,
    split: tuple[int, int, int, int],
    *,
    micro_batch: int,
    block_params: int,
    tp: int,
    seq_len: int,
    options: ClusterOptions,
    terms: SplitMemory | None = None,
) -> tuple[Zero | None, MemoryBreakdown]:
    """The lowest allowed ZeRO stage whose memory (no buffers) fits, else None, and the memory
    of the last stage tried. With dp = 1 every stage is the same: stage 0 if allowed. When the
    first stage's activations alone pass the capacity, no stage fits and only the last is
    priced. ``block_params``: Σ in·out of one block's exact FC layers
    (:func:`~meshtune.step.memory.block_parameters`); ``terms``: :func:`split_memory` of the same
    inputs, when the caller shares one between splits (the memory is
    :func:`~meshtune.step.memory.memory_per_chip`'s of those layers either way)."""
    dp, pp, m, vpp = split
    stages = zero_stages(dp, options)
    terms = terms or split_memory(model, profile, seq_len, options)
    most = stage_layout(model.blocks, pp, vpp).most
    kept = terms.activations(  # the first stage's, a part of every stage's total
        micro_batch, tp, most * in_flight(m, pp, vpp, terms.copies)
    )
    if not fits(
        MemoryBreakdown(0.0, 0.0, 0.0, kept, 0.0), profile.memory_bytes, options.step.headroom
    ):
        stages = stages[-1:]  # none fits: only the last stage is priced, for its reason
    for zero in stages:
        memory = terms.memory(
            block_params,
            micro_batch=micro_batch,
            dp=dp,
            pp=pp,
            tp=tp,
            stage_blocks=most,
            micro_batches=m,
            zero=zero,
            vpp=vpp,
        )
        if fits(memory, profile.memory_bytes, options.step.headroom):
            return zero, memory
    return None, memory


def fitting_zeros(
    model: ModelSpec,
    profile: HardwareProfile,
    found: tuple[IntArray, IntArray, IntArray, IntArray],
    *,
    chips: int,
    batch: int,
    options: ClusterOptions,
    terms: SplitMemory,
    block_params: Mapping[int, int],
    cp: int = 1,
) -> tuple[IntArray, FloatArray]:
    """:func:`fitting_zero`'s stage of every split of the columns ``found`` (dp, pp,
    micro-batches, v) on ``chips`` chips (TP = chips / (dp · pp · cp); ZeRO shards over the
    dp · cp ranks) and a batch of ``batch`` sequences (micro-batch batch / (dp · m)), at array
    speed: each stage's totals of every split that tries it
    (:meth:`~meshtune.step.memory_terms.SplitMemory.totals`, the same floats as
    :meth:`~meshtune.step.memory_terms.SplitMemory.memory`), the first that fits kept. The
    activations-only shortcut of :func:`fitting_zero` is not needed: a total holds the first
    stage's activations, so it fits only when they do. ``block_params``: micro-batch size →
    :func:`~meshtune.step.memory.block_parameters` of its block. Returns the stages
    (:data:`NO_STAGE`: none fits) and the total bytes of the stage each split was last priced
    at (that of its stage, or of the last stage tried)."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    dp, pp, m, vpp = found
    chosen = np.full(len(dp), NO_STAGE, dtype=np.int64)
    last = np.zeros(len(dp))
    if not len(dp):
        return chosen, last
    micro, tp = batch // (dp * m), chips // (dp * pp * cp)
    dp = dp * cp
    most, _ = stage_extremes(model.blocks, pp, vpp)
    sizes, which = ranks(micro)
    params = np.array([block_params[int(b)] for b in sizes], dtype=np.int64)[which]
    tried = [zero_stages(d, options) for d in (1, 2)]  # dp = 1, dp > 1
    waiting = np.ones(len(dp), dtype=bool)
    usable = (
        math.inf
        if profile.memory_bytes is None
        else usable_bytes(profile.memory_bytes, options.step.headroom)
    )
    for zero in ZERO_STAGES:
        at = waiting & np.where(dp == 1, zero in tried[0], zero in tried[1])
        if not at.any():
            continue
        (index,) = np.nonzero(at)
        totals = terms.totals(
            params[index],
            micro_batch=micro[index],
            dp=dp[index],
            pp=pp[index],
            tp=tp[index],
            stage_blocks=most[index],
            micro_batches=m[index],
            zero=zero,
            vpp=vpp[index],
        )
        last[index] = totals
        fit = index[totals <= usable]
        chosen[fit] = zero
        waiting[fit] = False
    return chosen, last


def fc_compute_s(exact: Sequence[FcLayer], tp: int, profile: HardwareProfile) -> float:
    """One pass of one block's FC layers at the chip's FLOP rate: ``Σ 2·T·in·out / (tp · F)``,
    a lower bound of each pass's time on any mesh of ``tp`` chips."""
    return sum(layer.flops_per_pass for layer in exact) / (tp * profile.effective_flops_per_s)


@overload
def fc_block_s(compute_s: float) -> float: ...


@overload
def fc_block_s(compute_s: FloatArray) -> FloatArray: ...


def fc_block_s(compute_s: float | FloatArray) -> float | FloatArray:
    """A block's FC time, forward and backward, at ``compute_s`` a pass (:func:`compute_fc`:
    the backward's two passes, data and weight gradients): ``3 · compute_s``, the block FC
    time of :func:`lower_bound` (its ``Bound.block_s``) and a lower bound of every mesh's."""
    return 3 * compute_s


def compute_fc(
    exact: Sequence[FcLayer], tp: int, profile: HardwareProfile, options: ClusterOptions
) -> BlockFc:
    """The mesh level of :func:`lower_bound`: the FC layers at their compute time alone on
    ``tp`` chips (no TP communication), at the FC GeMMs' precision."""
    compute = fc_compute_s(exact, tp, at_precision(profile, options.step.precision))
    return BlockFc(tp, compute, 2 * compute, 0.0, tuple(exact), tp)


def block_floor_s(work: BlockWork) -> float:
    """One block's time on a chip of :func:`lower_bound`'s pipeline, one micro-batch, at
    least: its ``work``'s forward, backward and separate accumulation (the block overhead and
    ZeRO-3's exposed gathers only add); :func:`pipeline_spans`' span times it is at most that
    bound's step, a tighter floor than the quick bound."""
    return work.forward_s + work.backward_s + work.accumulation_s


def pipeline_spans(
    model: ModelSpec, pp: IntArray, m: IntArray, vpp: IntArray, schedule: Schedule = "1f1b"
) -> tuple[FloatArray, FloatArray]:
    """Two factors of one block's time per split (columns ``pp``, ``m``, ``vpp``):

    * the span, of a cheap, loose lower bound of the step (looser than :func:`lower_bound`):
      the pipeline of that time alone, ``pipeline_slots · most blocks`` (the chip with the
      most blocks is never faster than the pace); where the bubble is not whole slots
      (:func:`~meshtune.step.pipeline.bubble_in_slots`: DualPipe) m slots. The split's quick
      bound is ``span · fc_block_s(compute)`` (:func:`fc_block_s`);
    * the slope, at most that of the split's :func:`lower_bound`: ``pipeline_slots · the
      fewest blocks of a chip``; 0 where the bubble is not whole slots (that bound has no
      slope)."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    most, fewest = stage_extremes(model.blocks, pp, vpp)
    if not bubble_in_slots(schedule):
        return (m * most).astype(np.float64), np.zeros(len(m))
    slots = pipeline_slots(pp, m, vpp)
    return slots * most, slots * fewest


# Relative slack of budget_ceiling against rounding: the exact budget and the ceiling are each a
# few roundings away from their real values, far less than this.
BUDGET_SLACK = 1e-6


def budget_ceiling(*, quick: float, block_s: float, slope: float, best_s: float) -> float:
    """At least :meth:`Bound.budget` of ``best_s`` for a split's :func:`lower_bound` (whose
    ``block_s`` is given), with no step priced: that bound's step is at least ``quick`` (the
    split's quick bound, or a tighter floor: :func:`block_floor_s`) and its slope at least
    ``slope`` (:func:`pipeline_spans`), so its budget is at most ``block_s + (best_s − quick)
    / slope``, raised by ``BUDGET_SLACK``; inf when ``best_s`` is, and with no slope."""
    if slope == 0.0 or best_s == math.inf:
        return math.inf
    return (block_s + max(0.0, best_s - quick) / slope) * (1 + BUDGET_SLACK)


def budget_ceilings(
    *, quick: FloatArray, block_s: float, slope: FloatArray, best_s: float
) -> FloatArray:
    """:func:`budget_ceiling` of several splits sharing ``block_s`` (one micro-batch and TP
    size), as an array: the same float operations element by element, so the same values."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    if best_s == math.inf:
        return np.full(len(quick), math.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        ceiling = (block_s + np.maximum(0.0, best_s - quick) / slope) * (1 + BUDGET_SLACK)
    found: FloatArray = np.where(slope == 0.0, math.inf, ceiling)
    return found


def bound_work(
    model: ModelSpec,
    profile: HardwareProfile,
    exact: Sequence[FcLayer],
    *,
    tp: int,
    micro_batch: int,
    seq_len: int,
    options: ClusterOptions,
    ep: int = 1,
    cp: int = 1,
) -> BlockWork:
    """The block work (:func:`~meshtune.step.block.block_work`) of :func:`compute_fc`, the same
    for every split of one (micro-batch, TP, CP, EP) and every ZeRO stage."""
    return block_work(
        model,
        profile,
        compute_fc(exact, tp, profile, options),
        micro_batch=micro_batch,
        seq_len=seq_len,
        cp=cp,
        ep=ep,
        options=options.step,
    )


def lower_bound(
    model: ModelSpec,
    profile: HardwareProfile,
    exact: Sequence[FcLayer],
    split: tuple[int, int, int, int],
    *,
    tp: int,
    batch: int,
    seq_len: int,
    zero: Zero,
    options: ClusterOptions,
    ep: int = 1,
    cp: int = 1,
    work: BlockWork | None = None,
) -> Bound:
    """The :class:`Bound` of the module docstring. ZeRO-3's per-block gathers shrink as
    compute grows, so in the linear bound stage 3 is priced as stage 2 without its DP tail;
    its ``floor_s`` adds them at the compute-only block on the chip that sets that bound's
    pace (1F1B: the step is ``slots · (pace chip + sends)`` plus the DP tail and the
    optimizer), less ``BUDGET_SLACK`` against rounding. Where the bubble is not whole slots
    (:func:`~meshtune.step.pipeline.bubble_in_slots`: DualPipe's shrinks as the
    weight-gradient GeMMs grow, and its step stops growing with the block's compute while the
    hidden communication takes longer) the bound is the step without its bubble, with no
    slope. ``work``: :func:`bound_work` of the same inputs, when the caller has it."""
    dp, pp, m, vpp = split
    fc = compute_fc(exact, tp, profile, options)
    work = work or bound_work(
        model,
        profile,
        exact,
        tp=tp,
        micro_batch=batch // (dp * m),
        seq_len=seq_len,
        options=options,
        ep=ep,
        cp=cp,
    )
    cost = step_time(  # the step's time alone: its memory and FLOPs are not needed here
        model,
        profile,
        fc,
        batch=batch,
        seq_len=seq_len,
        dp=dp,
        pp=pp,
        micro_batches=m,
        vpp=vpp,
        zero=2 if zero == 3 else zero,
        options=options.step,
        ep=ep,
        cp=cp,
        work=work,
    )
    floor = cost.dp_end_s + (cost.dp_block_s if zero < 3 else 0.0)
    step = cost.split.step_s - cost.split.dp_exposed_s + floor
    block_s = fc_block_s(fc.forward_s)
    if not bubble_in_slots(options.step.schedule):
        return Bound(step - cost.split.bubble_s, block_s, 0.0)
    slope = pipeline_slots(pp, m, vpp) * cost.pace_blocks
    floor_s = 0.0
    if zero == 3:
        # a block's time with its exposed gathers only grows with its compute (zero3_exposed),
        # so every mesh's step, slots · (the pace chip's time + sends) plus the DP floor, is at
        # least this one's with the gathers the compute-only block leaves exposed
        gathers = zero3_exposed(
            profile, work, tp=tp, dp=dp, pp=pp, cp=cp, ep=ep, zero=3, options=options.step
        )
        floor_s = (step + slope * gathers) * (1 - BUDGET_SLACK)
    return Bound(step, block_s, slope, floor_s)
