"""The step's options, one record: how a training step runs (:class:`StepOptions`: every option
once, with its one default, its contract and what users see of it), and what the cluster
search is asked for (:class:`ClusterOptions`: the levels the user pins, ``None`` searched,
around one :class:`StepOptions`).

An option is one field of :class:`StepOptions`: its type (a ``Literal`` of its choices, or a
number whose ``Annotated`` bounds are its legal range), its default, its :func:`knob` (the
``meshtune plan`` help line and the plan file's description) and its docstring (the contract).
Everything else is generated from the field: ``meshtune plan``'s flag
(:mod:`meshtune.cli._options`), the plan file's and the validation row's field
(:class:`meshtune.plan.options.OptionFields`), the arguments that re-derive a plan
(:func:`option_args`) and its value check (:meth:`StepOptions.__post_init__`). Adding one is
that field, its cost term in the step model, and its test.

The levels a search runs at (DP, PP, micro-batches, v, ZeRO stage, EP, CP) are not options:
the step model takes them as arguments (``price_step(..., zero=...)``), so one record serves
every split of a search.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import cache
from typing import Annotated, Any, Literal, cast, get_args, get_origin, get_type_hints

from pydantic import Field as Bounds

from meshtune.cost.compute import Precision
from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import MAX_CHIPS
from meshtune.step.cp import CpComm
from meshtune.step.memory import Recompute
from meshtune.step.pipeline import Schedule
from meshtune.step.work import AttentionKind
from meshtune.units import MAX_DIMENSION, Latency

Zero = Literal[0, 1, 2, 3]

ZERO_STAGES: tuple[Zero, ...] = (0, 1, 2, 3)

GradAccumulation = Literal["fused", "separate"]

Fraction = Annotated[float, Bounds(ge=0, lt=1)]
"""A fraction in [0, 1)."""

KNOB = "knob"
"""The key of a field's :class:`Knob` in its ``dataclasses`` metadata."""


@dataclass(frozen=True)
class Knob:
    """What users see of one option: ``help``, its line in ``meshtune plan --help`` (``None``:
    no flag of its own); ``summary``, its description where files record it (plan files,
    validation rows); ``flags``, its command-line spelling when not the one
    :func:`option_flags` derives from its name; ``low`` and ``high``, the range the command
    line accepts (a number)."""

    help: str | None
    summary: str | None = None
    flags: tuple[str, ...] | None = None
    low: float | None = None
    high: float | None = None


def knob(
    help: str | None,
    *,
    summary: str | None = None,
    flags: tuple[str, ...] | None = None,
    low: float | None = None,
    high: float | None = None,
) -> dict[str, Knob]:
    """A record field's ``metadata``: its :class:`Knob`."""
    return {KNOB: Knob(help, summary, flags, low, high)}


