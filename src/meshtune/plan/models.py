"""The plan file's models: :class:`Plan` and its parts (frozen, ``extra="forbid"``, built on
first use), every field typed by :mod:`meshtune.plan.vocabulary`."""

# No ``from __future__ import annotations`` in this module: pydantic would then evaluate every
# field's annotation from its string when each model class is created, on every start-up of
# ``meshtune plan`` (issue 17). A method annotation naming a class not yet defined is quoted.

import json
import math
from collections.abc import Iterator
from dataclasses import fields
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    field_validator,
    model_validator,
)

from meshtune.cost.compute import Precision
from meshtune.dataflow import (
    Dim,
    Pass,
)
from meshtune.errors import PlanFileError
from meshtune.hardware.mesh import MAX_CHIPS, Mesh
from meshtune.model.spec import ModelSpec
from meshtune.plan.options import OptionFields
from meshtune.plan.vocabulary import (
    CLUSTER_DESCRIPTIONS,
    CLUSTER_FILE_ORDER,
    CLUSTER_MISSING,
    LEVELS_DESCRIPTIONS,
    LEVELS_FILE_ORDER,
    LEVELS_MISSING,
    MAX_DIMENSION,
    MAX_TOP,
    AlgorithmName,
    CatalogName,
    Dimension,
    Formula,
    KnobConfig,
    LayerName,
    MeshLabel,
    RequestedAlgorithm,
    Sharding,
    Tensor,
    Transpose,
    catalog_name,
)
from meshtune.step.options import ClusterOptions, step_values
from meshtune.units import FROZEN


class PlanLevels(
    OptionFields,
    order=LEVELS_FILE_ORDER,
    missing=LEVELS_MISSING,
    descriptions=LEVELS_DESCRIPTIONS,
):
    # the step options' fields are generated from the record (OptionFields); this docstring
    # is the plan schema's description of the section
    """What the cluster search was asked for (:class:`meshtune.step.options.ClusterOptions`)."""

    model_config = FROZEN

    dp: int | None = Field(default=None, gt=0, le=MAX_CHIPS, description="Pinned DP (or None).")
    pp: int | None = Field(default=None, gt=0, le=MAX_CHIPS, description="Pinned PP (or None).")
    micro_batches: int | None = Field(default=None, gt=0, le=MAX_DIMENSION)
    zero1: bool = False
    zero: int | None = Field(default=None, ge=0, le=3, description="Pinned ZeRO stage.")
    vpp: int | None = Field(default=None, gt=0, le=MAX_DIMENSION, description="Pinned v.")
    ep: int | None = Field(default=None, gt=0, le=MAX_CHIPS, description="Pinned EP.")
    cp: int | None = Field(default=None, gt=0, le=MAX_CHIPS, description="Pinned CP.")

    @classmethod
    def of(cls, options: ClusterOptions) -> "PlanLevels":
        """The record of ``options``: every level and step option under its name."""
        levels = {f.name: getattr(options, f.name) for f in fields(options) if f.name != "step"}
        return cls(**levels, **step_values(options.step))

    def options(self) -> ClusterOptions:
        """The search options these levels record (the inverse of :meth:`of`)."""
        return ClusterOptions(
            dp=self.dp,
            pp=self.pp,
            micro_batches=self.micro_batches,
            zero1=self.zero1,
            zero=self.zero,
            vpp=self.vpp,
            ep=self.ep,
            cp=self.cp,
            step=self.step_options,
        )


class PlanInputs(BaseModel):
    """Everything the plan was computed from."""

    model_config = FROZEN

    model: ModelSpec
    profile: CatalogName = Field(description="Profile name (file stem).")
    profile_hash: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$", description="sha256 of the profile's content."
    )
    bytes_per_element: int = Field(gt=0, description="Operand width the plan was costed for.")
    slice_block: int = Field(gt=0, description="Algorithm 2's block size B the slices use.")
    chips: int = Field(gt=0, le=MAX_CHIPS)
    batch: int = Field(gt=0, le=MAX_DIMENSION, description="Sequences per step.")
    seq_len: int = Field(gt=0, le=MAX_DIMENSION)
    dataflow_mode: Literal["auto", "ystn", "xstn", "wstn"]
    algorithm: RequestedAlgorithm = Field(
        description="Requested algorithm: a registered name, or 'auto'."
    )
    shapes: list[MeshLabel] | None = Field(description="Mesh shapes the search was restricted to.")
    levels: PlanLevels | None = Field(
        default=None,
        description="Cluster search options; None: one mesh of every chip, no memory check.",
    )
    top: int | None = Field(
        default=None,
        gt=0,
        le=MAX_TOP,
        description="Candidates asked for (--top); None in files that predate it, where the "
        "number of recorded mesh candidates stands in.",
    )

    @property
    def precision(self) -> Precision:
        """The FC GeMMs' precision: the levels' (``"bf16"`` for a mesh-only plan)."""
        return "bf16" if self.levels is None else self.levels.step_options.precision

    def asked_top(self, recorded_candidates: int) -> int:
        """The ``--top`` that made the plan: :attr:`top`, else (older files) the number of
        recorded mesh candidates, at least 1."""
        return self.top if self.top is not None else max(1, recorded_candidates)

    @field_validator("model")
    @classmethod
    def _model_by_catalog_name(cls, model: ModelSpec) -> ModelSpec:
        catalog_name(model.name)
        return model


