"""The record of a priced step (:func:`meshtune.step.model.price_step`): its time split by
cause, which sums to the step, and the figures derived from it (MFU and HFU as Korthikanti et
al. 2022 §6 define them, tokens/s, the DP reduction before overlap)."""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.hardware.profile import HardwareProfile
from meshtune.step.memory import MemoryBreakdown
from meshtune.step.pipeline import StageLayout


@dataclass(frozen=True)
class StepSplit:
    """One training step's time by cause (seconds); :attr:`step_s` is their sum.

    fc: FC GeMMs (their exposed TP communication included, ``tp_exposed_s`` of it); attention:
    the attention core; other: memory-bound work, embedding, LM head and loss; recompute;
    bubble; send_recv: stage-to-stage sends outside the bubble; dp_exposed: DP / ZeRO traffic
    not hidden; optimizer: the optimizer step and the gradient-norm read. ``ep_exposed_s``
    (the EP all-to-alls, :mod:`meshtune.step.moe`) and ``cp_exposed_s`` (the CP K/V ring not
    hidden by attention, :mod:`meshtune.step.cp`) are parts of ``other_s``, not summed.
    """

    fc_s: float
    recompute_s: float
    bubble_s: float
    send_recv_s: float
    dp_exposed_s: float
    attention_s: float = 0.0
    other_s: float = 0.0
    optimizer_s: float = 0.0
    tp_exposed_s: float = 0.0
    ep_exposed_s: float = 0.0
    cp_exposed_s: float = 0.0

    @property
    def step_s(self) -> float:
        """Σ of every field but ``tp_exposed_s`` (part of ``fc_s``), ``ep_exposed_s`` and
        ``cp_exposed_s`` (parts of ``other_s``)."""
        return (
            self.fc_s
            + self.recompute_s
            + self.bubble_s
            + self.send_recv_s
            + self.dp_exposed_s
            + self.attention_s
            + self.other_s
            + self.optimizer_s
        )


@dataclass(frozen=True)
class StepCost:
    """The priced step: split by cause, memory of the fuller end stage, FLOPs, layout, the DP
    reduction of one block's bucket and of the ends', and the blocks of the chip that sets the
    pace."""

    split: StepSplit
    memory: MemoryBreakdown
    layout: StageLayout
    model_flops: float
    hardware_flops: float
    dp_block_s: float
    dp_end_s: float
    chips: int
    tokens: int
    pace_blocks: int = 1
    bubble_fraction: float = 0.0
    copies: int = 1

    @property
    def dp_reduction_s(self) -> float:
        """The whole DP reduction before overlap: the most blocks' buckets (of both copies
        under DualPipe) and the ends'."""
        return self.copies * self.layout.most * self.dp_block_s + self.dp_end_s

    @property
    def step_s(self) -> float:
        """The step time."""
        return self.split.step_s

    def mfu(self, profile: HardwareProfile) -> float:
        """Model FLOPs / (step · chips · peak) (Korthikanti et al. 2022 §6)."""
        return self.model_flops / (self.step_s * self.chips * profile.peak_flops_per_s)

    def hfu(self, profile: HardwareProfile) -> float:
        """Hardware FLOPs (recompute included) / (step · chips · peak)."""
        return self.hardware_flops / (self.step_s * self.chips * profile.peak_flops_per_s)

    @property
    def tokens_per_s(self) -> float:
        """Tokens of the step / step time."""
        return self.tokens / self.step_s

    @property
    def flops_per_chip_s(self) -> float:
        """Model FLOPs per chip per second."""
        return self.model_flops / (self.step_s * self.chips)
