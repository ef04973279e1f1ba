"""One split of the cluster, ``chips = DP · PP · P_r · P_c``, priced by the step model.

The search (:mod:`meshtune.search.levels`) enumerates splits; this module holds what it asks
for (:class:`ClusterOptions`) and prices one split from its costed mesh level
(:func:`cluster_candidate`, a call of :func:`meshtune.step.price_step`): no formula lives
here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import NamedTuple, cast

from meshtune.cost.compute import DEFAULT_PRECISION, PRECISIONS, Precision, at_precision
from meshtune.errors import InfeasibleError
from meshtune.layers import FcLayer, fc_layers
from meshtune.mesh import Mesh
from meshtune.search.costing import MeshLevel
from meshtune.search.padding import padding_waste
from meshtune.search.phase2 import MeshResult, flop_utilization
from meshtune.specs import HardwareProfile, ModelSpec
from meshtune.step import (
    ATTENTION_KINDS,
    DEFAULT_ATTENTION,
    AttentionKind,
    StepCost,
    StepOptions,
    StepSplit,
    price_step,
)
from meshtune.step.cp import CP_COMMS, CpComm
from meshtune.step.memory import RECOMPUTE_MODES, MemoryBreakdown, Recompute, usable_bytes
from meshtune.step.model import GRAD_ACCUMULATIONS, GradAccumulation, Zero
from meshtune.step.pipeline import SCHEDULES, Schedule

ZERO_STAGES: tuple[Zero, ...] = (0, 1, 2, 3)
DEFAULT_HEADROOM = 0.1


@dataclass(frozen=True)
class ClusterOptions:
    """The levels the user pinned (``None``: searched) and the memory policy.

    ``zero1`` is the older spelling of ``zero=1``; ``vpp`` the virtual stages per chip of the
    interleaved schedule (1: plain 1F1B); ``ep`` the expert-parallel ranks of a MoE model and
    ``cp`` the context-parallel ranks (:mod:`meshtune.search.experts`); ``headroom`` the
    fraction of memory a plan leaves free; ``attention`` the attention kernel (``"fused"``:
    FlashAttention, ``"plain"``); ``dropout``, ``grad_overlap``, ``fp32_grads``,
    ``grad_accumulation``, ``grad_all_reduce``, ``zero3_recompute_gather``, ``cp_comm``,
    ``schedule``, ``precision`` and ``block_overhead_s`` as in
    :class:`~meshtune.step.model.StepOptions` (DualPipe restricts the splits:
    :func:`meshtune.step.pipeline.dualpipe_legal`); ``block_overhead_s`` is 0 unless the
    plan names an engine (``plan --engine``) or a validation run does.
    """

    dp: int | None = None
    pp: int | None = None
    micro_batches: int | None = None
    zero1: bool = False
    recompute: Recompute = "selective"
    zero: int | None = None
    vpp: int | None = None
    headroom: float = DEFAULT_HEADROOM
    attention: AttentionKind = DEFAULT_ATTENTION
    dropout: bool = False
    grad_overlap: bool = True
    fp32_grads: bool = True
    ep: int | None = None
    cp: int | None = None
    grad_accumulation: GradAccumulation = "fused"
    grad_all_reduce: bool = False
    zero3_recompute_gather: bool = False
    cp_comm: CpComm = "ring"
    schedule: Schedule = "1f1b"
    precision: Precision = DEFAULT_PRECISION
    block_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("dp", "pp", "micro_batches", "vpp", "ep", "cp"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InfeasibleError(f"{name} must be a whole number, got {value!r}")
            if value is not None and value < 1:
                raise InfeasibleError(f"{name} must be at least 1, got {value}")
        if self.recompute not in RECOMPUTE_MODES:
            raise InfeasibleError(
                f"recompute '{self.recompute}' is not one of {', '.join(RECOMPUTE_MODES)}"
            )
        if self.zero is not None and self.zero not in ZERO_STAGES:
            raise InfeasibleError(f"zero stage {self.zero!r} is not one of 0, 1, 2, 3")
        if self.zero1 and self.zero not in (None, 1):
            raise InfeasibleError(f"--zero1 means ZeRO stage 1, not {self.zero}")
        if not 0.0 <= self.block_overhead_s < math.inf:
            raise InfeasibleError(
                f"block overhead must be a finite number of seconds >= 0, "
                f"got {self.block_overhead_s!r}"
            )
        if not 0.0 <= self.headroom < 1.0:
            raise InfeasibleError(f"headroom must be in [0, 1), got {self.headroom!r}")
        if self.grad_accumulation not in GRAD_ACCUMULATIONS:
            raise InfeasibleError(
                f"gradient accumulation '{self.grad_accumulation}' is not one of "
                f"{', '.join(GRAD_ACCUMULATIONS)}"
            )
        if self.schedule not in SCHEDULES:
            raise InfeasibleError(
                f"pipeline schedule '{self.schedule}' is not one of {', '.join(SCHEDULES)}"
            )
        if self.cp_comm not in CP_COMMS:
            raise InfeasibleError(
                f"CP communication '{self.cp_comm}' is not one of {', '.join(CP_COMMS)}"
            )
        if self.precision not in PRECISIONS:
            raise InfeasibleError(
                f"precision '{self.precision}' is not one of {', '.join(PRECISIONS)}"
            )
        if self.attention not in ATTENTION_KINDS:
            raise InfeasibleError(
                f"attention '{self.attention}' is not one of {', '.join(ATTENTION_KINDS)}"
            )

    def zero_stages(self) -> tuple[Zero, ...]:
        """The ZeRO stages to search: the pinned one, or all four."""
        if self.zero is not None:
            return (cast(Zero, self.zero),)
        return (1,) if self.zero1 else ZERO_STAGES

    def step_options(self, zero: Zero) -> StepOptions:
        """The step model's options at ZeRO stage ``zero``: every other field of
        :class:`StepOptions` is this object's field of the same name (``causal`` aside, which
        the search leaves at its default), so a new step option cannot be dropped here
        (cached: the search asks for them once per split)."""
        return _step_options(self, zero)


@lru_cache(maxsize=256)
def _step_options(options: ClusterOptions, zero: Zero) -> StepOptions:
    """:meth:`ClusterOptions.step_options`, built."""
    return StepOptions(
        zero=zero,
        **{
            f.name: getattr(options, f.name)
            for f in fields(StepOptions)
            if f.name not in ("zero", "causal")
        },
    )


@dataclass(frozen=True)
class ClusterCandidate:
    """One costed DP × PP × mesh × micro-batch × v × ZeRO configuration."""

    dp: int
    pp: int
    micro_batches: int
    micro_batch: int
    vpp: int
    zero: Zero
    result: MeshResult
    cost: StepCost
    flops: float
    padding_waste: float
    ep: int = 1
    cp: int = 1
    precision: Precision = DEFAULT_PRECISION

    @property
    def step(self) -> StepSplit:
        """The step split by cause."""
        return self.cost.split

    @property
    def step_s(self) -> float:
        """The step time (:class:`~meshtune.step.StepSplit` sum)."""
        return self.cost.step_s

    def mfu(self, profile: HardwareProfile) -> float:
        """Model FLOP utilization of the step (:meth:`meshtune.step.StepCost.mfu`)."""
        return self.cost.mfu(profile)

    def hfu(self, profile: HardwareProfile) -> float:
        """Hardware FLOP utilization of the step (:meth:`meshtune.step.StepCost.hfu`)."""
        return self.cost.hfu(profile)

    @property
    def tokens_per_s(self) -> float:
        """Tokens of the step per second."""
        return self.cost.tokens_per_s

    @property
    def memory(self) -> MemoryBreakdown:
        """Memory per chip of the fuller end stage."""
        return self.cost.memory

    @property
    def stage_blocks(self) -> int:
        """The most blocks one chip holds."""
        return self.cost.layout.most

    @property
    def dp_reduction_s(self) -> float:
        """The whole DP reduction before overlap."""
        return self.cost.dp_reduction_s

    @property
    def mesh(self) -> Mesh:
        """The tensor-parallel mesh."""
        return self.result.mesh

    @property
    def chips(self) -> int:
        """DP · PP · CP · P_r · P_c."""
        return self.dp * self.pp * self.cp * self.mesh.chips

    def utilization(self, profile: HardwareProfile) -> float:
        """Exact FC FLOPs of the step / (step time · chips · peak), as in §5.1.1; the peak of
        the FC GeMMs' precision (:func:`~meshtune.cost.compute.at_precision`)."""
        peak = at_precision(profile, self.precision).peak_flops_per_s
        return flop_utilization(self.flops, self.step.step_s, self.chips, peak)

    @property
    def label(self) -> str:
        """``DP 4 × PP 2 × 32x8, 8 micro-batches``."""
        return (
            f"DP {self.dp} × PP {self.pp}{f' (v {self.vpp})' if self.vpp > 1 else ''} × "
            f"{self.mesh.label}, {self.micro_batches} "
            f"micro-batch{'es' if self.micro_batches > 1 else ''}"
            + (f", ZeRO-{self.zero}" if self.zero else "")
            + (f", EP {self.ep}" if self.ep > 1 else "")
            + (f", CP {self.cp}" if self.cp > 1 else "")
        )