class MeshShape(BaseModel):
    """P_r × P_c (× depth)."""

    model_config = FROZEN

    rows: int = Field(gt=0, le=MAX_CHIPS, description="P_r: chips per mesh column (axis 0).")
    cols: int = Field(gt=0, le=MAX_CHIPS, description="P_c: chips per mesh row (axis 1).")
    depth: int = Field(default=1, gt=0, le=MAX_CHIPS, description="Chips per axis-2 ring.")

    def to_mesh(self) -> Mesh:
        """The :class:`~meshtune.hardware.mesh.Mesh` this describes."""
        return Mesh(self.rows, self.cols, self.depth)


class PassPlan(BaseModel):
    """Predicted cost of one GeMM of a layer (seconds, one block)."""

    model_config = FROZEN

    name: Pass
    formula: Formula
    dataflow: Literal["OS", "LS", "RS"]
    m: Dimension
    n: Dimension
    k: Dimension
    prologue_s: float
    steady_s: float = Field(description="One steady-state iteration.")
    epilogue_s: float
    iterations: int = Field(gt=0, description="Loop iterations (MeshSlice: S).")
    total_s: float = Field(description="prologue + (iterations - 1) * steady + epilogue.")
    compute_s: float
    comm_hidden_s: float
    comm_exposed_s: float
    launch_s: float
    sync_s: float
    transfer_s: float


class LayerPlan(BaseModel):
    """Phase-1 and phase-2 choices for one FC layer."""

    model_config = FROZEN

    name: LayerName
    tokens: Dimension
    in_features: Dimension
    out_features: Dimension
    groups: Dimension = Field(
        default=1,
        description="GeMMs of this shape the layer runs, one per expert a mesh holds (1: dense; "
        "not written when 1).",
    )
    stationary: Literal["Y", "X", "W"]
    transposed: bool
    dataflows: dict[Pass, Literal["OS", "LS", "RS"]]
    sharding: dict[Tensor, Sharding] = Field(
        description="Per tensor: [dimension over mesh rows, dimension over mesh columns]."
    )
    sliced_dim: Dim
    algorithm: AlgorithmName = Field(description="Registered algorithm that runs the layer.")
    config: KnobConfig = Field(description="The algorithm's knobs, e.g. {'slices': 4}.")
    config_candidates: list[KnobConfig] = Field(description="Legal configurations.")
    passes: list[PassPlan]
    time_s: float = Field(description="forward + backward data + backward weight, one block.")
    utilization: float


class MeshCandidate(BaseModel):
    """One evaluated mesh shape (the data behind Figure 13)."""

    model_config = FROZEN

    algorithm: AlgorithmName
    rows: int = Field(gt=0, le=MAX_CHIPS)
    cols: int = Field(gt=0, le=MAX_CHIPS)
    depth: int = Field(default=1, gt=0, le=MAX_CHIPS)
    fc_time_s: float
    utilization: float
    configs: dict[LayerName, KnobConfig] = Field(description="Per layer, the chosen knobs.")


class MemoryPlan(BaseModel):
    """Bytes per chip by term (:mod:`meshtune.memory`), and the profile's capacity."""

    model_config = FROZEN

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float
    logits_bytes: float = Field(default=0.0, description="fp32 logits on the last stage.")
    total_bytes: float = Field(description="The sum of the terms.")
    capacity_bytes: float | None = Field(description="The profile's memory_bytes, if known.")


