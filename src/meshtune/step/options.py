"""The step's options: how a step is run (:class:`StepOptions`) and what the cluster search is
asked for (:class:`ClusterOptions`: the levels the user pinned, the memory policy and the step's
options)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Literal, cast

from meshtune.cost.compute import DEFAULT_PRECISION, PRECISIONS, Precision
from meshtune.errors import InfeasibleError
from meshtune.step.cp import CP_COMMS, CpComm
from meshtune.step.memory import (
    RECOMPUTE_MODES,
    Recompute,
)
from meshtune.step.pipeline import (
    SCHEDULES,
    Schedule,
)
from meshtune.step.work import ATTENTION_KINDS, DEFAULT_ATTENTION, AttentionKind

Zero = Literal[0, 1, 2, 3]


GradAccumulation = Literal["fused", "separate"]


GRAD_ACCUMULATIONS: tuple[GradAccumulation, ...] = ("fused", "separate")


@dataclass(frozen=True)
class StepOptions:
    """How the step is run: ZeRO stage, recompute, attention kernel, causal mask, dropout
    (attention and hidden, :func:`~meshtune.step.work.attention_core`), and whether the DP
    gradient reduction overlaps the backward pass (``grad_overlap``: PyTorch DDP / FSDP,
    Megatron-Core's ``--overlap-grad-reduce``) or starts after it (Megatron-LM before 2023,
    DeepSpeed's pipeline engine); ``fp32_grads``: gradients accumulated and reduced in fp32
    (Megatron-LM under ``--bf16`` unless ``--grad-reduce-in-bf16``; Llama 3 §3.3.2), else in
    the operand width. ``grad_accumulation``: ``"fused"`` when the weight-gradient GeMMs add
    into the gradient buffer themselves (Megatron's ``--gradient-accumulation-fusion``, on by
    default since 2022), ``"separate"`` when every micro-batch's gradients are added into it by
    a memory-bound pass (:func:`~meshtune.step.work.grad_accumulation_s`: DeepSpeed's BF16
    optimizer, PyTorch autograd). ``grad_all_reduce``: under ZeRO-1/2 the gradients are still
    all-reduced whole, and the updated weights all-gathered after the sharded optimizer step
    (DeepSpeed's pipeline engine with its BF16 optimizer: ``_bf16_reduce_grads`` all-reduces
    the fp32 gradient buffer, microsoft/DeepSpeed deepspeed/runtime/pipe/engine.py; its
    ``update_lp_params`` all-gathers the bf16 weights), instead of reduce-scattered.
    ``zero3_recompute_gather``: under ZeRO-3 with full recompute the recomputed forward
    all-gathers each block's weights again (DeepSpeed ZeRO-3) instead of running on the
    backward pass's gather (PyTorch FSDP): :func:`~meshtune.step.comms.fsdp_exposed`.
    ``cp_comm``: how context parallelism moves K and V, ``"ring"`` (Megatron-Core, overlapped
    with attention) or ``"all-gather"`` (Llama 3, exposed): :mod:`meshtune.step.cp`.
    ``schedule``: the pipeline schedule, ``"1f1b"`` (interleaved when v > 1) or ``"dualpipe"``
    (DeepSeek-V3: :mod:`meshtune.step.pipeline`; the module docstring says what it changes).
    ``precision``: ``"fp8"`` runs the FC GeMMs at the profile's FP8 rates and keeps state,
    activations and the MoE dispatch as FP8 training does (:mod:`meshtune.step.precision`).
    ``block_overhead_s``: host time per block and micro-batch that the GPU waits for (forward,
    recompute and backward together), added to every block's time on the critical path, so a
    1F1B step gains ``(m + (pp − 1)/v) · n · block_overhead_s`` for ``n`` blocks on the pace
    chip; 0 for engines whose host work hides behind the GPU's (Megatron-LM). The validation
    set prices it for Megatron-DeepSpeed's engine, measured on runs outside the set
    (:mod:`meshtune.validation.engines`)."""

    zero: Zero = 0
    recompute: Recompute = "selective"
    attention: AttentionKind = "fused"
    causal: bool = True
    dropout: bool = False
    grad_overlap: bool = True
    fp32_grads: bool = True
    grad_accumulation: GradAccumulation = "fused"
    grad_all_reduce: bool = False
    zero3_recompute_gather: bool = False
    cp_comm: CpComm = "ring"
    schedule: Schedule = "1f1b"
    precision: Precision = DEFAULT_PRECISION
    block_overhead_s: float = 0.0


DEFAULT_OPTIONS = StepOptions()


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
    :class:`~meshtune.step.options.StepOptions` (DualPipe restricts the splits:
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
