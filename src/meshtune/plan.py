"""The plan: the autotuner's frozen, versioned result, and the function that makes one.

A :class:`Plan` echoes its inputs (the whole model spec, the profile's name and content hash,
chips, batch, sequence length, dataflow mode, shape restriction), names the chosen mesh, and for
every FC layer records the phase-1 dataflows and sharding, the phase-2 slice count, and the
predicted time of each pass split into prologue / steady state / epilogue and hidden / exposed
communication. ``PLAN_SCHEMA_VERSION`` changes whenever a field changes meaning or is removed.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from meshtune import __version__
from meshtune._toml import describe_validation_error
from meshtune.cost.meshslice import MeshAxes, PassCost
from meshtune.dataflow import DataflowMode, Pass
from meshtune.errors import InfeasibleError, PlanFileError
from meshtune.layers import fc_layers
from meshtune.search import LayerChoice, MeshResult, flop_utilization, parse_shape, search
from meshtune.specs import HardwareProfile, ModelSpec

PLAN_SCHEMA_VERSION: Literal[1] = 1

_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class PlanInputs(BaseModel):
    """Everything the plan was computed from."""

    model_config = _FROZEN

    model: ModelSpec
    profile: str = Field(description="Profile name (file stem).")
    profile_hash: str = Field(description="sha256 of the profile's content.")
    bytes_per_element: int = Field(gt=0, description="Operand width the plan was costed for.")
    slice_block: int = Field(gt=0, description="Algorithm 2's block size B the slices use.")
    chips: int = Field(gt=0)
    batch: int = Field(gt=0, description="Sequences per step.")
    seq_len: int = Field(gt=0)
    dataflow_mode: Literal["auto", "ystn"]
    shapes: list[str] | None = Field(description="Mesh shapes the search was restricted to.")


class MeshShape(BaseModel):
    """P_r × P_c."""

    model_config = _FROZEN

    rows: int = Field(gt=0, description="P_r: chips per mesh column (axis-0 ring).")
    cols: int = Field(gt=0, description="P_c: chips per mesh row (axis-1 ring).")


class PassPlan(BaseModel):
    """Predicted cost of one GeMM of a layer (seconds, one block)."""

    model_config = _FROZEN

    name: Pass
    formula: str
    dataflow: Literal["OS", "LS", "RS"]
    m: int
    n: int
    k: int
    prologue_s: float
    steady_s: float = Field(description="One steady-state iteration.")
    epilogue_s: float
    total_s: float = Field(description="prologue + (S - 1) * steady + epilogue.")
    compute_s: float
    comm_hidden_s: float
    comm_exposed_s: float
    launch_s: float
    sync_s: float
    transfer_s: float


class LayerPlan(BaseModel):
    """Phase-1 and phase-2 choices for one FC layer."""

    model_config = _FROZEN

    name: str
    tokens: int
    in_features: int
    out_features: int
    stationary: Literal["Y", "X", "W"]
    transposed: bool
    dataflows: dict[Pass, Literal["OS", "LS", "RS"]]
    sharding: dict[str, list[str]] = Field(
        description="Per tensor: [dimension over mesh rows, dimension over mesh columns]."
    )
    sliced_dim: str
    slices: int
    slice_candidates: list[int]
    passes: list[PassPlan]
    time_s: float = Field(description="forward + backward data + backward weight, one block.")
    utilization: float


class MeshCandidate(BaseModel):
    """One evaluated mesh shape (the data behind Figure 13)."""

    model_config = _FROZEN

    rows: int
    cols: int
    fc_time_s: float
    utilization: float
    slices: dict[str, int]


class Plan(BaseModel):
    """A MeshSlice 2D-TP plan for one model on one mesh."""

    model_config = _FROZEN

    schema_version: Literal[1] = Field(description="Plan file format version.")
    tool_version: str
    inputs: PlanInputs
    mesh: MeshShape
    layers: list[LayerPlan]
    transposes: list[str] = Field(description="Layout transposes phase 1 inserts per block.")
    fc_time_s: float = Field(description="FC time of one training step (all blocks).")
    fc_flops: float = Field(description="FC FLOPs of one training step, all chips.")
    utilization: float = Field(description="fc_flops / (fc_time_s * chips * peak FLOP/s).")
    candidates: list[MeshCandidate] = Field(description="Best shapes, fastest first.")
    infeasible_shapes: list[str] = Field(description="Shapes rejected, with the reason.")

    def to_json(self) -> str:
        """Pretty JSON, stable key order."""
        return self.model_dump_json(indent=2) + "\n"


def plan_json_schema() -> str:
    """The JSON Schema of :class:`Plan`."""
    return json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True) + "\n"


def read_plan(text: str, source: str) -> Plan:
    """Parse a plan file's text; errors name ``source`` and the bad field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFileError(f"{source}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if isinstance(data, dict) and data.get("schema_version") != PLAN_SCHEMA_VERSION:
        raise PlanFileError(
            f"{source}: schema_version {data.get('schema_version')!r} is not supported "
            f"(this meshtune reads {PLAN_SCHEMA_VERSION})"
        )
    try:
        return Plan.model_validate(data)
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
        total_s=op_cost.total_s,
        compute_s=op_cost.compute_s,
        comm_hidden_s=op_cost.hidden_s,
        comm_exposed_s=op_cost.exposed_s,
        launch_s=op_cost.comm.launch_s,
        sync_s=op_cost.comm.sync_s,
        transfer_s=op_cost.comm.transfer_s,
    )


