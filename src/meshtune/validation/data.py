"""The validation set: published training runs as data (``validation/*.toml``), and the FLOP
formulas that turn each source's stated measure into one comparable quantity, the step time.

One file per source (its stem is the source key). Every run cites where it comes from
(``where``: paper and table, or repository file) and the row of the compiled
``published-runs.csv`` it was taken from (``csv_row``). A run meshtune can express carries
everything the predictor needs (shape, chips, the published TP × PP × DP split); a field the
source does not state is ``None`` (micro-batch size, recompute) and the predictor searches it
within the pinned split. Runs meshtune cannot express yet are listed under ``not_expressible``
with the reason.

The stated measure becomes a step time in seconds with the source's own FLOP convention:

* ``iteration_time_s``: stated; used as is.
* ``tflops_per_gpu``: t = F / (chips · rate), F from ``flop_formula``:
  ``narayanan_eq3`` (Narayanan et al., SC'21, eq. 3, counts the recompute forward pass:
  HFU-style), ``megatron`` (Megatron-LM ``num_floating_point_operations``; for a GPT with 4h
  MLP and multi-head attention it equals Korthikanti et al. 2022 eq. 7, model FLOPs: MFU-style),
  ``palm`` (PaLM App. B: 6N + 12·L·H·Q·T per token, model FLOPs).
* ``mfu_pct``: t = F / (chips · MFU · peak), F model FLOPs (``megatron``), ``peak_tflops`` the
  peak the source states.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from meshtune._toml import describe_validation_error, load_model_file
from meshtune.catalog import load_model
from meshtune.errors import MeshtuneError
from meshtune.model.spec import ModelSpec
from meshtune.plan.options import OptionFields
from meshtune.step.memory import Recompute
from meshtune.units import FROZEN
from meshtune.validation.folder import BOUNDS_STEM as BOUNDS_STEM
from meshtune.validation.folder import ValidationSetError as ValidationSetError
from meshtune.validation.folder import validation_dir as validation_dir

Positive = Annotated[int, Field(strict=True, gt=0)]
FlopFormula = Literal["narayanan_eq3", "megatron", "palm"]


class Run(
    OptionFields,
    exclude=("recompute", "headroom", "block_overhead_s"),
    required=("attention", "dropout", "grad_overlap", "fp32_grads"),
):
    """One published run meshtune can predict with its split pinned: its shape, its split,
    what the source measured, and a field per step option (generated:
    :class:`~meshtune.plan.options.OptionFields`; every row states the attention kernel,
    dropout and the gradient path, the others default to the option's default). Its
    ``recompute`` may be unstated (searched), its ``engine`` names the host time per block
    (:mod:`meshtune.validation.engines`); the memory headroom is the search's default."""

    model_config = FROZEN

    id: str = Field(min_length=1, description="Unique key, '<source>/<short name>'.")
    csv_row: Positive = Field(description="row_id in shared/validation/published-runs.csv.")
    where: str = Field(min_length=1, description="Table / section / file the numbers are in.")
    quality: Literal["ok", "doubtful", "secondary_only"]
    model: str = Field(min_length=1)
    params_b: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="As published, billions."
    )
    layers: Positive
    hidden: Positive
    heads: Positive
    kv_heads: Positive
    ffn_hidden: Positive
    mlp: Literal["gelu", "swiglu"]
    vocab: Positive
    seq_len: Positive
    hardware: str = Field(min_length=1, description="Key of HARDWARE_PROFILES.")
    chips: Positive
    tp: Positive
    pp: Positive
    dp: Positive
    cp: Positive = Field(default=1, description="Context-parallel ranks (ring attention).")
    ep: Positive = Field(default=1, description="Expert-parallel ranks among the DP replicas.")
    catalog_model: str | None = Field(
        default=None,
        description="A shipped models/ spec to predict with (MoE, MLA) instead of the row's "
        "dense shape; its blocks and hidden must match the row's.",
    )
    global_batch: Positive = Field(description="Sequences per optimizer step.")
    micro_batch: Positive | None = Field(default=None, description="None: not stated, searched.")
    recompute: Recompute | None = Field(default=None, description="None: not stated.")
    zero1: bool = Field(description="Optimizer state sharded over DP (ZeRO-1/2-like traffic).")
    zero3: bool = Field(
        default=False,
        description="Weights, gradients and optimizer state sharded over DP (ZeRO-3 / FSDP: "
        "weights gathered per block and micro-batch); overrides zero1.",
    )
    sp: bool | None = Field(default=None, description="Sequence parallelism; None: not stated.")
    vpp: Positive | None = Field(
        default=None, description="Virtual stages per chip (1: plain 1F1B); None: not stated."
    )
    engine: str | None = Field(
        default=None,
        description="Training engine whose measured host time per block and micro-batch is "
        "priced (a key of validation/engines/engines.toml); None: none.",
    )
    measure: Literal["iteration_time_s", "tflops_per_gpu", "mfu_pct"]
    measured: float = Field(
        gt=0, allow_inf_nan=False, description="The stated value of ``measure``."
    )
    flop_formula: FlopFormula | None = None
    peak_tflops: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Stated peak (mfu_pct)."
    )
    step_s: float = Field(
        gt=0, allow_inf_nan=False, description="Published step time, seconds (derived if needed)."
    )
    derivation: str = Field(min_length=1, description="How step_s follows from the source.")
    group: str | None = Field(default=None, description="Alternative splits of one model.")
    unstated: list[str] = Field(default_factory=list, description="Fields the planner searches.")
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> Run:
        if self.tp * self.pp * self.dp * self.cp != self.chips:
            product = self.tp * self.pp * self.dp * self.cp
            raise ValueError(f"tp·pp·dp·cp = {product} ≠ chips {self.chips}")
        if self.dp % self.ep:
            raise ValueError(f"ep {self.ep} does not divide dp {self.dp} (EP runs among DP)")
        if self.global_batch % self.dp:
            raise ValueError(f"dp {self.dp} does not divide global_batch {self.global_batch}")
        if self.measure != "iteration_time_s" and self.flop_formula is None:
            raise ValueError(f"measure '{self.measure}' needs a flop_formula")
        if self.measure == "mfu_pct" and self.peak_tflops is None:
            raise ValueError("measure 'mfu_pct' needs peak_tflops")
        if self.micro_batch is None and "micro_batch" not in self.unstated:
            raise ValueError("micro_batch is not given: list it in 'unstated'")
        for name in ("recompute", "sp", "vpp"):
            if getattr(self, name) is None and name not in self.unstated:
                raise ValueError(f"{name} is not given: list it in 'unstated'")
        if self.catalog_model is None:
            try:  # the model the row describes is checked as every model is
                self.spec()
            except ValidationError as exc:
                raise ValueError(f"its model: {describe_validation_error(exc)}") from None
        return self

    @property
    def split(self) -> str:
        """``TP × PP × DP``, with `` × CP c`` and `` (EP e)`` where they are above 1."""
        context = f" × CP {self.cp}" if self.cp > 1 else ""
        expert = f" (EP {self.ep})" if self.ep > 1 else ""
        return f"{self.tp} × {self.pp} × {self.dp}{context}{expert}"

    def spec(self) -> ModelSpec:
        """The model as a :class:`ModelSpec` built from the row's shape, or the shipped
        ``catalog_model`` at the row's sequence length (its blocks and hidden checked against
        the row's)."""
        if self.catalog_model is not None:
            return catalog_spec(self)
        slug = self.id.replace("/", "-")
        return ModelSpec(
            name=slug,
            display_name=self.model,
            source=self.where,
            blocks=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            head_dim=self.hidden // self.heads,
            kv_heads=self.kv_heads,
            ffn_hidden=self.ffn_hidden,
            mlp=self.mlp,
            vocab=self.vocab,
            seq_len=self.seq_len,
        )