class StepPlan(BaseModel):
    """One training step's time by cause (seconds; :mod:`meshtune.step`)."""

    model_config = FROZEN

    fc_s: float = Field(description="micro_batches × blocks × one block's FC time.")
    recompute_s: float = Field(description="Work run again (recompute).")
    bubble_s: float = Field(description="(pp − 1) / v × one micro-batch's slot.")
    send_recv_s: float = Field(description="Stage-to-stage activation sends, not in the bubble.")
    dp_exposed_s: float = Field(description="DP / ZeRO traffic not hidden by compute.")
    attention_s: float = Field(default=0.0, description="The attention core.")
    other_s: float = Field(
        default=0.0, description="Memory-bound work, embedding, LM head and loss."
    )
    optimizer_s: float = Field(default=0.0, description="Optimizer step and gradient norm.")
    tp_exposed_s: float = Field(
        default=0.0, description="Exposed TP communication (part of fc_s, not summed)."
    )
    ep_exposed_s: float = Field(
        default=0.0, description="EP all-to-alls (part of other_s, not summed)."
    )
    cp_exposed_s: float = Field(
        default=0.0, description="CP K/V ring not hidden by attention (part of other_s)."
    )
    step_s: float = Field(
        description="The sum of every field but tp_exposed_s, ep_exposed_s and cp_exposed_s."
    )


class ClusterCandidatePlan(BaseModel):
    """One costed DP × PP × mesh × micro-batch split."""

    model_config = FROZEN

    dp: int = Field(gt=0, le=MAX_CHIPS)
    pp: int = Field(gt=0, le=MAX_CHIPS)
    rows: int = Field(gt=0, le=MAX_CHIPS)
    cols: int = Field(gt=0, le=MAX_CHIPS)
    depth: int = Field(default=1, gt=0, le=MAX_CHIPS, description="1: a 2D mesh.")
    micro_batches: int = Field(gt=0, le=MAX_DIMENSION)
    vpp: int = Field(default=1, gt=0, le=MAX_DIMENSION, description="Virtual stages per chip.")
    zero: int = Field(default=0, ge=0, le=3, description="ZeRO stage.")
    ep: int = Field(default=1, gt=0, le=MAX_CHIPS, description="Expert-parallel ranks.")
    cp: int = Field(default=1, gt=0, le=MAX_CHIPS, description="Context-parallel ranks.")
    algorithm: AlgorithmName
    step_s: float
    mfu: float = 0.0
    utilization: float
    memory_bytes: float


class ClusterPlan(
    OptionFields,
    order=CLUSTER_FILE_ORDER,
    required=("recompute",),
    missing=CLUSTER_MISSING,
    descriptions=CLUSTER_DESCRIPTIONS,
):
    # the step options' fields are generated from the record (OptionFields); this docstring
    # is the plan schema's description of the section
    """The levels around the mesh: chips = dp × pp × mesh chips (:mod:`meshtune.search.levels`).

    In a plan with this section the top-level mesh, layers, fc_time_s, fc_flops, utilization
    and candidates describe the tensor-parallel level: one micro-batch of ``micro_batch``
    sequences on one mesh, at padded sizes when a dimension was padded.
    """

    model_config = FROZEN

    dp: int = Field(gt=0, le=MAX_CHIPS, description="Data-parallel replicas.")
    pp: int = Field(gt=0, le=MAX_CHIPS, description="Pipeline stages.")
    micro_batches: int = Field(gt=0, le=MAX_DIMENSION, description="Per replica and step.")
    micro_batch: int = Field(gt=0, le=MAX_DIMENSION, description="Sequences per micro-batch.")
    stage_blocks: int = Field(gt=0, description="The most blocks one chip holds.")
    zero1: bool = Field(description="Optimizer state sharded over the DP replicas (zero ≥ 1).")
    zero: int = Field(default=0, ge=0, le=3, description="ZeRO stage.")
    vpp: int = Field(default=1, gt=0, le=MAX_DIMENSION, description="Virtual stages per chip.")
    ep: int = Field(default=1, gt=0, le=MAX_CHIPS, description="Expert-parallel ranks (in DP).")
    cp: int = Field(
        default=1, gt=0, le=MAX_CHIPS, description="Context-parallel ranks (seq_len / cp each)."
    )
    stage_layout: list[int] = Field(default_factory=list, description="Blocks per stage.")
    step: StepPlan
    model_flops: float = Field(default=0.0, description="Model FLOPs of a step (MFU's).")
    hardware_flops: float = Field(default=0.0, description="Model + recompute FLOPs (HFU's).")
    mfu: float = Field(default=0.0, description="model_flops / (step_s · chips · peak).")
    hfu: float = Field(default=0.0, description="hardware_flops / (step_s · chips · peak).")
    tokens_per_s: float = Field(default=0.0, description="batch · seq_len / step_s.")
    flops: float = Field(description="Exact FC FLOPs of one step, all chips.")
    utilization: float = Field(description="flops / (step_s * chips * peak FLOP/s).")
    bubble_fraction: float = Field(
        description="1F1B: ((pp − 1)/v) / (micro_batches + (pp − 1)/v); DualPipe: its bubble / "
        "the pipelined time."
    )
    dp_reduction_s: float = Field(description="Whole DP reduction time before overlap.")
    padding_waste: float = Field(description="1 − exact / padded FC FLOPs of the mesh level.")
    memory: MemoryPlan
    candidates: list[ClusterCandidatePlan] = Field(description="Fastest splits first.")
    rejected: int = Field(ge=0, description="Splits rejected for memory.")
    rejections: list[str] = Field(description="A few of them, closest to fitting first.")