def _layer_plan(choice: LayerChoice, mesh: MeshAxes, profile: HardwareProfile) -> LayerPlan:
    df = choice.dataflow
    layer = df.layer
    flops = 3 * layer.flops_per_pass
    return LayerPlan(
        name=layer.name,
        tokens=layer.tokens,
        in_features=layer.in_features,
        out_features=layer.out_features,
        stationary=df.stationary.value,
        transposed=df.transposed,
        dataflows={op.pass_: op.dataflow.value for op in df.ops},
        sharding={t: list(dims) for t, dims in df.sharding.items()},
        sliced_dim=df.sliced_dim,
        slices=choice.slices,
        slice_candidates=list(choice.slice_candidates),
        passes=[_pass_plan(cost, choice, i) for i, cost in enumerate(choice.passes)],
        time_s=choice.time_s,
        utilization=flop_utilization(flops, choice.time_s, mesh.chips, profile.peak_flops_per_s),
    )


def _candidate(result: MeshResult, profile: HardwareProfile) -> MeshCandidate:
    return MeshCandidate(
        rows=result.mesh.rows,
        cols=result.mesh.cols,
        fc_time_s=result.time_s,
        utilization=result.utilization(profile),
        slices={c.dataflow.layer.name: c.slices for c in result.layers},
    )


def make_plan(
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    *,
    batch: int | None = None,
    seq_len: int | None = None,
    mode: DataflowMode = "auto",
    shapes: list[str] | None = None,
    top: int = 5,
) -> Plan:
    """Run both phases and package the result.

    Defaults follow the weak-scaling setup of §5.1.1: ``batch = chips // 2`` sequences (at least
    one) of the model's ``seq_len``. Raises :class:`InfeasibleError` for non-positive sizes or
    when no mesh shape is valid.
    """
    if chips < 1:
        raise InfeasibleError(f"--chips must be a positive integer, got {chips}")
    batch = max(1, chips // 2) if batch is None else batch
    seq_len = model.seq_len if seq_len is None else seq_len
    if batch < 1:
        raise InfeasibleError(f"--batch must be a positive integer, got {batch}")
    if seq_len < 1:
        raise InfeasibleError(f"--seq must be a positive integer, got {seq_len}")
    if top < 1:
        raise InfeasibleError(f"--top must be a positive integer, got {top}")
    meshes = [parse_shape(s) for s in shapes] if shapes is not None else None
    layers = fc_layers(model, batch, seq_len)
    result = search(layers, profile, chips, blocks=model.layers, mode=mode, shapes=meshes)
    best = result.best
    return Plan(
        schema_version=PLAN_SCHEMA_VERSION,
        tool_version=__version__,
        inputs=PlanInputs(
            model=model,
            profile=profile.name,
            profile_hash=profile.content_hash(),
            bytes_per_element=profile.bytes_per_element,
            slice_block=profile.slice_block,
            chips=chips,
            batch=batch,
            seq_len=seq_len,
            dataflow_mode=mode,
            shapes=[f"{m.rows}x{m.cols}" for m in meshes] if meshes is not None else None,
        ),
        mesh=MeshShape(rows=best.mesh.rows, cols=best.mesh.cols),
        layers=[_layer_plan(c, best.mesh, profile) for c in best.layers],
        transposes=list(result.block.transposes),
        fc_time_s=best.time_s,
        fc_flops=float(best.flops),
        utilization=best.utilization(profile),
        candidates=[_candidate(r, profile) for r in result.ranked[:top]],
        infeasible_shapes=[r.infeasible or "" for r in result.infeasible],
    )
