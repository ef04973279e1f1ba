"""The user's current setup, read from a framework's configuration, pinned and priced.

``meshtune plan MODEL --chips N --from megatron args.txt`` reads the split a Megatron-LM
arguments file (or a MaxText YAML, a torchtitan TOML, a DeepSpeed JSON) describes into a
:class:`Setup`, pins every level of it (:func:`pinned_plan`: DP = chips / (TP · PP · CP), the
micro-batch count from the global and micro-batch sizes, v, ZeRO, recompute, EP, CP, the TP
mesh and the algorithm the framework runs) and prices it with
:func:`meshtune.planner.make.make_plan`, as ``plan --dp --pp --mesh --micro-batches --zero --vpp
--ep --cp`` would; :func:`gain_line` puts the searched best plan beside it. What a file holds that
meshtune does not model is listed in
:attr:`Setup.unused`, never dropped; a value meshtune cannot honour (a kind of parallelism it
does not model, a size that does not divide, an EP that does not divide DP) is a
:class:`~meshtune.errors.SetupFileError` naming the file and the option.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

from meshtune.dataflow import DataflowMode
from meshtune.errors import SetupFileError
from meshtune.export.common import plan_split
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan
from meshtune.planner.make import make_plan
from meshtune.step.cp import CpComm
from meshtune.step.memory import Recompute
from meshtune.step.options import ClusterOptions, StepOptions
from meshtune.step.work import AttentionKind

_MODEL_WORDS = {
    "blocks": "layers",
    "hidden": "hidden size",
    "ffn_hidden": "FFN size",
    "heads": "attention heads",
    "head_dim": "head width",
    "kv_heads": "KV heads",
    "vocab": "vocabulary",
}


@dataclass(frozen=True)
class Setup:
    """A split as a framework file states it; ``None``: not stated (the command's option or
    meshtune's default applies). ``ep``: expert-parallel ranks among the DP replicas; ``cp``:
    context-parallel ranks splitting each sequence (``chips = DP · PP · CP · TP``);
    ``local_batch``: sequences a DP replica runs per forward-backward pass (the global batch
    is a whole number of them times DP: gradient accumulation)."""

    framework: str
    source: str
    rows: int
    cols: int
    pp: int
    algorithm: str
    dp: int | None = None
    vpp: int | None = None
    layers_per_chunk: int | None = None
    micro_batch: int | None = None
    micro_batches: int | None = None
    local_batch: int | None = None
    batch: int | None = None
    batch_per_chip: float | None = None
    seq_len: int | None = None
    zero: int | None = None
    recompute: Recompute | None = None
    attention: AttentionKind | None = None
    ep: int = 1
    cp: int = 1
    cp_comm: CpComm | None = None
    model: dict[str, int | None] = field(default_factory=dict)
    unused: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def tp(self) -> int:
        """Chips of the TP mesh."""
        return self.rows * self.cols


class SetupReader:
    """What a reader collects while it reads one file: unused keys, notes, and its errors."""

    def __init__(self, source: str, framework: str) -> None:
        self.source = source
        self.framework = framework
        self.unused: list[str] = []
        self.notes: list[str] = []

    def error(self, message: str) -> SetupFileError:
        """The error to raise, naming the file and the framework."""
        return SetupFileError(f"{self.source}: {self.framework} configuration: {message}")

    def note(self, message: str) -> None:
        """Something the user should know about how the file was read."""
        self.notes.append(message)

    def unsupported(self, name: str, value: int | None) -> None:
        """Refuse a level meshtune does not model (Ulysses sequence parallelism, …) above 1."""
        if value is not None and value != 1:
            raise self.error(f"{name} {value}: meshtune does not model it; plan with it at 1")

    def choice(self, name: str, value: object, allowed: Collection[str]) -> Any:
        """``value`` if it is one of ``allowed`` (or None), else the error naming them."""
        if value is not None and value not in allowed:
            raise self.error(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")
        return value

    def setup(self, **fields: Any) -> Setup:
        """The :class:`Setup` read, with the collected unused keys and notes."""
        fields.pop("tp", None)
        return Setup(
            framework=self.framework,
            source=self.source,
            unused=tuple(self.unused),
            notes=tuple(self.notes),
            **fields,
        )


_DIGITS = re.compile(r"[0-9]+(?:_[0-9]+)*")
_MAX_DIGITS = 15


def whole(reader: SetupReader, name: str, value: object, *, text: bool = False) -> int:
    """``value`` as a positive whole number, else the error naming ``name``. The number forms
    accepted are the format's own: an ``int`` (never a bool, a float or a string: JSON, TOML
    and YAML state numbers as numbers) or, with ``text`` (a command-line argument, which is
    always text), ASCII digits with ``_`` between them (Python's ``int`` syntax; never a
    Unicode digit such as ``²``), at most 15 of them."""
    if text and isinstance(value, str):
        digits = value.strip()
        if _DIGITS.fullmatch(digits) is None or len(digits) > _MAX_DIGITS:
            raise reader.error(f"{name}: {value!r} is not a whole number")
        value = int(digits)
    if isinstance(value, bool) or not isinstance(value, int):
        raise reader.error(f"{name}: {value!r} is not a whole number")
    if value < 1:
        raise reader.error(f"{name}: {value!r} is not a positive whole number")
    return value


def whole_or_auto(reader: SetupReader, name: str, value: object, auto: int | None) -> int | None:
    """None when ``value`` is the integer ``auto`` (the format's "derive it" marker, such as
    ``-1``; never ``-1.0`` or a string), else :func:`whole`."""
    if auto is not None and type(value) is int and value == auto:
        return None
    return whole(reader, name, value)


def positive(reader: SetupReader, name: str, value: object) -> float:
    """``value`` (an int or a float, never a bool or a string) as a finite number above
    zero, else the error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise reader.error(f"{name}: {value!r} is not a number")
    if not (math.isfinite(value) and value > 0):
        raise reader.error(f"{name}: {value!r} is not a finite number above zero")
    return float(value)