@dataclass(frozen=True)
class StepOptions:
    """How a training step runs, whatever its split: every field an option with one default
    (the field's docstring states its contract and source). The value checks are
    :meth:`__post_init__`'s, from the field types."""

    recompute: Recompute = field(
        default="selective",
        metadata=knob("Activations kept for the backward pass.", summary="Recompute mode."),
    )
    """Activations recomputed in the backward pass instead of kept: ``"none"``,
    ``"selective"`` (the attention core's, Korthikanti et al. 2022 §4.2) or ``"full"`` (the
    whole block's forward): :mod:`meshtune.step.memory`."""

    headroom: Fraction = field(
        default=0.1,
        metadata=knob(
            "Fraction of each chip's memory a plan leaves free (fragmentation, workspaces).",
            summary="Memory left free.",
            low=0.0,
            high=0.99,
        ),
    )
    """The fraction of each chip's memory a plan leaves free (allocator fragmentation,
    workspaces): a split fits when its memory is within ``(1 − headroom) · capacity``."""

    attention: AttentionKind = field(
        default="fused",
        metadata=knob(
            "Attention kernel: fused (FlashAttention) or plain (scores in memory).",
            summary="Attention kernel: fused (FlashAttention) or plain (s x s scores in HBM).",
        ),
    )
    """The attention kernel: ``"fused"`` (FlashAttention: no ``s × s`` scores in memory,
    its forward run again in the backward) or ``"plain"``: :func:`~meshtune.step.work.
    attention_core`."""

    dropout: bool = field(
        default=False,
        metadata=knob(
            "Attention and hidden dropout on (their masks pass through memory).",
            summary="Attention and hidden dropout on.",
        ),
    )
    """Attention and hidden dropout on: their masks pass through memory
    (:func:`~meshtune.step.work.attention_core`, :func:`~meshtune.step.work.elementwise`)."""

    grad_overlap: bool = field(
        default=True,
        metadata=knob(
            "Overlap the DP gradient reduction with the backward pass (off: reduce after it).",
            summary="DP reduction overlaps the backward.",
        ),
    )
    """The DP gradient reduction overlaps the backward pass (PyTorch DDP / FSDP, Megatron-Core's
    ``--overlap-grad-reduce``), else starts after it (Megatron-LM before 2023, DeepSpeed's
    pipeline engine): :func:`~meshtune.step.comms.dp_exposed`."""

    fp32_grads: bool = field(
        default=True,
        metadata=knob(
            "Accumulate and reduce gradients in fp32 (Megatron-LM's default under bf16).",
            summary="Gradients reduced in fp32.",
        ),
    )
    """Gradients accumulated and reduced in fp32 (Megatron-LM under ``--bf16`` unless
    ``--grad-reduce-in-bf16``; Llama 3 §3.3.2), else in the operand width."""

    grad_accumulation: GradAccumulation = field(
        default="fused",
        metadata=knob(
            "fused: the weight-gradient GeMMs add into the gradient buffer (Megatron); "
            "separate: a memory pass per micro-batch does (DeepSpeed's BF16 optimizer, autograd).",
            summary="Gradients added into the buffer by the GeMMs or a pass.",
        ),
    )
    """``"fused"`` when the weight-gradient GeMMs add into the gradient buffer themselves
    (Megatron's ``--gradient-accumulation-fusion``, on by default since 2022), ``"separate"``
    when every micro-batch's gradients are added into it by a memory-bound pass
    (:func:`~meshtune.step.work.grad_accumulation_s`: DeepSpeed's BF16 optimizer, PyTorch
    autograd)."""

    grad_all_reduce: bool = field(
        default=False,
        metadata=knob(
            "All-reduce whole gradients even with ZeRO-1/2, then all-gather the weights "
            "(DeepSpeed's pipeline engine with its BF16 optimizer).",
            summary="Gradients all-reduced whole even with ZeRO-1/2.",
        ),
    )
    """Under ZeRO-1/2 the gradients are still all-reduced whole, and the updated weights
    all-gathered after the sharded optimizer step (DeepSpeed's pipeline engine with its BF16
    optimizer: ``_bf16_reduce_grads`` all-reduces the fp32 gradient buffer,
    microsoft/DeepSpeed deepspeed/runtime/pipe/engine.py; its ``update_lp_params``
    all-gathers the bf16 weights), instead of reduce-scattered."""

    zero3_recompute_gather: bool = field(
        default=False,
        metadata=knob(
            "Under ZeRO-3 with full recompute, gather the weights again for the recomputed "
            "forward (DeepSpeed ZeRO-3; off: the backward's gather serves it, as PyTorch FSDP).",
            summary="ZeRO-3's recomputed forward gathers the weights again.",
        ),
    )
    """Under ZeRO-3 with full recompute the recomputed forward all-gathers each block's weights
    again (DeepSpeed ZeRO-3) instead of running on the backward pass's gather (PyTorch FSDP):
    :func:`~meshtune.step.comms.fsdp_exposed`."""

    cp_comm: CpComm = field(
        default="ring",
        metadata=knob(
            "How context parallelism moves K and V: ring (Megatron-Core, overlapped with "
            "attention) or all-gather (Llama 3, exposed).",
            summary="How CP moves K and V: a ring, or an exposed all-gather.",
        ),
    )
    """How context parallelism moves K and V: ``"ring"`` (Megatron-Core, overlapped with
    attention) or ``"all-gather"`` (Llama 3, exposed): :mod:`meshtune.step.cp`."""

    schedule: Schedule = field(
        default="1f1b",
        metadata=knob(
            "Pipeline schedule: 1f1b (interleaved with --vpp > 1) or dualpipe (DeepSeek-V3: "
            "two model copies, all-to-alls and stage sends hidden behind the paired chunk).",
            summary="Pipeline schedule: 1F1B (interleaved when v > 1), DualPipe.",
        ),
    )
    """The pipeline schedule: ``"1f1b"`` (interleaved when v > 1) or ``"dualpipe"``
    (DeepSeek-V3: :mod:`meshtune.step.pipeline`, whose docstring says what it changes;
    it restricts the splits: :func:`meshtune.step.pipeline.dualpipe_legal`)."""

    precision: Precision = field(
        default="bf16",
        metadata=knob(
            "bf16: every GeMM in bf16; fp8: the FC GeMMs at the profile's FP8 rate, state and "
            "activations as DeepSeek-V3's FP8 training keeps them (profiles with an fp8 section).",
            summary="FC GeMMs in bf16 or FP8 (DeepSeek-V3 §3.3).",
        ),
    )
    """``"fp8"`` runs the FC GeMMs at the profile's FP8 rates and keeps state, activations and
    the MoE dispatch as FP8 training does (:mod:`meshtune.step.precision`); ``"bf16"`` runs
    every GeMM in bf16."""

    block_overhead_s: Latency = field(
        default=0.0,
        metadata=knob(None, summary="Engine host time per block and micro-batch, seconds."),
    )
    """Host time per block and micro-batch that the GPU waits for (forward, recompute and
    backward together), added to every block's time on the critical path, so a 1F1B step gains
    ``(m + (pp − 1)/v) · n · block_overhead_s`` for ``n`` blocks on the pace chip; 0 for
    engines whose host work hides behind the GPU's (Megatron-LM). ``meshtune plan`` sets it
    from ``--engine`` (an engine's measured time, :mod:`meshtune.validation.engines`), as the
    validation set does for its Megatron-DeepSpeed runs."""

    def __post_init__(self) -> None:
        for name, value in ((f.name, getattr(self, f.name)) for f in fields(self)):
            check_value(name, value, _hints(StepOptions)[name])


