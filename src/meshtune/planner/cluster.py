"""A cluster plan's assembly: the cluster search's result (DP × PP × mesh, ZeRO, EP, CP and
the step model's figures) packaged as a :class:`~meshtune.plan.models.Plan` with its
``cluster`` section."""

from __future__ import annotations

from meshtune._version import __version__
from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.compute import at_precision
from meshtune.dataflow import (
    DataflowMode,
)
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan.models import ClusterCandidatePlan, ClusterPlan, MeshShape, Plan, PlanLevels
from meshtune.plan.vocabulary import PLAN_SCHEMA_VERSION
from meshtune.planner.records import layer_plan, mesh_candidate, plan_inputs, step_record
from meshtune.search.levels import search_cluster
from meshtune.step.options import ClusterOptions, step_values


def cluster_plan(
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
    """:func:`~meshtune.planner.make.make_plan` with the cluster search (its docstring), over
    ``names``."""
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
    gemm = at_precision(profile, options.step.precision)  # FC figures against the FC GeMMs' peak
    return Plan(
        schema_version=PLAN_SCHEMA_VERSION,
        tool_version=__version__,
        inputs=plan_inputs(
            model, profile, chips, batch, seq_len, mode, algorithm, meshes, top
        ).model_copy(update={"levels": PlanLevels.of(options)}),
        mesh=MeshShape(rows=chosen.mesh.rows, cols=chosen.mesh.cols, depth=chosen.mesh.depth),
        layers=[layer_plan(c, chosen.algorithm.name, chosen.mesh, gemm) for c in chosen.layers],
        transposes=list(found.block.transposes),
        fc_time_s=chosen.time_s,
        fc_flops=float(chosen.flops),
        utilization=chosen.utilization(gemm),
        candidates=[mesh_candidate(r, gemm) for r in feasible[:top]]
        + [mesh_candidate(r, gemm) for r in found.others],
        infeasible_shapes=[r.infeasible or "" for r in found.level if not r.feasible],
        cluster=ClusterPlan(
            dp=best.dp,
            pp=best.pp,
            micro_batches=best.micro_batches,
            micro_batch=best.micro_batch,
            stage_blocks=best.stage_blocks,
            zero1=best.zero >= 1,
            **step_values(options.step),
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
