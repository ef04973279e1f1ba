"""Making a plan: the inputs checked, the search of the requested algorithm(s) (one mesh of
every chip, or the cluster search through :func:`~meshtune.planner.cluster.cluster_plan`) and
its result packaged as a :class:`~meshtune.plan.models.Plan`."""

from __future__ import annotations

from meshtune._version import __version__
from meshtune.algorithms.registry import (
    DEFAULT_ALGORITHM,
    REGISTRY,
    auto_names,
    get_algorithm,
)
from meshtune.dataflow import (
    DataflowMode,
)
from meshtune.errors import InfeasibleError, ProfileError
from meshtune.hardware.mesh import Mesh, check_chips, parse_mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.plan.models import MeshShape, Plan, PlanInputs
from meshtune.plan.vocabulary import AUTO, MAX_DIMENSION, PLAN_SCHEMA_VERSION
from meshtune.planner.cluster import cluster_plan
from meshtune.planner.records import layer_plan, mesh_candidate, plan_inputs
from meshtune.search import SearchResult, search
from meshtune.step.options import ClusterOptions


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
    runs (every one with ``all_algorithms``; :func:`meshtune.algorithms.registry.auto_names`)."""
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
    whole numbers in range or when no mesh shape is valid, :class:`MeshtuneError` for an
    unknown algorithm.

    With ``cluster`` the chips are split into DP × PP × a mesh (:mod:`meshtune.search.levels`;
    pinned levels from ``cluster``, ``shapes`` restrict the mesh) and the plan gets its ``cluster``
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
        return cluster_plan(
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
    others = [mesh_candidate(r.best, profile) for r in results[1:]]
    return Plan(
        schema_version=PLAN_SCHEMA_VERSION,
        tool_version=__version__,
        inputs=plan_inputs(model, profile, chips, batch, seq_len, mode, algorithm, meshes, top),
        mesh=MeshShape(rows=best.mesh.rows, cols=best.mesh.cols, depth=best.mesh.depth),
        layers=[layer_plan(c, result.algorithm.name, best.mesh, profile) for c in best.layers],
        transposes=list(result.block.transposes),
        fc_time_s=best.time_s,
        fc_flops=float(best.flops),
        utilization=best.utilization(profile),
        candidates=[mesh_candidate(r, profile) for r in result.ranked[:top]] + others,
        infeasible_shapes=[r.infeasible or "" for r in result.infeasible],
    )


def plan_again(
    inputs: PlanInputs,
    model: ModelSpec,
    profile: HardwareProfile,
    *,
    algorithm: str | None = None,
    top: int = 5,
) -> Plan:
    """A plan's recorded ``inputs`` planned again with ``model`` and ``profile``
    (:func:`make_plan`): chips, batch, sequence, dataflow mode, shapes, the recorded cluster
    levels (none: one mesh) and the recorded algorithm unless ``algorithm`` names another."""
    return make_plan(
        model,
        profile,
        inputs.chips,
        batch=inputs.batch,
        seq_len=inputs.seq_len,
        mode=inputs.dataflow_mode,
        algorithm=algorithm or inputs.algorithm,
        shapes=inputs.shapes,
        top=top,
        cluster=inputs.levels.options() if inputs.levels is not None else None,
    )
