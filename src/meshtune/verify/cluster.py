"""Step 1 of ``meshtune verify`` for a plan's ``cluster`` section (:mod:`meshtune.search.levels`).

Structural (no cost model): the section agrees with the levels the search was pinned to
(``inputs.levels``), dp × micro-batches × micro-batch = batch, the stage blocks, the sums of
the step and memory terms, the FLOPs, the bubble fraction, the memory within its capacity less
the headroom, and the candidates (fastest first, the chosen split first, each within the pins,
the chips, the batch and the capacity). With the plan's profile: every time, utilization, MFU,
HFU and memory term of the chosen split and of every candidate is re-derived with the step
model (:mod:`meshtune.step`, through :func:`meshtune.planner.records.step_record`).
"""

from __future__ import annotations

from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.compute import at_precision
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import mesh_profile
from meshtune.plan import AUTO, ClusterCandidatePlan, ClusterPlan, Plan
from meshtune.planner.records import step_record
from meshtune.search import MeshResult, best_layer_choice, flop_utilization, layer_choice
from meshtune.search.costing import MeshLevel
from meshtune.search.padding import padded_layer
from meshtune.search.split import ClusterCandidate, cluster_candidate
from meshtune.step.model import step_flops
from meshtune.step.options import ClusterOptions
from meshtune.step.pipeline import schedule_bubble_fraction
from meshtune.verify.consistency import Runnable, ascending, close, phase1_block, same_count

_NOT_SUMMED = ("step_s", "tp_exposed_s", "ep_exposed_s", "cp_exposed_s")
"""StepPlan fields that are parts of others (or their sum), not terms of the step."""

_PINNED = ("dp", "pp", "micro_batches", "zero", "vpp", "ep", "cp")
"""Levels ``inputs.levels`` pins when not None (else searched)."""


def _options(cluster: ClusterPlan) -> ClusterOptions:
    """The chosen split's levels with the step options it was priced with."""
    return ClusterOptions(
        dp=cluster.dp,
        pp=cluster.pp,
        micro_batches=cluster.micro_batches,
        zero=cluster.zero,
        vpp=cluster.vpp,
        step=cluster.step_options,
    )


