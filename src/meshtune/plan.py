"""The plan: the autotuner's frozen, versioned result, and the function that makes one.

A :class:`Plan` echoes its inputs (the whole model spec, the profile's name and content hash,
chips, batch, sequence length, dataflow mode, requested algorithm, shape restriction), names the
chosen mesh, and for every FC layer records the algorithm and its configuration (e.g. the slice
count S), the phase-1 dataflows and sharding, and the predicted time of each pass split into
prologue / steady state / epilogue and hidden / exposed communication.

``PLAN_SCHEMA_VERSION`` changes whenever a field changes meaning or is removed. Version 2 added
the algorithm and its configuration per layer (version 1 had MeshSlice's ``slices`` and
``slice_candidates``, and the model's ``blocks`` were called ``layers``); :func:`read_plan`
still reads version-1 files, as MeshSlice plans.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import fields
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from meshtune import __version__
from meshtune._toml import describe_validation_error
from meshtune.algorithm import Algorithm, Config
from meshtune.algorithms import DEFAULT_ALGORITHM, REGISTRY, auto_names, get_algorithm
from meshtune.cluster import ClusterCandidate, ClusterOptions, search_cluster
from meshtune.cost.compute import Precision, at_precision
from meshtune.cost.schedule import PassCost
from meshtune.dataflow import (
    DataflowMode,
    Dim,
    LayerDataflow,
    Pass,
    Stationary,
    layer_dataflow,
)
from meshtune.errors import InfeasibleError, MeshtuneError, PlanFileError, ProfileError, SpecError
from meshtune.layers import FcLayer, fc_layers
from meshtune.mesh import MAX_CHIPS, Mesh, check_chips, parse_mesh
from meshtune.option_fields import (
    CpCommField,
    GradAccumulationField,
    GradAllReduceField,
    PrecisionField,
    ScheduleField,
    Zero3RecomputeGatherField,
)
from meshtune.search import LayerChoice, MeshResult, SearchResult, flop_utilization, search
from meshtune.specs import HardwareProfile, ModelSpec

PLAN_SCHEMA_VERSION: Literal[2] = 2
MAX_TOP = 1000
"""The most candidates ``--top`` lists."""
READABLE_VERSIONS = (1, 2)
AUTO = "auto"

# Sizes above this are refused: far beyond any model, and they keep every number exact.
MAX_DIMENSION = 2**40

_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)

Dimension = Annotated[int, Field(gt=0, le=MAX_DIMENSION)]
Knob = Annotated[int, Field(ge=1, le=MAX_DIMENSION)]

# ---- Vocabularies. A plan file is shared input: every string in it that names something is one
# of a closed set, so that no string of a plan reaches generated code, a file path or a
# command line unchecked (free text, e.g. a model's display_name, is only ever shown quoted).

LayerName = Literal["qkv", "attn_out", "mlp_up", "mlp_down"]
"""The FC layers of a block (:func:`meshtune.layers.fc_layers`)."""
Tensor = Literal["X", "W", "Y"]
FORMULAS = frozenset(
    op.formula
    for stationary in Stationary
    for transposed in (False, True)
    for op in layer_dataflow(FcLayer("x", 1, 1, 1, None), stationary, transposed).ops
)
"""Every pass formula phase 1 writes (Table 1)."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""A catalog name (a file stem): never a path, never a file name with a suffix."""
KNOB_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_TRANSPOSE = re.compile(r"transpose (qkv|attn_out|mlp_up|mlp_down) output before the residual add")


def catalog_name(value: str) -> str:
    """``value`` if it is a catalog name (see :data:`NAME_PATTERN`), else ``ValueError``.

    A plan names its model and profile by catalog name; a path (``/proc/kmsg``,
    ``../x.toml``) in a plan is refused: files are named on the command line only.
    """
    if not NAME_PATTERN.fullmatch(value) or value.lower().endswith((".toml", ".json")):
        raise ValueError(
            f"{value!r} is not a catalog name (letters, digits, '_', '.', '-'; no path, no "
            "suffix): a plan names its model and profile by catalog name; give a file on the "
            "command line instead (--profile FILE)"
        )
    return value