def step_flops(model: ModelSpec, batch: int, seq_len: int) -> float:
    """Exact FC FLOPs of one training step, all chips: blocks · Σ 3 · 2 · tokens · in · out."""
    layers = fc_layers(model, batch, seq_len)
    return float(model.blocks * sum(3 * layer.flops_per_pass for layer in layers))


def cluster_candidate(
    model: ModelSpec,
    profile: HardwareProfile,
    level: MeshLevel,
    *,
    batch: int,
    seq_len: int,
    dp: int,
    pp: int,
    micro_batches: int,
    options: ClusterOptions,
    vpp: int = 1,
    zero: Zero | None = None,
    ep: int = 1,
    cp: int = 1,
    exact: Sequence[FcLayer] | None = None,
    flops: float | None = None,
) -> ClusterCandidate:
    """Price one split from its mesh level (feasible, costed at ``micro_batch = batch / (dp ·
    micro_batches)`` sequences, padded) with :func:`meshtune.step.price_step`. ``zero``
    defaults to the first stage ``options`` allow; ``ep`` and ``cp`` are the expert- and
    context-parallel degrees (the level costed at ``seq_len / cp`` tokens a sequence).
    ``exact`` (the micro-batch's exact FC layers, ``fc_layers(model, micro_batch, seq_len /
    cp, ep)``) and ``flops`` (:func:`step_flops`), when the caller has them (the search prices
    many splits of one micro-batch and one step)."""
    stage = options.zero_stages()[0] if zero is None else zero
    micro_batch = batch // (dp * micro_batches)
    if exact is None:
        exact = fc_layers(model, micro_batch, seq_len // cp, ep)
    cost = price_step(
        model,
        profile,
        level.fc,
        batch=batch,
        seq_len=seq_len,
        dp=dp,
        pp=pp,
        micro_batches=micro_batches,
        vpp=vpp,
        options=options.step_options(stage),
        exact_layers=exact,
        ep=ep,
        cp=cp,
    )
    return ClusterCandidate(
        dp=dp,
        pp=pp,
        micro_batches=micro_batches,
        micro_batch=micro_batch,
        vpp=vpp,
        zero=stage,
        result=level.result,
        cost=cost,
        flops=step_flops(model, batch, seq_len) if flops is None else flops,
        padding_waste=padding_waste(exact, level.fc.layers),
        ep=ep,
        cp=cp,
        precision=options.precision,
    )


class Rejection(NamedTuple):
    """A split over the memory capacity: the bytes it needs and how to write its label and
    price its memory (whose total is ``total_bytes``); both only when shown
    (:func:`first_reasons`: most never are; a named tuple, as a large search makes tens of
    thousands)."""

    total_bytes: float
    shown: Callable[[], tuple[str, MemoryBreakdown]]

    @classmethod
    def of(cls, label: str, memory: MemoryBreakdown) -> Rejection:
        """The rejection of a split whose memory is already priced."""
        return cls(memory.total_bytes, lambda: (label, memory))

    def reason(self, capacity: float | None, headroom: float) -> str:
        """``label: why`` (:func:`over_capacity`)."""
        label, memory = self.shown()
        return f"{label}: {over_capacity(memory, capacity, headroom)}"


def first_reasons(
    rejections: Sequence[Rejection], count: int, capacity: float | None, headroom: float
) -> list[str]:
    """The reasons of the first ``count`` rejections in (bytes, reason) order, writing only
    those of the rejections that need no more bytes than the ``count``-th least."""
    if not rejections:
        return []
    limit = sorted(r.total_bytes for r in rejections)[min(count, len(rejections)) - 1]
    shown = sorted(
        (r.total_bytes, r.reason(capacity, headroom)) for r in rejections if r.total_bytes <= limit
    )
    return [reason for _, reason in shown[:count]]


def fits(memory: MemoryBreakdown, capacity: float | None, headroom: float = 0.0) -> bool:
    """Whether ``memory`` fits in ``capacity · (1 − headroom)`` bytes (always without a
    capacity)."""
    return capacity is None or memory.total_bytes <= usable_bytes(capacity, headroom)


def over_capacity(
    memory: MemoryBreakdown, capacity: float | None, headroom: float = 0.0
) -> str | None:
    """Why ``memory`` does not fit in ``capacity · (1 − headroom)`` bytes (naming the biggest
    term), or None."""
    if capacity is None or fits(memory, capacity, headroom):
        return None
    name, size = memory.biggest()
    kept = f" less the {headroom:.0%} headroom" if headroom else ""
    return (
        f"needs {memory.total_bytes / 2**30:.1f} GiB per chip, over the "
        f"{capacity / 2**30:.1f} GiB capacity{kept}; biggest term {name} {size / 2**30:.1f} GiB"
    )