@dataclass(frozen=True)
class ClusterOptions:
    """What the cluster search is asked for: the levels the user pinned (``None``: searched)
    and the step's options (:class:`StepOptions`, the same for every split)."""

    dp: int | None = field(default=None, metadata=knob("Pin DP replicas.", low=1, high=MAX_CHIPS))
    """The data-parallel replicas."""

    pp: int | None = field(default=None, metadata=knob("Pin PP stages.", low=1, high=MAX_CHIPS))
    """The pipeline stages."""

    micro_batches: int | None = field(
        default=None, metadata=knob("Pin micro-batches per replica.", low=1, high=MAX_DIMENSION)
    )
    """Micro-batches per replica and step."""

    zero1: bool = field(default=False, metadata=knob("Same as --zero 1.", flags=("--zero1",)))
    """The older spelling of ``zero=1``."""

    zero: int | None = field(
        default=None,
        metadata=knob(
            "Pin the ZeRO stage: 0 plain DP, 1 optimizer, 2 + gradients, 3 + weights (FSDP) "
            "sharded over DP [default: the lowest that fits].",
            low=0,
            high=3,
        ),
    )
    """The ZeRO stage: 0 plain DP, 1 optimizer state, 2 and gradients, 3 and weights (FSDP)
    sharded over the DP ranks."""

    vpp: int | None = field(
        default=None,
        metadata=knob(
            "Pin the virtual stages per chip (interleaved 1F1B; 1: plain 1F1B).",
            low=1,
            high=MAX_DIMENSION,
        ),
    )
    """Virtual stages per chip of the interleaved schedule (1: plain 1F1B)."""

    ep: int | None = field(
        default=None,
        metadata=knob(
            "Pin the expert-parallel ranks of a mixture of experts (among the DP replicas) "
            "[default: searched over the divisors of DP and the expert count].",
            low=1,
            high=MAX_DIMENSION,
        ),
    )
    """The expert-parallel ranks of a MoE model, among the DP replicas
    (:mod:`meshtune.search.experts`)."""

    cp: int | None = field(
        default=None,
        metadata=knob(
            "Pin the context-parallel ranks (ring attention; each holds seq / cp tokens) "
            "[default: searched where each rank keeps at least 8,192 tokens].",
            low=1,
            high=MAX_DIMENSION,
        ),
    )
    """The context-parallel ranks, each holding ``seq_len / cp`` tokens of every sequence
    (:mod:`meshtune.step.cp`)."""

    step: StepOptions = field(default_factory=StepOptions)
    """The step's options."""

    def __post_init__(self) -> None:
        for name in ("dp", "pp", "micro_batches", "vpp", "ep", "cp"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InfeasibleError(f"{name} must be a whole number, got {value!r}")
            if value is not None and value < 1:
                raise InfeasibleError(f"{name} must be at least 1, got {value}")
        if self.zero is not None and self.zero not in ZERO_STAGES:
            raise InfeasibleError(f"zero stage {self.zero!r} is not one of 0, 1, 2, 3")
        if self.zero1 and self.zero not in (None, 1):
            raise InfeasibleError(f"--zero1 means ZeRO stage 1, not {self.zero}")

    def zero_stages(self) -> tuple[Zero, ...]:
        """The ZeRO stages to search: the pinned one, or all four."""
        if self.zero is not None:
            return (cast(Zero, self.zero),)
        return (1,) if self.zero1 else ZERO_STAGES


@cache
def _hints(record: type) -> dict[str, Any]:
    """The field types of a record, ``Annotated`` bounds included."""
    return get_type_hints(record, include_extras=True)


def option_fields(record: type) -> list[tuple[Field[Any], Any, Knob]]:
    """Every field of ``record`` (:class:`StepOptions` or :class:`ClusterOptions`) that users
    set, in order: the field, its type (``Annotated`` bounds included) and its :class:`Knob`."""
    return [
        (f, _hints(record)[f.name], f.metadata[KNOB]) for f in fields(record) if KNOB in f.metadata
    ]


def field_default(f: Field[Any]) -> Any:
    """The default of a record field (every option has one)."""
    if f.default is MISSING:
        raise TypeError(f"option field '{f.name}' has no default")
    return f.default


def base_type(annotation: Any) -> Any:
    """An option's type without its ``Annotated`` bounds."""
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation


def choices(annotation: Any) -> tuple[Any, ...] | None:
    """The values a ``Literal`` option takes (``None`` for any other type)."""
    base = base_type(annotation)
    return get_args(base) if get_origin(base) is Literal else None


def bounds(annotation: Any) -> dict[str, float]:
    """The ``ge`` / ``gt`` / ``le`` / ``lt`` bounds of a numeric option's ``Annotated`` type."""
    found: dict[str, float] = {}
    if get_origin(annotation) is not Annotated:
        return found
    for item in get_args(annotation)[1:]:
        for constraint in getattr(item, "metadata", [item]):
            for key in ("ge", "gt", "le", "lt"):
                if getattr(constraint, key, None) is not None:
                    found[key] = float(getattr(constraint, key))
    return found


def check_value(name: str, value: object, annotation: Any) -> None:
    """Raise :class:`InfeasibleError` naming ``value`` when the option ``name`` of type
    ``annotation`` cannot take it: a choice not in its ``Literal``, a number outside its
    bounds or not finite, a flag that is not a bool."""
    allowed = choices(annotation)
    base = base_type(annotation)
    if allowed is not None:
        if value not in allowed:
            raise InfeasibleError(
                f"{name} {value!r} is not one of {', '.join(str(a) for a in allowed)}"
            )
    elif base is bool:
        if not isinstance(value, bool):
            raise InfeasibleError(f"{name} must be true or false, got {value!r}")
    elif base is float:
        limits = bounds(annotation)
        low = f"[{limits['ge']:g}" if "ge" in limits else f"({limits.get('gt', -math.inf):g}"
        high = f"{limits['le']:g}]" if "le" in limits else f"{limits.get('lt', math.inf):g})"
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < limits.get("ge", -math.inf)
            or value <= limits.get("gt", -math.inf)
            or value > limits.get("le", math.inf)
            or value >= limits.get("lt", math.inf)
        ):
            raise InfeasibleError(f"{name} must be a finite number in {low}, {high}, got {value!r}")


