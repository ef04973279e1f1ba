"""Step 1 of ``meshtune verify`` for a plan's ``cluster`` section (:mod:`meshtune.cluster`).

Structural (no cost model): the section agrees with the levels the search was pinned to
(``inputs.levels``), dp × micro-batches × micro-batch = batch, the stage blocks, the sums of
the step and memory terms, the FLOPs, the bubble fraction, the memory within its capacity, and
the candidates (fastest first, the chosen split first, each within the pins, the chips, the
batch and the capacity). With the plan's profile: every time, utilization and memory term of
the chosen split and of every candidate is re-derived with the cluster cost model.
"""

from __future__ import annotations

from meshtune.algorithms import REGISTRY
from meshtune.cluster import (
    ClusterCandidate,
    ClusterOptions,
    MeshLevel,
    bubble_fraction,
    cluster_candidate,
    mesh_profile,
    padded_layer,
    step_flops,
)
from meshtune.consistency import Runnable, ascending, close, phase1_block, same_count
from meshtune.mesh import Mesh
from meshtune.plan import AUTO, ClusterCandidatePlan, ClusterPlan, Plan
from meshtune.search import MeshResult, best_layer_choice, flop_utilization, layer_choice
from meshtune.specs import HardwareProfile


def _options(cluster: ClusterPlan) -> ClusterOptions:
    return ClusterOptions(
        cluster.dp, cluster.pp, cluster.micro_batches, cluster.zero1, cluster.recompute
    )


def _pin_problems(plan: Plan, cluster: ClusterPlan) -> list[str]:
    levels = plan.inputs.levels
    if levels is None:
        return []
    problems = []
    for name in ("dp", "pp", "micro_batches"):
        pinned = getattr(levels, name)
        if pinned is not None and pinned != getattr(cluster, name):
            problems.append(
                f"field 'cluster.{name}' is {getattr(cluster, name)}, but inputs.levels pins "
                f"{name} {pinned}"
            )
    for name in ("zero1", "recompute"):
        if getattr(levels, name) != getattr(cluster, name):
            problems.append(
                f"field 'cluster.{name}' is {getattr(cluster, name)!r}, inputs.levels asked "
                f"for {getattr(levels, name)!r}"
            )
    return problems