def _pin_problems(plan: Plan, cluster: ClusterPlan) -> list[str]:
    levels = plan.inputs.levels
    if levels is None:
        return []
    problems = []
    for name in _PINNED:
        pinned = getattr(levels, name)
        if pinned is not None and pinned != getattr(cluster, name):
            problems.append(
                f"field 'cluster.{name}' is {getattr(cluster, name)}, but inputs.levels pins "
                f"{name} {pinned}"
            )
    priced = cluster.option_values()
    for name, asked in levels.option_values().items():  # every step option
        if priced[name] != asked:
            problems.append(
                f"field 'cluster.{name}' is {priced[name]!r}, inputs.levels asked for {asked!r}"
            )
    if levels.zero1 and cluster.zero != 1:
        problems.append(f"field 'cluster.zero' is {cluster.zero}, but inputs.levels pins zero1")
    if cluster.zero1 != (cluster.zero >= 1):
        problems.append(
            f"field 'cluster.zero1' is {cluster.zero1}, but ZeRO stage {cluster.zero} "
            f"{'shards' if cluster.zero >= 1 else 'does not shard'} the optimizer state"
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
    layout = cluster.stage_layout
    if (
        len(layout) != cluster.pp
        or sum(layout) != model.blocks
        or max(layout) > cluster.stage_blocks
    ):
        problems.append(
            f"field 'cluster.stage_layout' is {layout}: {cluster.pp} stages must hold the "
            f"{model.blocks} blocks, at most stage_blocks {cluster.stage_blocks} each"
        )
    bubble = schedule_bubble_fraction(
        cluster.step_options.schedule, cluster.pp, cluster.micro_batches, cluster.vpp
    )
    if bubble is None:  # a ratio of the step's times: re-derived by `check`, not here
        if not 0.0 <= cluster.bubble_fraction < 1.0:
            problems.append(
                f"field 'cluster.bubble_fraction' is {cluster.bubble_fraction:.6g}, not in [0, 1)"
            )
    elif not close(bubble, cluster.bubble_fraction):
        problems.append(
            f"field 'cluster.bubble_fraction' is {cluster.bubble_fraction:.6g}, ((pp − 1) / v) / "
            f"(micro_batches + (pp − 1) / v) = {bubble:.6g}"
        )
    step = cluster.step
    # tp_exposed_s is the part of fc_s the TP communication leaves exposed, ep_ / cp_exposed_s
    # parts of other_s: not terms of their own
    parts = sum(v for k, v in step.model_dump().items() if k not in _NOT_SUMMED)
    if not close(parts, step.step_s):
        problems.append(
            f"field 'cluster.step.step_s' is {step.step_s:.6g} s, its parts {parts:.6g}"
        )
    memory = cluster.memory
    terms = [
        v for k, v in memory.model_dump().items() if k not in ("total_bytes", "capacity_bytes")
    ]
    if not same_count(sum(terms), memory.total_bytes):
        problems.append("field 'cluster.memory.total_bytes' is not the sum of its terms")
    if profile is not None and memory.capacity_bytes != profile.memory_bytes:
        problems.append(
            f"field 'cluster.memory.capacity_bytes' is {memory.capacity_bytes}, the profile's "
            f"memory_bytes is {profile.memory_bytes}"
        )
    usable = _usable(cluster)
    if usable is not None and memory.total_bytes > usable:
        problems.append(
            f"field 'cluster.memory.total_bytes' ({memory.total_bytes:.6g}) exceeds the "
            f"capacity less the headroom ({usable:.6g})"
        )
    flops = step_flops(model, inputs.batch, inputs.seq_len)
    if not same_count(flops, cluster.flops):
        problems.append(
            f"field 'cluster.flops' is {cluster.flops:.6g}, the model gives {flops:.6g}"
        )
    if profile is not None and step.step_s > 0:
        peak = at_precision(profile, inputs.precision).peak_flops_per_s  # the FC GeMMs'
        util = flop_utilization(flops, step.step_s, inputs.chips, peak)
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


def _usable(cluster: ClusterPlan) -> float | None:
    """The bytes a split may hold: the capacity less the headroom (None: capacity unknown)."""
    capacity = cluster.memory.capacity_bytes
    return None if capacity is None else capacity * (1 - cluster.step_options.headroom)


_DERIVED = (
    "dp_reduction_s",
    "padding_waste",
    "mfu",
    "hfu",
    "tokens_per_s",
    "model_flops",
    "hardware_flops",
)
"""Scalar fields of the ``cluster`` section the step model re-derives."""

_MEASURED = {"step_s", "utilization", "memory_bytes", "mfu"}
"""The numbers of a candidate (the rest names its split)."""


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
        vpp=cluster.vpp,
        zero=cluster.zero,
        ep=cluster.ep,
        cp=cluster.cp,
        algorithm=plan.layers[0].algorithm,
        step_s=cluster.step.step_s,
        mfu=cluster.mfu,
        utilization=cluster.utilization,
        memory_bytes=cluster.memory.total_bytes,
    )
    first = candidates[0] if candidates else None
    if first is None or first.model_dump(exclude=_MEASURED) != chosen.model_dump(exclude=_MEASURED):
        return ["field 'cluster.candidates': the first entry must be the chosen split"]
    problems = []
    if not (
        close(first.step_s, chosen.step_s)
        and close(first.utilization, chosen.utilization)
        and close(first.mfu, chosen.mfu)
        and same_count(first.memory_bytes, chosen.memory_bytes)
    ):
        problems.append("field 'cluster.candidates[0]': step, utilization, MFU or memory differ")
    if not ascending([c.step_s for c in candidates]):
        problems.append("field 'cluster.candidates': step times are not in ascending order")
    usable = _usable(cluster)
    work = cluster.utilization * cluster.step.step_s  # flops / (chips · peak), the same for all
    for i, c in enumerate(candidates):
        where = f"field 'cluster.candidates[{i}]'"
        pins = levels is not None and any(
            getattr(levels, k) not in (None, getattr(c, k)) for k in _PINNED
        )
        if c.dp * c.pp * c.cp * c.rows * c.cols * c.depth != inputs.chips or pins:
            problems.append(f"{where}: the split does not match inputs.chips or the pinned levels")
        elif inputs.batch % (c.dp * c.micro_batches) or c.pp > inputs.model.blocks:
            problems.append(f"{where}: dp × micro_batches must divide the batch, pp ≤ blocks")
        elif inputs.algorithm != AUTO and c.algorithm != inputs.algorithm:
            problems.append(f"{where}: algorithm '{c.algorithm}' was not requested")
        elif usable is not None and c.memory_bytes > usable:
            problems.append(f"{where}: memory {c.memory_bytes:.6g} exceeds the usable capacity")
        elif not close(c.utilization * c.step_s, work):
            problems.append(f"{where}: utilization {c.utilization:.6g} disagrees with its step")
    return problems