def option_flags(f: Field[Any], annotation: Any, about: Knob) -> tuple[str, ...]:
    """The command-line spelling of a record field: none without a help line, its
    :class:`Knob`'s ``flags``, else ``--name-with-dashes``, a bool as ``--x/--no-x``."""
    if about.help is None:
        return ()
    if about.flags is not None:
        return about.flags
    flag = "--" + f.name.replace("_", "-")
    return (f"{flag}/--no-{flag[2:]}",) if annotation is bool else (flag,)


def option_args(options: ClusterOptions) -> list[str]:
    """The ``meshtune plan`` arguments that ask for ``options`` (the inverse of the command
    line :mod:`meshtune.cli._options` generates): every pinned level, every step option with a
    flag (a bool as ``--x`` or ``--no-x``); a number as its ``repr``."""
    args: list[str] = []
    for record, values in ((ClusterOptions, options), (StepOptions, options.step)):
        for f, annotation, about in option_fields(record):
            args += _flag_args(option_flags(f, annotation, about), getattr(values, f.name))
    return args


def _flag_args(spelling: tuple[str, ...], value: object) -> list[str]:
    """The arguments that set ``value`` under ``spelling`` (none for ``None``, an unset
    one-way flag or a field without a flag)."""
    if not spelling or value is None:
        return []
    on, _, off = spelling[0].partition("/")
    if isinstance(value, bool):
        return [on] if value else ([off] if off else [])
    return [on, repr(value) if isinstance(value, float) else str(value)]


def step_values(options: StepOptions) -> Mapping[str, Any]:
    """Every field of ``options`` by name (what a file that records them writes)."""
    return {f.name: getattr(options, f.name) for f in fields(options)}


DEFAULT_OPTIONS = StepOptions()
