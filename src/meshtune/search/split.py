"""One split of the cluster, ``chips = DP · PP · P_r · P_c``, priced by the step model.

The search (:mod:`meshtune.search.levels`) enumerates splits; this module holds what it asks
for (:class:`ClusterOptions`) and prices one split from its costed mesh level
(:func:`cluster_candidate`, a call of :func:`meshtune.step.price_step`): no formula lives
here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from meshtune.cost.compute import DEFAULT_PRECISION, Precision, at_precision
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.search.costing import MeshLevel
from meshtune.search.padding import padding_waste
from meshtune.search.phase2 import MeshResult, flop_utilization
from meshtune.step import (
    StepCost,
    StepSplit,
    price_step,
)
from meshtune.step.memory import (
    MemoryBreakdown,
    over_capacity,
)
from meshtune.step.model import step_flops
from meshtune.step.options import ClusterOptions, Zero


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
    cp, ep)``) and ``flops`` (:func:`~meshtune.step.model.step_flops`), when the caller has
    them (the search prices many splits of one micro-batch and one step)."""
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
        zero=stage,
        options=options.step,
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
        precision=options.step.precision,
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