def model_notes(setup: Setup, model: ModelSpec) -> list[str]:
    """Where the file's model shape differs from the model being planned (the model wins)."""
    out = []
    for key, value in setup.model.items():
        if value is not None and value != getattr(model, key):
            out.append(
                f"{setup.source} gives {_MODEL_WORDS[key]} {value}; model {model.name} has "
                f"{getattr(model, key)} (the model's value is used)"
            )
    return out


def _levels(setup: Setup, model: ModelSpec, chips: int, batch: int) -> tuple[int, int, int]:
    """(dp, micro-batches, v) of ``setup`` on ``chips`` chips and ``batch`` sequences."""
    reader = SetupReader(setup.source, setup.framework)
    per_replica = setup.tp * setup.pp * setup.cp
    levels = f"TP {setup.tp} x PP {setup.pp}" + (f" x CP {setup.cp}" if setup.cp > 1 else "")
    if chips % per_replica:
        raise reader.error(f"{chips} chips are not a multiple of {levels} = {per_replica}")
    dp = chips // per_replica
    if setup.dp is not None and setup.dp != dp:
        raise reader.error(f"DP {setup.dp} x {levels} is not {chips} chips")
    if dp % setup.ep:
        raise reader.error(
            f"EP {setup.ep} does not divide DP {dp}: meshtune takes the expert-parallel ranks "
            "from the DP replicas"
        )
    vpp = setup.vpp or 1
    if setup.layers_per_chunk is not None:
        chunks, extra = divmod(model.blocks, setup.layers_per_chunk * setup.pp)
        if extra or not chunks:
            raise reader.error(
                f"{model.blocks} layers do not split into PP {setup.pp} x chunks of "
                f"{setup.layers_per_chunk} layers"
            )
        vpp = chunks
    if setup.local_batch is not None and batch % (dp * setup.local_batch):
        raise reader.error(
            f"global batch {batch} is not a multiple of DP {dp} x local batch size "
            f"{setup.local_batch}"
        )
    micro_batches = setup.micro_batches
    if setup.micro_batch is not None:
        if batch % (dp * setup.micro_batch):
            raise reader.error(
                f"global batch {batch} is not a multiple of DP {dp} x micro-batch size "
                f"{setup.micro_batch}"
            )
        derived = batch // (dp * setup.micro_batch)
        if micro_batches is not None and micro_batches != derived:
            raise reader.error(
                f"{micro_batches} micro-batches (accumulation steps) x {setup.micro_batch} x DP "
                f"{dp} is not the global batch {batch}"
            )
        micro_batches = derived
    return dp, micro_batches or 1, vpp