def _sum_problems(plan: Plan, cluster: ClusterPlan, profile: HardwareProfile | None) -> list[str]:
    inputs = plan.inputs
    model = inputs.model
    problems = []
    if cluster.dp * cluster.micro_batches * cluster.micro_batch != inputs.batch:
        problems.append(
            f"field 'cluster': dp {cluster.dp} × micro_batches {cluster.micro_batches} × "
            f"micro_batch {cluster.micro_batch} is not inputs.batch {inputs.batch}"
        )
    if cluster.stage_blocks != -(-model.blocks // cluster.pp) or cluster.pp > model.blocks:
        problems.append(
            f"field 'cluster.stage_blocks' is {cluster.stage_blocks}, but {model.blocks} blocks "
            f"over {cluster.pp} stages give {-(-model.blocks // cluster.pp)}"
        )
    bubble = bubble_fraction(cluster.pp, cluster.micro_batches)
    if not close(bubble, cluster.bubble_fraction):
        problems.append(
            f"field 'cluster.bubble_fraction' is {cluster.bubble_fraction:.6g}, (pp − 1) / "
            f"(micro_batches + pp − 1) = {bubble:.6g}"
        )
    step = cluster.step
    parts = step.fc_s + step.recompute_s + step.bubble_s + step.send_recv_s + step.dp_exposed_s
    if not close(parts, step.step_s):
        problems.append(
            f"field 'cluster.step.step_s' is {step.step_s:.6g} s, its parts {parts:.6g}"
        )
    memory = cluster.memory
    terms = (
        memory.weights_bytes,
        memory.gradients_bytes,
        memory.optimizer_bytes,
        memory.activations_bytes,
        memory.buffers_bytes,
    )
    if not same_count(sum(terms), memory.total_bytes):
        problems.append("field 'cluster.memory.total_bytes' is not the sum of its terms")
    if profile is not None and memory.capacity_bytes != profile.memory_bytes:
        problems.append(
            f"field 'cluster.memory.capacity_bytes' is {memory.capacity_bytes}, the profile's "
            f"memory_bytes is {profile.memory_bytes}"
        )
    if memory.capacity_bytes is not None and memory.total_bytes > memory.capacity_bytes:
        problems.append(
            f"field 'cluster.memory.total_bytes' ({memory.total_bytes:.6g}) exceeds the "
            f"capacity ({memory.capacity_bytes:.6g})"
        )
    flops = step_flops(model, inputs.batch, inputs.seq_len)
    if not same_count(flops, cluster.flops):
        problems.append(
            f"field 'cluster.flops' is {cluster.flops:.6g}, the model gives {flops:.6g}"
        )
    if profile is not None and step.step_s > 0:
        util = flop_utilization(flops, step.step_s, inputs.chips, profile.peak_flops_per_s)
        if not close(util, cluster.utilization):
            problems.append(
                f"field 'cluster.utilization' is {cluster.utilization:.6g}, its step gives "
                f"{util:.6g}"
            )
    if len(cluster.rejections) > cluster.rejected:
        problems.append(
            f"field 'cluster.rejected' is {cluster.rejected}, fewer than the "
            f"{len(cluster.rejections)} rejections listed"
        )
    return problems


def _candidate_problems(plan: Plan, cluster: ClusterPlan) -> list[str]:
    """The candidates against the pins, chips, batch, capacity, order and the chosen split."""
    inputs = plan.inputs
    levels = inputs.levels
    mesh = plan.mesh.to_mesh()
    candidates = cluster.candidates
    chosen = ClusterCandidatePlan(
        dp=cluster.dp,
        pp=cluster.pp,
        rows=mesh.rows,
        cols=mesh.cols,
        depth=mesh.depth,
        micro_batches=cluster.micro_batches,
        algorithm=plan.layers[0].algorithm,
        step_s=cluster.step.step_s,
        utilization=cluster.utilization,
        memory_bytes=cluster.memory.total_bytes,
    )
    first = candidates[0] if candidates else None
    if first is None or first.model_dump(exclude={"step_s", "utilization", "memory_bytes"}) != (
        chosen.model_dump(exclude={"step_s", "utilization", "memory_bytes"})
    ):
        return ["field 'cluster.candidates': the first entry must be the chosen split"]
    problems = []
    if not (
        close(first.step_s, chosen.step_s)
        and close(first.utilization, chosen.utilization)
        and same_count(first.memory_bytes, chosen.memory_bytes)
    ):
        problems.append("field 'cluster.candidates[0]': step, utilization or memory differ")
    if not ascending([c.step_s for c in candidates]):
        problems.append("field 'cluster.candidates': step times are not in ascending order")
    capacity = cluster.memory.capacity_bytes
    work = cluster.utilization * cluster.step.step_s  # flops / (chips · peak), the same for all
    for i, c in enumerate(candidates):
        where = f"field 'cluster.candidates[{i}]'"
        pins = levels is not None and any(
            getattr(levels, k) not in (None, getattr(c, k)) for k in ("dp", "pp", "micro_batches")
        )
        if c.dp * c.pp * c.rows * c.cols * c.depth != inputs.chips or pins:
            problems.append(f"{where}: the split does not match inputs.chips or the pinned levels")
        elif inputs.batch % (c.dp * c.micro_batches) or c.pp > inputs.model.blocks:
            problems.append(f"{where}: dp × micro_batches must divide the batch, pp ≤ blocks")
        elif inputs.algorithm != AUTO and c.algorithm != inputs.algorithm:
            problems.append(f"{where}: algorithm '{c.algorithm}' was not requested")
        elif capacity is not None and c.memory_bytes > capacity:
            problems.append(f"{where}: memory {c.memory_bytes:.6g} exceeds the capacity")
        elif not close(c.utilization * c.step_s, work):
            problems.append(f"{where}: utilization {c.utilization:.6g} disagrees with its step")
    return problems


def _rederived(
    plan: Plan, cluster: ClusterPlan, profile: HardwareProfile, c: ClusterCandidatePlan
) -> tuple[float, float, float] | None:
    """(step_s, utilization, memory_bytes) of candidate ``c``, its mesh tuned as the cluster
    search tunes it (padded layers, the fastest legal configuration each), or None."""
    inputs = plan.inputs
    algorithm = REGISTRY[c.algorithm]
    mesh = Mesh(c.rows, c.cols, c.depth)
    micro = inputs.batch // (c.dp * c.micro_batches)
    costed = mesh_profile(profile, mesh)
    if algorithm.mesh_problem(mesh) is not None:
        return None
    choices = []
    block = phase1_block(plan.model_copy(update={"cluster": None}), algorithm, mesh, micro)
    for expected in block.layers:
        padded, (legal, reason) = padded_layer(expected, mesh, algorithm, inputs.slice_block)
        if reason is not None:
            return None
        choices.append(best_layer_choice(algorithm, padded, mesh, costed, legal))
    result = MeshResult(algorithm, mesh, tuple(choices), None, inputs.model.blocks)
    found = _costed(plan, cluster, profile, result, (c.dp, c.pp, c.micro_batches))
    return found.step.step_s, found.utilization(profile), found.memory.total_bytes


def _costed(
    plan: Plan,
    cluster: ClusterPlan,
    profile: HardwareProfile,
    result: MeshResult,
    split: tuple[int, int, int],
) -> ClusterCandidate:
    """The cluster cost model of ``result`` at (dp, pp, micro-batches) ``split``."""
    dp, pp, micro_batches = split
    return cluster_candidate(
        plan.inputs.model,
        profile,
        MeshLevel.of(result, profile.bytes_per_element),
        batch=plan.inputs.batch,
        seq_len=plan.inputs.seq_len,
        dp=dp,
        pp=pp,
        micro_batches=micro_batches,
        options=_options(cluster),
    )


def cluster_problems(plan: Plan, profile: HardwareProfile | None, runnable: Runnable) -> list[str]:
    """The ``cluster`` section against itself, its pins and candidates and, with the profile
    and every layer re-derived, against the cluster cost model."""
    cluster = plan.cluster
    if cluster is None or not plan.layers:
        return []
    problems = _pin_problems(plan, cluster) + _sum_problems(plan, cluster, profile)
    problems += _candidate_problems(plan, cluster)
    if profile is None or problems or len(runnable) != len(plan.layers):
        return problems
    inputs = plan.inputs
    mesh = plan.mesh.to_mesh()
    algorithm = next(iter(runnable.values()))[1]
    choices = tuple(
        layer_choice(alg, expected, mesh, mesh_profile(profile, mesh), config)
        for expected, alg, config in runnable.values()
    )
    result = MeshResult(algorithm, mesh, choices, None, inputs.model.blocks)
    derived = _costed(
        plan, cluster, profile, result, (cluster.dp, cluster.pp, cluster.micro_batches)
    )
    want = {
        "step.fc_s": derived.step.fc_s,
        "step.recompute_s": derived.step.recompute_s,
        "step.bubble_s": derived.step.bubble_s,
        "step.send_recv_s": derived.step.send_recv_s,
        "step.dp_exposed_s": derived.step.dp_exposed_s,
        "dp_reduction_s": derived.dp_reduction_s,
        "padding_waste": derived.padding_waste,
        **{f"memory.{k}_bytes": v for k, v in derived.memory.terms().items()},
    }
    got = cluster.model_dump()
    for path, value in want.items():
        head, _, tail = path.partition(".")
        recorded = got[head][tail] if tail else got[head]
        agree = same_count if path.startswith("memory.") else close
        if not agree(recorded, value):
            problems.append(
                f"field 'cluster.{path}' is {recorded:.6g}, the cost model gives {value:.6g}"
            )
    for i, c in enumerate(cluster.candidates[1:], start=1):
        found = _rederived(plan, cluster, profile, c)
        if found is None or not (
            close(found[0], c.step_s)
            and close(found[1], c.utilization)
            and same_count(found[2], c.memory_bytes)
        ):
            problems.append(
                f"field 'cluster.candidates[{i}]': step_s / utilization / memory_bytes "
                f"{c.step_s:.6g} / {c.utilization:.6g} / {c.memory_bytes:.6g} are not what the "
                "cost model gives for this split"
            )
    return problems
