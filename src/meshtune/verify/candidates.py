"""Step 1 of ``meshtune verify`` for a plan's ``candidates`` (the data of Figure 13).

Structural: the chosen mesh (with the layers' configurations, time and utilization) first (in
a cluster plan: among the chosen algorithm's entries); times ascending (the chosen algorithm's
shapes, then the other algorithms' best); every mesh with the plan's mesh chips, among
``inputs.shapes``; other algorithms only with ``inputs.algorithm`` 'auto', and then exactly
the registered algorithms with a feasible mesh. With the plan's profile: every candidate's
time and utilization re-priced from its recorded configurations (MeshSlice §3.2.2).
"""

from __future__ import annotations

from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.config import Config
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import mesh_profile
from meshtune.plan import AUTO, MeshCandidate, Plan
from meshtune.search import MeshResult, layer_choice, mesh_problem
from meshtune.search.padding import padded_layer
from meshtune.verify.consistency import TIME_RTOL, ascending, close, phase1_block


def _priced(
    plan: Plan, profile: HardwareProfile, candidate: MeshCandidate
) -> tuple[MeshResult | None, str | None]:
    """The candidate's mesh result priced with its recorded configurations, or why not."""
    algorithm = REGISTRY[candidate.algorithm]
    mesh = Mesh(candidate.rows, candidate.cols, candidate.depth)
    batch = plan.inputs.batch if plan.cluster is None else plan.cluster.micro_batch
    block = phase1_block(plan, algorithm, mesh, batch)
    costed = profile if plan.cluster is None else mesh_profile(profile, mesh)
    choices = []
    for expected in block.layers:
        configs: dict[str, dict[str, int]] = {str(k): v for k, v in candidate.configs.items()}
        config = Config.of(**configs.get(expected.layer.name, {}))
        legal, reason = algorithm.configs(expected, mesh, plan.inputs.slice_block)
        if reason is not None or config not in legal:
            return None, reason or f"configuration {config.label} is not legal"
        choices.append(layer_choice(algorithm, expected, mesh, costed, config))
    return MeshResult(algorithm, mesh, tuple(choices), None, plan.inputs.model.blocks), None


def feasible_algorithms(plan: Plan, chips: int, micro_batch: int) -> set[str]:
    """The registered algorithms with a feasible mesh of ``chips`` (padded in a cluster plan),
    among ``inputs.shapes`` when the search was restricted."""
    shapes = plan.inputs.shapes
    block_size = plan.inputs.slice_block
    out = set()
    all_meshes = list(dict.fromkeys(m for a in REGISTRY.values() for m in a.meshes(chips)))
    for name, algorithm in REGISTRY.items():
        meshes = all_meshes if plan.cluster is not None else algorithm.meshes(chips)
        for mesh in meshes:
            if shapes is not None and mesh.label not in shapes:
                continue
            block = phase1_block(plan, algorithm, mesh, micro_batch)
            if plan.cluster is None:
                problem = mesh_problem(algorithm, block, mesh, block_size)
            else:
                problem = algorithm.mesh_problem(mesh) or next(
                    (
                        r
                        for c in block.layers
                        if (r := padded_layer(c, mesh, algorithm, block_size)[1][1])
                    ),
                    None,
                )
            if problem is None:
                out.add(name)
                break
    return out


def candidate_problems(plan: Plan, profile: HardwareProfile | None) -> list[str]:
    """``candidates``: the chosen mesh first (or, in a cluster plan, among the chosen
    algorithm's), each mesh with the plan's chip count, times ascending per part, the other
    algorithms only with ``inputs.algorithm`` 'auto' (then exactly the feasible ones), and,
    with the profile, every time and utilization re-priced from its configurations."""
    candidates = plan.candidates
    if not plan.layers:
        return []  # reported as a problem of 'layers'
    if not candidates:
        return ["field 'candidates' is empty; its first entry is the chosen mesh"]
    mesh = plan.mesh.to_mesh()
    chosen = plan.layers[0].algorithm
    lead = 0
    while lead < len(candidates) and candidates[lead].algorithm == chosen:
        lead += 1
    own, others = candidates[:lead], candidates[lead:]
    record = (chosen, mesh.rows, mesh.cols, mesh.depth, {x.name: x.config for x in plan.layers})
    keys = [(c.algorithm, c.rows, c.cols, c.depth, c.configs) for c in own]
    at = keys.index(record) if record in keys else None
    problems = []
    if at is None or (plan.cluster is None and at != 0):
        where = "the first" if plan.cluster is None else "one"
        problems.append(
            f"field 'candidates': {where} entry must be the chosen mesh and its configurations"
        )
    elif not (
        close(own[at].fc_time_s, plan.fc_time_s) and close(own[at].utilization, plan.utilization)
    ):
        problems.append(f"field 'candidates[{at}]': time or utilization differ from the plan's")
    if not ascending([c.fc_time_s for c in own]) or not ascending([c.fc_time_s for c in others]):
        problems.append("field 'candidates': times are not in ascending order")
    if plan.cluster is None and others and others[0].fc_time_s < plan.fc_time_s * (1 - TIME_RTOL):
        problems.append("field 'candidates': another algorithm is faster than the chosen one")
    names = [c.algorithm for c in others]
    if plan.inputs.algorithm != AUTO and others:
        problems.append(f"field 'candidates': algorithms {names} were not requested")
    elif plan.inputs.algorithm == AUTO:
        batch = plan.inputs.batch if plan.cluster is None else plan.cluster.micro_batch
        want = feasible_algorithms(plan, mesh.chips, batch) - {chosen}
        if sorted(names) != sorted(want) or len(set(names)) != len(names):
            problems.append(
                f"field 'candidates': the other algorithms are {names}, the feasible ones "
                f"{sorted(want)}"
            )
    layer_names = [x.name for x in plan.layers]
    shapes = plan.inputs.shapes
    for i, c in enumerate(candidates):
        label = Mesh(c.rows, c.cols, c.depth).label
        if c.rows * c.cols * c.depth != mesh.chips or (shapes is not None and label not in shapes):
            problems.append(f"field 'candidates[{i}]': mesh {label} is not a searched shape")
        elif list(c.configs) != layer_names:
            problems.append(
                f"field 'candidates[{i}].configs' does not name the layers {layer_names}"
            )
        elif profile is not None:
            result, reason = _priced(plan, profile, c)
            if result is None:
                problems.append(f"field 'candidates[{i}]': {reason}")
            elif not close(result.time_s, c.fc_time_s) or not close(
                result.utilization(profile), c.utilization
            ):
                problems.append(
                    f"field 'candidates[{i}]': fc_time_s {c.fc_time_s:.6g} s / utilization "
                    f"{c.utilization:.6g}, the cost model gives {result.time_s:.6g} s / "
                    f"{result.utilization(profile):.6g}"
                )
    return problems