def _per_chip_batch(setup: Setup, chips: int) -> int | None:
    """``batch_per_chip × chips`` as a whole number of sequences (None when unstated)."""
    if setup.batch_per_chip is None:
        return None
    total = setup.batch_per_chip * chips
    rounded = round(total) if math.isfinite(total) else 0
    if rounded < 1 or abs(total - rounded) > 1e-9 * total:
        raise SetupFileError(
            f"{setup.source}: {setup.framework} configuration: {setup.batch_per_chip} sequences "
            f"per chip x {chips} chips is not a whole number of sequences"
        )
    return rounded


def _replica_batch(setup: Setup, chips: int) -> int | None:
    """``DP × micro-batch × micro-batches`` when the file gives both but no global batch."""
    if setup.micro_batch is None or setup.micro_batches is None:
        return None
    replicas = chips // (setup.tp * setup.pp * setup.cp)
    return max(1, replicas) * setup.micro_batch * setup.micro_batches


def pinned_plan(
    setup: Setup,
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    *,
    batch: int | None = None,
    seq_len: int | None = None,
    mode: DataflowMode = "auto",
    levels: ClusterOptions | None = None,
) -> Plan:
    """The plan of ``setup`` with every level pinned (module docstring). ``batch``,
    ``seq_len`` and ``levels``' recompute and attention apply where the file states none; the
    file's own values win otherwise; the rest of ``levels`` (headroom, dropout, gradient
    reduction) is the user's (default: headroom 0, the step model's defaults). Raises
    :class:`SetupFileError` when the levels do not divide."""
    asked = levels if levels is not None else ClusterOptions(step=StepOptions(headroom=0.0))
    batch = setup.batch or _per_chip_batch(setup, chips) or _replica_batch(setup, chips) or batch
    batch = batch or max(1, chips // 2)
    dp, micro_batches, vpp = _levels(setup, model, chips, batch)
    zero = setup.zero
    options = replace(
        asked,
        dp=dp,
        pp=setup.pp,
        micro_batches=micro_batches,
        zero=zero,
        vpp=vpp,
        ep=setup.ep,
        cp=setup.cp,
        step=replace(
            asked.step,
            recompute=setup.recompute or asked.step.recompute,
            attention=setup.attention or asked.step.attention,
            cp_comm=setup.cp_comm or asked.step.cp_comm,
        ),
    )
    return make_plan(
        model,
        profile,
        chips,
        batch=batch,
        seq_len=setup.seq_len or seq_len,
        mode=mode,
        algorithm=setup.algorithm,
        shapes=[f"{setup.rows}x{setup.cols}"],
        top=1,
        cluster=options,
    )


def _describe(plan: Plan) -> tuple[str, float]:
    """``"DP 2 x PP 16 x TP 4x2 (meshslice)"`` and the step time (a plan of one mesh: its FC
    time)."""
    split = plan_split(plan)
    if plan.cluster is None:
        return split.label, plan.fc_time_s
    return split.label, plan.cluster.step.step_s


def gain_line(current: Plan, best: Plan) -> str:
    """``you run …: 31.5 s; meshtune's best: …: 24.1 s, 1.31x faster`` (or: already best)."""
    mine, mine_s = _describe(current)
    theirs, theirs_s = _describe(best)
    head = f"you run {mine}: step {mine_s:.4g} s"
    if theirs_s >= mine_s:
        return f"{head}; meshtune finds nothing faster (its best: {theirs}: {theirs_s:.4g} s)"
    return f"{head}; meshtune's best: {theirs}: {theirs_s:.4g} s, {mine_s / theirs_s:.3g}x faster"