def _rederived(
    plan: Plan, cluster: ClusterPlan, profile: HardwareProfile, c: ClusterCandidatePlan
) -> tuple[float, float, float, float] | None:
    """(step_s, utilization, memory_bytes, mfu) of candidate ``c``, its mesh tuned as the cluster
    search tunes it (padded layers, the fastest legal configuration each), or None."""
    inputs = plan.inputs
    algorithm = REGISTRY[c.algorithm]
    mesh = Mesh(c.rows, c.cols, c.depth)
    micro = inputs.batch // (c.dp * c.micro_batches)
    costed = mesh_profile(at_precision(profile, inputs.precision), mesh)
    if algorithm.mesh_problem(mesh) is not None:
        return None
    choices = []
    unpadded = plan.model_copy(update={"cluster": None})
    block = phase1_block(unpadded, algorithm, mesh, micro, c.cp, c.ep)
    for expected in block.layers:
        padded, (legal, reason) = padded_layer(expected, mesh, algorithm, inputs.slice_block)
        if reason is not None:
            return None
        choices.append(best_layer_choice(algorithm, padded, mesh, costed, legal))
    result = MeshResult(algorithm, mesh, tuple(choices), None, inputs.model.blocks)
    split = (c.dp, c.pp, c.micro_batches, c.vpp, c.zero, c.ep, c.cp)
    found = _costed(plan, cluster, profile, result, split)
    return (
        found.step.step_s,
        found.utilization(profile),
        found.memory.total_bytes,
        found.cost.mfu(profile),
    )


def _costed(
    plan: Plan,
    cluster: ClusterPlan,
    profile: HardwareProfile,
    result: MeshResult,
    split: tuple[int, int, int, int, int, int, int],
) -> ClusterCandidate:
    """The step model of ``result`` at (dp, pp, micro-batches, v, ZeRO stage, EP, CP)
    ``split``."""
    dp, pp, micro_batches, vpp, zero, ep, cp = split
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
        vpp=vpp,
        zero=zero,  # type: ignore[arg-type]
        ep=ep,
        cp=cp,
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
    costed = mesh_profile(at_precision(profile, inputs.precision), mesh)
    choices = tuple(
        layer_choice(alg, expected, mesh, costed, config)
        for expected, alg, config in runnable.values()
    )
    result = MeshResult(algorithm, mesh, choices, None, inputs.model.blocks)
    split = (
        cluster.dp,
        cluster.pp,
        cluster.micro_batches,
        cluster.vpp,
        cluster.zero,
        cluster.ep,
        cluster.cp,
    )
    record = step_record(_costed(plan, cluster, profile, result, split), profile)
    want = {
        **{f"step.{k}": v for k, v in record["step"].model_dump().items()},
        **{k: record[k] for k in _DERIVED},
        **{
            f"memory.{k}": v
            for k, v in record["memory"].model_dump().items()
            if k.endswith("_bytes") and k != "capacity_bytes"
        },
    }
    if record["stage_layout"] != cluster.stage_layout:
        problems.append(
            f"field 'cluster.stage_layout' is {cluster.stage_layout}, the step model lays out "
            f"{record['stage_layout']}"
        )
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
            and close(found[3], c.mfu)
        ):
            problems.append(
                f"field 'cluster.candidates[{i}]': step_s / utilization / memory_bytes "
                f"{c.step_s:.6g} / {c.utilization:.6g} / {c.memory_bytes:.6g} are not what the "
                "cost model gives for this split"
            )
    return problems
