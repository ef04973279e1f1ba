"""The plan's records of search results: a layer's choice, a mesh candidate, the inputs a plan
echoes and a cluster candidate's step fields (shared by :func:`~meshtune.planner.make.make_plan`,
:func:`~meshtune.planner.cluster.cluster_plan` and verify)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from meshtune.cost.schedule import PassCost
from meshtune.dataflow import (
    DataflowMode,
)
from meshtune.errors import ProfileError, SpecError
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan.models import (
    LayerPlan,
    MemoryPlan,
    MeshCandidate,
    PassPlan,
    PlanInputs,
    StepPlan,
)
from meshtune.plan.vocabulary import catalog_name
from meshtune.search import LayerChoice, MeshResult, flop_utilization
from meshtune.search.split import ClusterCandidate


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


def mesh_candidate(result: MeshResult, profile: HardwareProfile) -> MeshCandidate:
    """The plan record of one mesh the search ranked: its algorithm, shape, FC time, FLOP
    utilization on ``profile`` and each layer's configuration."""
    return MeshCandidate(
        algorithm=result.algorithm.name,
        rows=result.mesh.rows,
        cols=result.mesh.cols,
        depth=result.mesh.depth,
        fc_time_s=result.time_s,
        utilization=result.utilization(profile),
        configs=result.layer_configs(),
    )


def plan_inputs(
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