class Plan(BaseModel):
    """A 2D-TP plan for one model on one mesh."""

    model_config = FROZEN

    schema_version: Literal[2] = Field(description="Plan file format version.")
    tool_version: str = Field(pattern=r"^[0-9A-Za-z.+!_-]{1,64}$")
    inputs: PlanInputs
    mesh: MeshShape
    layers: list[LayerPlan]
    transposes: list[Transpose] = Field(description="Layout transposes phase 1 inserts per block.")
    fc_time_s: float = Field(description="FC time of one training step (all blocks).")
    fc_flops: float = Field(description="FC FLOPs of one training step, all chips.")
    utilization: float = Field(description="fc_flops / (fc_time_s * chips * peak FLOP/s).")
    candidates: list[MeshCandidate] = Field(
        description="Best shapes of the chosen algorithm, fastest first (Figure 13's data); "
        "with algorithm 'auto', then every other feasible algorithm's best shape."
    )
    infeasible_shapes: list[str] = Field(description="Shapes rejected, with the reason.")
    cluster: ClusterPlan | None = Field(
        default=None, description="Data / pipeline parallelism and memory, when planned."
    )

    @model_validator(mode="after")
    def _context_parallelism_splits_the_sequence(self) -> "Plan":
        """Every CP degree of the plan cuts ``inputs.seq_len`` into 2·CP equal chunks
        (:mod:`meshtune.step.cp`)."""
        if self.cluster is None:
            return self
        for where, cp in [("cluster.cp", self.cluster.cp)] + [
            (f"cluster.candidates[{i}].cp", c.cp) for i, c in enumerate(self.cluster.candidates)
        ]:
            if cp > 1 and self.inputs.seq_len % (2 * cp):
                raise ValueError(
                    f"field '{where}' is {cp}: inputs.seq_len {self.inputs.seq_len} does not "
                    f"split into 2·cp = {2 * cp} equal chunks"
                )
        return self

    @model_validator(mode="after")
    def _expert_parallelism_divides_dp_and_experts(self) -> "Plan":
        """Every EP degree of the plan divides its DP and the model's expert count (1 for a
        dense model; :mod:`meshtune.step.moe`)."""
        if self.cluster is None:
            return self
        moe = self.inputs.model.moe
        experts = moe.experts if moe is not None else 1
        for where, ep, dp in [("cluster.ep", self.cluster.ep, self.cluster.dp)] + [
            (f"cluster.candidates[{i}].ep", c.ep, c.dp)
            for i, c in enumerate(self.cluster.candidates)
        ]:
            if dp % ep or experts % ep:
                raise ValueError(
                    f"field '{where}' is {ep}: it must divide DP ({dp}) and the model's "
                    f"experts ({experts})"
                )
        return self

    def to_json(self) -> str:
        """Pretty JSON, stable key order (no ``cluster`` or ``inputs.levels`` key in a plan of
        one mesh, no ``groups`` key in a layer of one GeMM: a dense model's plan reads as
        before grouped layers existed).

        Raises :class:`PlanFileError` naming the field when a number is not finite: JSON has
        no NaN or infinity (pydantic would write ``null``), and such a plan is no result.
        """
        for path, number in plan_numbers(self.model_dump(mode="python"), ""):
            if not math.isfinite(number):
                raise PlanFileError(
                    f"the plan is not written: field '{path}' is {number}, not a finite number"
                )
        dense = {i: {"groups"} for i, layer in enumerate(self.layers) if layer.groups == 1}
        if self.cluster is None:
            skip: dict[str, Any] = {"cluster": True, "inputs": {"levels"}, "layers": dense}
            return self.model_dump_json(indent=2, exclude=skip) + "\n"
        return self.model_dump_json(indent=2, exclude={"layers": dense}) + "\n"


def plan_numbers(value: object, path: str) -> Iterator[tuple[str, float]]:
    """Every number in a dumped plan (``model_dump``), with its field path (``a.b[2].c``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from plan_numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from plan_numbers(item, f"{path}[{i}]")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, float(value)


def plan_json_schema() -> str:
    """The JSON Schema of :class:`Plan`."""
    return json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True) + "\n"