def _registered(value: str) -> str:
    if value not in REGISTRY:
        raise ValueError(f"algorithm {value!r} is not registered; known: {', '.join(REGISTRY)}")
    return value


def _requested(value: str) -> str:
    return value if value == AUTO else _registered(value)


def _formula(value: str) -> str:
    if value not in FORMULAS:
        raise ValueError(
            f"{value!r} is not a Table 1 formula; known: {', '.join(sorted(FORMULAS))}"
        )
    return value


def _transpose(value: str) -> str:
    if not _TRANSPOSE.fullmatch(value):
        raise ValueError(f"{value!r} is not a transpose phase 1 inserts")
    return value


def _knobs(value: dict[str, int]) -> dict[str, int]:
    for key in value:
        if not KNOB_PATTERN.fullmatch(key):
            raise ValueError(f"{key!r} is not a configuration knob name")
    return value


def _mesh_label(value: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]{0,8}x[1-9][0-9]{0,8}(x[1-9][0-9]{0,8})?", value):
        raise ValueError(f"{value!r} is not a mesh shape like 32x8 or 16x16x4")
    return value


AlgorithmName = Annotated[str, AfterValidator(_registered)]
CatalogName = Annotated[str, AfterValidator(catalog_name)]
KnobConfig = Annotated[dict[str, Knob], AfterValidator(_knobs)]
MeshLabel = Annotated[str, AfterValidator(_mesh_label)]
Sharding = Annotated[list[Dim], Field(min_length=2, max_length=2)]


class PlanLevels(BaseModel):
    """What the cluster search was asked for (:class:`meshtune.cluster.ClusterOptions`)."""

    model_config = _FROZEN

    dp: int | None = Field(default=None, gt=0, le=MAX_CHIPS, description="Pinned DP (or None).")
    pp: int | None = Field(default=None, gt=0, le=MAX_CHIPS, description="Pinned PP (or None).")
    micro_batches: int | None = Field(default=None, gt=0, le=MAX_DIMENSION)
    zero1: bool = False
    recompute: Literal["none", "selective", "full"] = "selective"
    zero: int | None = Field(default=None, ge=0, le=3, description="Pinned ZeRO stage.")
    vpp: int | None = Field(default=None, gt=0, le=MAX_DIMENSION, description="Pinned v.")
    headroom: float = Field(default=0.0, ge=0, lt=1, description="Memory left free.")
    attention: Literal["fused", "plain"] = "fused"
    dropout: bool = Field(default=False, description="Attention and hidden dropout on.")
    grad_overlap: bool = Field(default=True, description="DP reduction overlaps the backward.")
    fp32_grads: bool = Field(default=False, description="Gradients reduced in fp32.")
    grad_accumulation: GradAccumulationField = "fused"
    grad_all_reduce: GradAllReduceField = False
    zero3_recompute_gather: Zero3RecomputeGatherField = False
    cp_comm: CpCommField = "ring"
    schedule: ScheduleField = "1f1b"
    precision: PrecisionField = "bf16"
    ep: int | None = Field(default=None, gt=0, le=MAX_CHIPS, description="Pinned EP.")
    cp: int | None = Field(default=None, gt=0, le=MAX_CHIPS, description="Pinned CP.")

    @classmethod
    def of(cls, options: ClusterOptions) -> PlanLevels:
        """The record of ``options``: every field, under the same name."""
        return cls(**{field.name: getattr(options, field.name) for field in fields(options)})

    def options(self) -> ClusterOptions:
        """The search options these levels record (the inverse of :meth:`of`)."""
        return ClusterOptions(**self.model_dump())