def catalog_spec(run: Run) -> ModelSpec:
    """``run.catalog_model`` from the model catalog at the run's ``seq_len``; raises
    :class:`ValidationSetError` when it is unknown or its blocks / hidden differ from the
    run's ``layers`` / ``hidden``."""
    name = run.catalog_model or ""
    try:
        spec = load_model(name)
    except MeshtuneError as exc:
        raise ValidationSetError(f"{run.id}: catalog_model '{name}': {exc}") from exc
    if (spec.blocks, spec.hidden) != (run.layers, run.hidden):
        raise ValidationSetError(
            f"{run.id}: catalog_model '{name}' has {spec.blocks} blocks of hidden {spec.hidden}, "
            f"the run {run.layers} of {run.hidden}"
        )
    return spec.model_copy(update={"seq_len": run.seq_len})


class NotExpressible(BaseModel):
    """A published run meshtune cannot express yet, and why."""

    model_config = FROZEN

    id: str = Field(min_length=1)
    csv_row: Positive
    where: str = Field(min_length=1)
    model: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class Source(BaseModel):
    """One ``validation/<key>.toml`` file."""

    model_config = FROZEN

    key: str = Field(description="The file stem.")
    citation: str = Field(min_length=1)
    verified_against: str = Field(min_length=1)
    convention: str = Field(min_length=1, description="How the source counts FLOPs / time.")
    runs: list[Run] = Field(default_factory=list)
    not_expressible: list[NotExpressible] = Field(default_factory=list)


# --------------------------------------------------------------------------- FLOP formulas


def narayanan_eq3_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """SC'21 eq. 3: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), recompute forward included."""
    h = float(hidden)
    return 96 * batch * seq * layers * h * h * (1 + seq / (6 * h) + vocab / (16 * layers * h))


def megatron_flops(run: Run) -> float:
    """Megatron-LM ``num_floating_point_operations`` (model FLOPs, no recompute):
    12·B·s·l·h²·(1 + (ffn/h)·g + kv/heads + s/h + V/(2·l·h)), g = 3/2 for SwiGLU. With a 4h
    GeLU MLP and kv = heads it is Korthikanti et al. 2022 eq. 7, 72·B·s·l·h²·(1 + s/(6h) +
    V/(12·l·h))."""
    h = float(run.hidden)
    gated = 1.5 if run.mlp == "swiglu" else 1.0
    return (
        12
        * run.global_batch
        * run.seq_len
        * run.layers
        * h
        * h
        * (
            1
            + run.ffn_hidden / h * gated
            + run.kv_heads / run.heads
            + run.seq_len / h
            + run.vocab / (2 * run.layers * h)
        )
    )


def palm_flops(run: Run) -> float:
    """PaLM App. B model FLOPs of a step: tokens · (6N + 12·L·H·Q·T), N = ``params_b``·10⁹,
    H heads of width Q, T the sequence length."""
    if run.params_b is None:
        raise ValidationSetError(f"{run.id}: flop_formula 'palm' needs params_b")
    tokens = run.global_batch * run.seq_len
    per_token = (
        6 * run.params_b * 1e9
        + 12 * run.layers * run.heads * (run.hidden // run.heads) * run.seq_len
    )
    return float(tokens * per_token)


def step_flops(run: Run) -> float:
    """The step's FLOPs in the run's own convention (``flop_formula``)."""
    if run.flop_formula == "narayanan_eq3":
        return narayanan_eq3_flops(run.global_batch, run.seq_len, run.layers, run.hidden, run.vocab)
    if run.flop_formula == "megatron":
        return megatron_flops(run)
    if run.flop_formula == "palm":
        return palm_flops(run)
    raise ValidationSetError(f"{run.id}: no flop_formula")


def published_step_s(run: Run) -> float:
    """The step time the source's stated measure implies (module docstring)."""
    if run.measure == "iteration_time_s":
        return run.measured
    if run.measure == "tflops_per_gpu":
        return step_flops(run) / (run.chips * run.measured * 1e12)
    if run.peak_tflops is None:
        raise ValidationSetError(f"{run.id}: measure 'mfu_pct' needs peak_tflops")
    return step_flops(run) / (run.chips * run.measured / 100 * run.peak_tflops * 1e12)


# --------------------------------------------------------------------------- loading


def load_source(path: Path) -> Source:
    """Read one validation file; its ``key`` is the file stem."""
    return load_model_file(path, Source, ValidationSetError, key=path.stem)


def load_validation_set(
    folder: Path | None = None, *, sources: list[str] | None = None
) -> list[Source]:
    """Every ``*.toml`` source in ``folder`` (default :func:`validation_dir`), by key; with
    ``sources``, only those keys (an unknown key raises, naming the known ones)."""
    folder = folder if folder is not None else validation_dir()
    if not folder.is_dir():
        raise ValidationSetError(f"the validation folder {folder} does not exist")
    paths = {p.stem: p for p in sorted(folder.glob("*.toml")) if p.stem != BOUNDS_STEM}
    wanted = list(paths) if sources is None else sources
    unknown = [s for s in wanted if s not in paths]
    if unknown:
        raise ValidationSetError(
            f"unknown source '{unknown[0]}'; known sources: {', '.join(paths) or '(none)'}"
        )
    loaded = [load_source(paths[key]) for key in wanted]
    seen: set[str] = set()
    for source in loaded:
        for run_id in [r.id for r in source.runs] + [r.id for r in source.not_expressible]:
            if run_id in seen:
                raise ValidationSetError(f"{source.key}: run id '{run_id}' appears twice")
            seen.add(run_id)
    return loaded