class PlanInputs(BaseModel):
    """Everything the plan was computed from."""

    model_config = _FROZEN

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
    algorithm: Annotated[str, AfterValidator(_requested)] = Field(
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
        return "bf16" if self.levels is None else self.levels.precision

    def asked_top(self, recorded_candidates: int) -> int:
        """The ``--top`` that made the plan: :attr:`top`, else (older files) the number of
        recorded mesh candidates, at least 1."""
        return self.top if self.top is not None else max(1, recorded_candidates)

    def plan_again(
        self,
        model: ModelSpec,
        profile: HardwareProfile,
        *,
        algorithm: str | None = None,
        top: int = 5,
    ) -> Plan:
        """These inputs planned again with ``model`` and ``profile`` (:func:`make_plan`):
        chips, batch, sequence, dataflow mode, shapes, the recorded cluster levels (none: one
        mesh) and the recorded algorithm unless ``algorithm`` names another."""
        return make_plan(
            model,
            profile,
            self.chips,
            batch=self.batch,
            seq_len=self.seq_len,
            mode=self.dataflow_mode,
            algorithm=algorithm or self.algorithm,
            shapes=self.shapes,
            top=top,
            cluster=self.levels.options() if self.levels is not None else None,
        )

    @field_validator("model")
    @classmethod
    def _model_by_catalog_name(cls, model: ModelSpec) -> ModelSpec:
        catalog_name(model.name)
        return model


class MeshShape(BaseModel):
    """P_r × P_c (× depth)."""

    model_config = _FROZEN

    rows: int = Field(gt=0, le=MAX_CHIPS, description="P_r: chips per mesh column (axis 0).")
    cols: int = Field(gt=0, le=MAX_CHIPS, description="P_c: chips per mesh row (axis 1).")
    depth: int = Field(default=1, gt=0, le=MAX_CHIPS, description="Chips per axis-2 ring.")

    def to_mesh(self) -> Mesh:
        """The :class:`~meshtune.mesh.Mesh` this describes."""
        return Mesh(self.rows, self.cols, self.depth)


class PassPlan(BaseModel):
    """Predicted cost of one GeMM of a layer (seconds, one block)."""

    model_config = _FROZEN

    name: Pass
    formula: Annotated[str, AfterValidator(_formula)]
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

    model_config = _FROZEN

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

    model_config = _FROZEN

    algorithm: AlgorithmName
    rows: int = Field(gt=0, le=MAX_CHIPS)
    cols: int = Field(gt=0, le=MAX_CHIPS)
    depth: int = Field(default=1, gt=0, le=MAX_CHIPS)
    fc_time_s: float
    utilization: float
    configs: dict[LayerName, KnobConfig] = Field(description="Per layer, the chosen knobs.")


class MemoryPlan(BaseModel):
    """Bytes per chip by term (:mod:`meshtune.memory`), and the profile's capacity."""

    model_config = _FROZEN

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

    model_config = _FROZEN

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

    model_config = _FROZEN

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


class ClusterPlan(BaseModel):
    """The levels around the mesh: chips = dp × pp × mesh chips (:mod:`meshtune.cluster`).

    In a plan with this section the top-level mesh, layers, fc_time_s, fc_flops, utilization
    and candidates describe the tensor-parallel level: one micro-batch of ``micro_batch``
    sequences on one mesh, at padded sizes when a dimension was padded.
    """

    model_config = _FROZEN

    dp: int = Field(gt=0, le=MAX_CHIPS, description="Data-parallel replicas.")
    pp: int = Field(gt=0, le=MAX_CHIPS, description="Pipeline stages.")
    micro_batches: int = Field(gt=0, le=MAX_DIMENSION, description="Per replica and step.")
    micro_batch: int = Field(gt=0, le=MAX_DIMENSION, description="Sequences per micro-batch.")
    stage_blocks: int = Field(gt=0, description="The most blocks one chip holds.")
    zero1: bool = Field(description="Optimizer state sharded over the DP replicas (zero ≥ 1).")
    recompute: Literal["none", "selective", "full"]
    zero: int = Field(default=0, ge=0, le=3, description="ZeRO stage.")
    vpp: int = Field(default=1, gt=0, le=MAX_DIMENSION, description="Virtual stages per chip.")
    ep: int = Field(default=1, gt=0, le=MAX_CHIPS, description="Expert-parallel ranks (in DP).")
    cp: int = Field(
        default=1, gt=0, le=MAX_CHIPS, description="Context-parallel ranks (seq_len / cp each)."
    )
    attention: Literal["fused", "plain"] = "plain"
    dropout: bool = Field(default=False, description="Attention and hidden dropout on.")
    grad_overlap: bool = Field(default=True, description="DP reduction overlaps the backward.")
    fp32_grads: bool = Field(default=False, description="Gradients reduced in fp32.")
    grad_accumulation: GradAccumulationField = "fused"
    grad_all_reduce: GradAllReduceField = False
    zero3_recompute_gather: Zero3RecomputeGatherField = False
    cp_comm: CpCommField = "ring"
    schedule: ScheduleField = "1f1b"
    precision: PrecisionField = "bf16"
    headroom: float = Field(default=0.0, ge=0, lt=1, description="Memory left free.")
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

    model_config = _FROZEN

    schema_version: Literal[2] = Field(description="Plan file format version.")
    tool_version: str = Field(pattern=r"^[0-9A-Za-z.+!_-]{1,64}$")
    inputs: PlanInputs
    mesh: MeshShape
    layers: list[LayerPlan]
    transposes: list[Annotated[str, AfterValidator(_transpose)]] = Field(
        description="Layout transposes phase 1 inserts per block."
    )
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
    def _context_parallelism_splits_the_sequence(self) -> Plan:
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
    def _expert_parallelism_divides_dp_and_experts(self) -> Plan:
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


def upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 plan (MeshSlice only) in version-2 form; odd shapes are left to validation."""
    out = {**data, "schema_version": 2}
    if isinstance(data.get("inputs"), dict):
        inputs = {**data["inputs"], "algorithm": DEFAULT_ALGORITHM}
        model = inputs.get("model")
        if isinstance(model, dict) and "layers" in model:
            inputs["model"] = {("blocks" if k == "layers" else k): v for k, v in model.items()}
        out["inputs"] = inputs
    layers = []
    for layer in data.get("layers") or []:
        if not isinstance(layer, dict):
            layers.append(layer)
            continue
        new = {k: v for k, v in layer.items() if k not in ("slices", "slice_candidates")}
        slices = layer.get("slices")
        new["algorithm"] = DEFAULT_ALGORITHM
        new["config"] = {"slices": slices}
        new["config_candidates"] = [{"slices": s} for s in layer.get("slice_candidates") or []]
        passes = layer.get("passes")
        if isinstance(passes, list):
            new["passes"] = [
                {**p, "iterations": slices} if isinstance(p, dict) else p for p in passes
            ]
        layers.append(new)
    out["layers"] = layers
    out["candidates"] = [
        {
            **{k: v for k, v in c.items() if k != "slices"},
            "algorithm": DEFAULT_ALGORITHM,
            "configs": {name: {"slices": s} for name, s in (c.get("slices") or {}).items()},
        }
        if isinstance(c, dict)
        else c
        for c in data.get("candidates") or []
    ]
    return out


def recorded_layer(
    plan: Plan, layer: LayerPlan, error: type[MeshtuneError] = PlanFileError
) -> tuple[Algorithm, Config, LayerDataflow]:
    """The registered algorithm, configuration and full-size phase-1 layer a plan records.

    Raises ``error`` naming the layer for an unregistered algorithm, or a configuration that is
    not legal on the plan's mesh (with the legal ones).
    """
    algorithm = REGISTRY.get(layer.algorithm)
    if algorithm is None:
        raise error(
            f"layer {layer.name}: algorithm '{layer.algorithm}' is not registered; "
            f"known: {', '.join(REGISTRY)}"
        )
    mesh = plan.mesh.to_mesh()
    config = Config.of(**layer.config)
    # The block's fed_by links (which layer feeds which) come from the plan's model.
    fed_by = {fc.name: fc.fed_by for fc in fc_layers(plan.inputs.model, 1, 1)}.get(layer.name)
    fc = FcLayer(
        layer.name, layer.tokens, layer.in_features, layer.out_features, fed_by, layer.groups
    )
    full = layer_dataflow(fc, Stationary(layer.stationary), layer.transposed)
    legal, reason = algorithm.configs(full, mesh, plan.inputs.slice_block)
    if reason is not None or config not in legal:
        raise error(
            reason
            or f"layer {layer.name}: configuration {config.label} is not legal for "
            f"{algorithm.name} on {mesh.label} (legal: {'; '.join(c.label for c in legal)})"
        )
    return algorithm, config, full


class _StrictJsonError(ValueError):
    """A JSON document meshtune does not accept although Python's parser would."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _StrictJsonError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _StrictJsonError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _StrictJsonError(f"the number {text[:40]} is out of range")
    return value


def plan_json(text: str, source: str) -> dict[str, Any]:
    """A plan file's JSON object; :class:`PlanFileError` naming ``source`` when it is none.

    Strict JSON: a key twice in one object (which value counts would depend on the reader),
    ``NaN`` / ``Infinity`` (not JSON) and numbers beyond a float (``1e400``) are refused.
    """
    try:
        data = json.loads(
            text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite
        )
    except json.JSONDecodeError as exc:
        raise PlanFileError(f"{source}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except _StrictJsonError as exc:
        raise PlanFileError(f"{source}: invalid JSON: {exc}") from None
    except (RecursionError, ValueError):
        raise PlanFileError(f"{source}: JSON with out-of-range numbers or nesting") from None
    if not isinstance(data, dict):
        raise PlanFileError(f"{source}: a plan file holds a JSON object, not {type(data).__name__}")
    return data


def read_plan(text: str, source: str) -> Plan:
    """Parse a plan file's text (version 1 or 2); errors name ``source`` and the bad field.

    Types are strict (``"4"``, ``4.0`` and ``"true"`` are not the integer 4 or a flag), and
    every name is checked against its vocabulary (the fields' types). This is the schema only:
    commands read plans through :func:`meshtune.verify.load_plan`, which also applies verify's
    cheap structural checks.
    """
    data = plan_json(text, source)
    version = data.get("schema_version")
    if "schema_version" not in data:
        raise PlanFileError(f"{source}: no schema_version; is this a meshtune plan file?")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise PlanFileError(
            f"{source}: plan schema_version {version!r} is not supported (this meshtune reads "
            f"versions {readable})"
        )
    if version == 1:
        data = upgrade_v1(data)
    try:
        return Plan.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise PlanFileError(f"{source}: {describe_validation_error(exc)}") from None


def _pass_plan(op_cost: PassCost, choice: LayerChoice, index: int) -> PassPlan:
    op = choice.dataflow.ops[index]
    return PassPlan(
        name=op.pass_,
        formula=op.formula,
        dataflow=op.dataflow.value,
        m=op.m,
        n=op.n,
        k=op.k,
        prologue_s=op_cost.prologue_s,
        steady_s=op_cost.steady_s,
        epilogue_s=op_cost.epilogue_s,
        iterations=op_cost.iterations,
        total_s=op_cost.total_s,
        compute_s=op_cost.compute_s,
        comm_hidden_s=op_cost.hidden_s,
        comm_exposed_s=op_cost.exposed_s,
        launch_s=op_cost.comm.launch_s,
        sync_s=op_cost.comm.sync_s,
        transfer_s=op_cost.comm.transfer_s,
    )


def layer_plan(
    choice: LayerChoice, algorithm: str, mesh: Mesh, profile: HardwareProfile
) -> LayerPlan:
    """The plan record of one layer's choice (shared by :func:`make_plan` and verify)."""
    df = choice.dataflow
    layer = df.layer
    flops = 3 * layer.flops_per_pass
    return LayerPlan(
        name=layer.name,
        tokens=layer.tokens,
        in_features=layer.in_features,
        out_features=layer.out_features,
        groups=layer.groups,
        stationary=df.stationary.value,
        transposed=df.transposed,
        dataflows={op.pass_: op.dataflow.value for op in df.ops},
        sharding={t: list(dims) for t, dims in df.sharding.items()},
        sliced_dim=df.sliced_dim,
        algorithm=algorithm,
        config=dict(choice.config),
        config_candidates=[dict(c) for c in choice.candidates],
        passes=[_pass_plan(cost, choice, i) for i, cost in enumerate(choice.passes)],
        time_s=choice.time_s,
        utilization=flop_utilization(flops, choice.time_s, mesh.chips, profile.peak_flops_per_s),
    )


def _candidate(result: MeshResult, profile: HardwareProfile) -> MeshCandidate:
    return MeshCandidate(
        algorithm=result.algorithm.name,
        rows=result.mesh.rows,
        cols=result.mesh.cols,
        depth=result.mesh.depth,
        fc_time_s=result.time_s,
        utilization=result.utilization(profile),
        configs={c.dataflow.layer.name: dict(c.config) for c in result.layers},
    )


def weak_scaling_batch(chips: int) -> int:
    """The weak-scaling batch of §5.1.1: ``chips // 2`` sequences, at least one."""
    return max(1, chips // 2)


def check_size(name: str, value: object) -> int:
    """``value`` as a whole number in 1 … :data:`MAX_DIMENSION`, or :class:`InfeasibleError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InfeasibleError(f"{name} must be a whole number, got {value!r}")
    if not 1 <= value <= MAX_DIMENSION:
        raise InfeasibleError(f"{name} must be between 1 and {MAX_DIMENSION:,}, got {value:,}")
    return value


def search_algorithms(
    algorithm: str,
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    *,
    batch: int,
    seq_len: int,
    mode: DataflowMode = "auto",
    meshes: list[Mesh] | None = None,
    all_algorithms: bool = False,
) -> list[SearchResult]:
    """The search of ``algorithm`` (a registered name), or for ``"auto"`` of every algorithm an
    engine runs (every registered one with ``all_algorithms``, :func:`requested_names`).

    Results come fastest first. With ``"auto"``, algorithms with no feasible mesh are skipped;
    :class:`InfeasibleError` when none (or the named one) has a feasible mesh.
    """
    layers = fc_layers(model, batch, seq_len)
    names = requested_names(algorithm, all_algorithms)
    results: list[SearchResult] = []
    problems: list[str] = []
    for name in names:
        try:
            results.append(
                search(
                    layers,
                    profile,
                    chips,
                    REGISTRY[name],
                    blocks=model.blocks,
                    mode=mode,
                    shapes=meshes,
                )
            )
        except InfeasibleError as exc:
            if algorithm != AUTO:
                raise
            problems.append(str(exc))
    if not results:
        raise InfeasibleError("no registered algorithm has a feasible mesh: " + "; ".join(problems))
    order = {name: i for i, name in enumerate(names)}
    results.sort(key=lambda r: (r.best.time_s, order[r.algorithm.name]))
    return results


def requested_names(algorithm: str, all_algorithms: bool = False) -> list[str]:
    """The registered names ``algorithm`` stands for: itself, or for ``"auto"`` those an engine
    runs (every one with ``all_algorithms``; :func:`meshtune.algorithms.auto_names`)."""
    if algorithm == AUTO:
        return list(auto_names(all_algorithms))
    return [get_algorithm(algorithm).name]


def make_plan(
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    *,
    batch: int | None = None,
    seq_len: int | None = None,
    mode: DataflowMode = "auto",
    algorithm: str = DEFAULT_ALGORITHM,
    shapes: list[str] | None = None,
    top: int = 5,
    cluster: ClusterOptions | None = None,
    all_algorithms: bool = False,
) -> Plan:
    """Run both phases with ``algorithm`` (a registered name, or ``"auto"`` for the fastest
    that an engine runs; with ``all_algorithms`` the fastest registered one) and package the
    result.

    Defaults follow the weak-scaling setup of §5.1.1: ``batch = chips // 2`` sequences (at least
    one) of the model's ``seq_len``. Raises :class:`InfeasibleError` for sizes that are not
    whole numbers in range or when no mesh shape is valid, :class:`MeshtuneError` for an unknown
    algorithm.

    With ``cluster`` the chips are split into DP × PP × a mesh (:mod:`meshtune.cluster`; pinned
    levels from ``cluster``, ``shapes`` restrict the mesh) and the plan gets its ``cluster``
    section; without, the mesh takes every chip, as in the paper.
    """
    check_chips(chips)
    batch = weak_scaling_batch(chips) if batch is None else check_size("batch", batch)
    seq_len = model.seq_len if seq_len is None else check_size("sequence length", seq_len)
    check_size("tokens per step (batch × sequence length)", batch * seq_len)
    check_size("top", top)
    if shapes is not None and not shapes:
        raise InfeasibleError("no mesh shape to search: the shape list is empty")
    meshes = [parse_mesh(s) for s in shapes] if shapes is not None else None
    if cluster is not None:
        names = requested_names(algorithm, all_algorithms)
        if profile.memory_bytes is None:
            raise ProfileError(
                f"profile '{profile.name}' has no memory_bytes (one chip's memory capacity, "
                "bytes), which a cluster plan needs to keep the split within memory; add it to "
                "the profile (calibrate --base a profile that has it) or plan one mesh of every "
                "chip with --mesh-only"
            )
        return _cluster_plan(
            model, profile, chips, batch, seq_len, mode, algorithm, meshes, top, cluster, names
        )
    results = search_algorithms(
        algorithm,
        model,
        profile,
        chips,
        batch=batch,
        seq_len=seq_len,
        mode=mode,
        meshes=meshes,
        all_algorithms=all_algorithms,
    )
    result = results[0]
    best = result.best
    others = [_candidate(r.best, profile) for r in results[1:]]
    return Plan(
        schema_version=PLAN_SCHEMA_VERSION,
        tool_version=__version__,
        inputs=_inputs(model, profile, chips, batch, seq_len, mode, algorithm, meshes, top),
        mesh=MeshShape(rows=best.mesh.rows, cols=best.mesh.cols, depth=best.mesh.depth),
        layers=[layer_plan(c, result.algorithm.name, best.mesh, profile) for c in best.layers],
        transposes=list(result.block.transposes),
        fc_time_s=best.time_s,
        fc_flops=float(best.flops),
        utilization=best.utilization(profile),
        candidates=[_candidate(r, profile) for r in result.ranked[:top]] + others,
        infeasible_shapes=[r.infeasible or "" for r in result.infeasible],
    )


def _inputs(
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    batch: int,
    seq_len: int,
    mode: DataflowMode,
    algorithm: str,
    meshes: list[Mesh] | None,
    top: int,
) -> PlanInputs:
    """The inputs a plan echoes (``levels`` unset: a plan of one mesh).

    Raises :class:`SpecError` / :class:`ProfileError` for a model or profile name a plan file
    cannot hold (:func:`catalog_name`).
    """
    for name, error in ((model.name, SpecError), (profile.name, ProfileError)):
        try:
            catalog_name(name)
        except ValueError as exc:
            raise error(f"cannot plan: {exc}; rename the file") from None
    return PlanInputs(
        model=model,
        profile=profile.name,
        profile_hash=profile.content_hash(),
        bytes_per_element=profile.bytes_per_element,
        slice_block=profile.slice_block,
        chips=chips,
        batch=batch,
        seq_len=seq_len,
        dataflow_mode=mode,
        algorithm=algorithm,
        shapes=[m.label for m in meshes] if meshes is not None else None,
        top=top,
    )


def step_record(candidate: ClusterCandidate, profile: HardwareProfile) -> dict[str, Any]:
    """The ``cluster`` fields the step model derives for ``candidate`` (shared by
    :func:`make_plan` and verify's re-derivation)."""
    cost = candidate.cost
    return {
        "zero": candidate.zero,
        "vpp": candidate.vpp,
        "ep": candidate.ep,
        "cp": candidate.cp,
        "stage_layout": list(cost.layout.blocks),
        "step": StepPlan(
            **{f.name: getattr(cost.split, f.name) for f in fields(cost.split)},
            step_s=cost.step_s,
        ),
        "flops": candidate.flops,
        "model_flops": cost.model_flops,
        "hardware_flops": cost.hardware_flops,
        "mfu": cost.mfu(profile),
        "hfu": cost.hfu(profile),
        "tokens_per_s": cost.tokens_per_s,
        "utilization": candidate.utilization(profile),
        "bubble_fraction": cost.bubble_fraction,
        "dp_reduction_s": candidate.dp_reduction_s,
        "padding_waste": candidate.padding_waste,
        "memory": MemoryPlan(
            **{f"{k}_bytes": v for k, v in candidate.memory.terms().items()},
            total_bytes=candidate.memory.total_bytes,
            capacity_bytes=profile.memory_bytes,
        ),
    }


def _cluster_plan(
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    batch: int,
    seq_len: int,
    mode: DataflowMode,
    algorithm: str,
    meshes: list[Mesh] | None,
    top: int,
    options: ClusterOptions,
    names: list[str],
) -> Plan:
    """:func:`make_plan` with the cluster search (its docstring), over ``names``."""
    found = search_cluster(
        model,
        profile,
        chips,
        batch=batch,
        seq_len=seq_len,
        algorithms=[REGISTRY[n] for n in names],
        mode=mode,
        options=options,
        meshes=meshes,
        top=top,
    )
    best = found.best
    chosen = best.result
    feasible = [r for r in found.level if r.feasible]
    gemm = at_precision(profile, options.precision)  # FC figures against the FC GeMMs' peak
    return Plan(
        schema_version=PLAN_SCHEMA_VERSION,
        tool_version=__version__,
        inputs=_inputs(
            model, profile, chips, batch, seq_len, mode, algorithm, meshes, top
        ).model_copy(update={"levels": PlanLevels.of(options)}),
        mesh=MeshShape(rows=chosen.mesh.rows, cols=chosen.mesh.cols, depth=chosen.mesh.depth),
        layers=[layer_plan(c, chosen.algorithm.name, chosen.mesh, gemm) for c in chosen.layers],
        transposes=list(found.block.transposes),
        fc_time_s=chosen.time_s,
        fc_flops=float(chosen.flops),
        utilization=chosen.utilization(gemm),
        candidates=[_candidate(r, gemm) for r in feasible[:top]]
        + [_candidate(r, gemm) for r in found.others],
        infeasible_shapes=[r.infeasible or "" for r in found.level if not r.feasible],
        cluster=ClusterPlan(
            dp=best.dp,
            pp=best.pp,
            micro_batches=best.micro_batches,
            micro_batch=best.micro_batch,
            stage_blocks=best.stage_blocks,
            zero1=best.zero >= 1,
            recompute=options.recompute,
            attention=options.attention,
            dropout=options.dropout,
            grad_overlap=options.grad_overlap,
            fp32_grads=options.fp32_grads,
            grad_accumulation=options.grad_accumulation,
            grad_all_reduce=options.grad_all_reduce,
            zero3_recompute_gather=options.zero3_recompute_gather,
            cp_comm=options.cp_comm,
            schedule=options.schedule,
            precision=options.precision,
            headroom=options.headroom,
            **step_record(best, profile),
            candidates=[
                ClusterCandidatePlan(
                    dp=c.dp,
                    pp=c.pp,
                    rows=c.mesh.rows,
                    cols=c.mesh.cols,
                    depth=c.mesh.depth,
                    micro_batches=c.micro_batches,
                    vpp=c.vpp,
                    zero=c.zero,
                    ep=c.ep,
                    cp=c.cp,
                    algorithm=c.result.algorithm.name,
                    step_s=c.step.step_s,
                    mfu=c.cost.mfu(profile),
                    utilization=c.utilization(profile),
                    memory_bytes=c.memory.total_bytes,
                )
                for c in found.ranked
            ],
            rejected=found.rejected,
            rejections=list(found.rejections),
        ),
    )
