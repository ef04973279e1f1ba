"""The search over the levels around the mesh: DP × PP × v × ZeRO × P_r × P_c × micro-batches.

MeshSlice §2.2 and §7 place 2D TP inside data parallelism (MeshSlice + DP); Llama 3 trained
with TP × PP × DP (Llama Team 2024, §3.3.2). Here ``chips = DP · PP · P_r · P_c`` and the search
is exhaustive over every factorization (divisors, never a filter over all integers): DP divides
the batch, the micro-batch count divides the replica's batch, PP is at most the block count,
the interleaved schedule's v virtual stages split the blocks evenly into ``PP · v`` chunks with
the micro-batch count a multiple of PP (Megatron-LM's rules), and the ZeRO stage is the lowest
that fits (stages 1 and 2 move the same bytes as plain DP and shard more, so a higher stage only
helps memory; stage 3 adds the per-block gathers). Every split is priced by the step model
(:func:`meshtune.step.price_step`); the search holds no formula of its own.

Speed: splits whose memory (model state and activations, no buffers yet) exceeds the usable
capacity are dropped before costing; the rest are visited in order of a quick lower bound of
their step (the pipeline of FC compute alone) and skipped once it, or the tighter bound of the
step model on the FC layers' compute time (no TP communication, the DP tail at its floor),
passes the ``top``-th best step; each (algorithm,
mesh, micro-batch) is costed once (:class:`~meshtune.search.costing.Costing`) and tuned layer by
layer only as long as the split can still beat the ``top``-th.

The unit of the visit is a (split, ZeRO stage, EP, CP) group with the meshes of its TP size,
in the order of every (split, mesh) sorted (:mod:`meshtune.search.visit`), so that the
decisions are those of a visit one (split, mesh) at a time (issue 17). A group is skipped
whole when what the costing already knows of its meshes' block times reaches its budget, or a
ceiling of that budget priced without the step model
(:func:`~meshtune.search.bounds.budget_ceiling`): every mesh's costing would answer None.
The floors of a family (CP, micro-batch, EP, TP) are computed when its first group is visited,
and every group of the family whose quick bound passes the top, or whose ceiling its least
floor reaches, is marked as the visit would mark it (:meth:`SplitSpace.budget_ceilings`, at
once): floors only rise and the top only gets faster, so the visit would skip it too.
The splits and the groups are columns (:class:`~meshtune.search.space.Fittings`,
:class:`~meshtune.search.visit.Groups`) and whether a group is skipped a byte: the tens of
thousands of groups a large search decides without costing them make no object each.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import REGISTRY
from meshtune.dataflow import BlockDataflow, DataflowMode
from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import Mesh, check_chips
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.ranks import ranks
from meshtune.search.costing import Costing
from meshtune.search.dropped import Dropped
from meshtune.search.phase2 import MeshResult
from meshtune.search.space import Fitting, SplitSpace, collector_paused
from meshtune.search.split import (
    ClusterCandidate,
    Rejection,
    cluster_candidate,
    first_reasons,
    step_flops,
)
from meshtune.search.visit import BlockFloors, Floors, Group, Groups, visits
from meshtune.step.memory import fits
from meshtune.step.options import ClusterOptions

# How many memory rejections a result keeps as examples.
REJECTION_EXAMPLES = 3
# How many infeasible meshes the error of a search with no feasible split names.
INFEASIBLE_EXAMPLES = 3


@dataclass(frozen=True)
class ClusterResult:
    """The search's answer: costed candidates fastest first, the chosen mesh level, rejections.

    ``level`` holds every mesh of the chosen TP size costed at the chosen micro-batch with the
    chosen algorithm, feasible ones fastest first (the plan's 2D candidate list).
    """

    ranked: tuple[ClusterCandidate, ...]
    level: tuple[MeshResult, ...]
    others: tuple[MeshResult, ...]
    block: BlockDataflow
    rejected: int
    rejections: tuple[str, ...]
    searched: int

    @property
    def best(self) -> ClusterCandidate:
        """The fastest candidate within capacity."""
        return self.ranked[0]


def _shapes(
    tp: int, algorithms: Sequence[Algorithm], meshes: Sequence[Mesh] | None
) -> tuple[Mesh, ...]:
    if meshes is not None:
        return tuple(dict.fromkeys(s for s in meshes if s.chips == tp))
    return tuple(dict.fromkeys(s for a in algorithms for s in a.meshes(tp)))


@collector_paused()
def search_cluster(
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    *,
    batch: int,
    seq_len: int,
    algorithms: Sequence[Algorithm] | None = None,
    mode: DataflowMode = "auto",
    options: ClusterOptions | None = None,
    meshes: Sequence[Mesh] | None = None,
    top: int = 5,
    space: SplitSpace | None = None,
) -> ClusterResult:
    """The search of the module docstring.

    ``algorithms`` defaults to MeshSlice; with several, each mesh takes the fastest. ``meshes``
    restricts the TP meshes (their chip counts must divide ``chips``). Raises
    :class:`InfeasibleError` when no factorization is allowed, none has a feasible mesh, or
    none fits in memory (the message gives the closest one's biggest term). ``space``, built
    from the same inputs (:meth:`SplitSpace.build`), shares the algorithm-independent work
    between searches of different algorithms; the answer is the same with or without it.
    """
    options = options or ClusterOptions()
    algorithms = list(algorithms) if algorithms else [REGISTRY["meshslice"]]
    check_chips(chips)
    for mesh in meshes or ():
        if chips % mesh.chips:
            raise InfeasibleError(
                f"mesh shape {mesh.label} has {mesh.chips} chips, which does not divide {chips}"
            )
    if space is None:
        space = SplitSpace.build(
            model, profile, chips, batch=batch, seq_len=seq_len, mode=mode, options=options
        )
    elif not space.matches(model, profile, chips, batch, seq_len, mode, options):
        raise ValueError("search_cluster: the split space was built from other inputs")
    import numpy as np  # not at module import: the CLI starts without NumPy

    fitting = space.fitting
    sizes, sized = ranks(fitting.tp)  # the TP sizes, and each split's among them
    shapes = {tp: _shapes(tp, algorithms, meshes) for tp in sizes.tolist()}  # TP → its meshes
    meshed = np.array([bool(shapes[tp]) for tp in sizes.tolist()], dtype=bool)
    groups = Groups(fitting, np.flatnonzero(meshed[sized]))  # the splits of sizes with meshes
    dropped = space.rejected  # splits no ZeRO stage fits, before any mesh is costed
    rejected: list[Rejection] = []  # candidates that do not fit with their buffers
    if not len(groups):
        if dropped:
            raise InfeasibleError(
                f"no DP × PP × mesh split of {chips} chips fits in memory ({len(dropped)} "
                f"tried); the closest, {_reasons(dropped, rejected, 1, profile, options)[0]}"
            )
        if options.ep is not None and options.ep > 1:
            raise InfeasibleError(
                f"--ep {options.ep} divides the DP of no split of {chips} chips (expert "
                "parallelism runs among the DP replicas)"
            )
        raise InfeasibleError(
            f"no mesh shape of the listed ones divides the chips left after DP × PP for {chips} "
            "chips"
        )
    ranked: list[ClusterCandidate] = []
    infeasible: list[str] = []
    families: dict[int, Floors] = {}  # family number → its floors
    blocks: dict[int, BlockFloors] = {}  # CP → the block floors of its families
    # a group's byte is set while its runs are skipped: for good once its quick bound or bound
    # passed the top (which only gets faster: ``settled``), or while its budget passes its
    # family's least floor, until one of the family's meshes is costed again (``passed``)
    skip = bytearray(len(groups))
    settled = bytearray(len(groups))
    passed: dict[int, list[int]] = {}  # family number → its groups skipped for their floors
    # group → the top's step its checks were last made at, the ceiling of its budget there
    # and the budget (None until priced): a group's runs share them while the top holds
    limits: dict[int, tuple[float, float, float | None]] = {}
    rows: dict[int, Fitting] = {}  # fitting row → its split, once its budget is checked

    def settle(i: int) -> None:
        """Skip group ``i`` for good."""
        skip[i] = settled[i] = 1

    def skip_for_floors(family: int, found: Sequence[int]) -> None:
        """Skip the groups ``found`` of ``family`` until one of its meshes is costed."""
        for i in found:
            skip[i] = 1
        passed.setdefault(family, []).extend(found)

    def pass_family(family: int, ep: int, floors: Floors) -> None:
        """Skip the groups of ``family`` (EP ``ep``) its least floor passes now: those whose
        quick bound passes the top or whose budget ceiling the least floor reaches
        (:meth:`SplitSpace.passed`), with no top those of a family every mesh of which is
        infeasible. Floors only rise and the top only gets faster, so each would be skipped
        when its turn came."""
        best_s = ranked[top - 1].step.step_s if len(ranked) >= top else math.inf
        least = floors.least(len(infeasible) < INFEASIBLE_EXAMPLES)
        if best_s < math.inf or least == math.inf:
            members = groups.members[family]
            decided = space.passed(groups.row[members], ep, best_s, least)
            skip_for_floors(family, members[decided].tolist())

    flops = step_flops(model, batch, seq_len)  # every candidate's
    for i, run in visits(groups, shapes, skip):
        group = groups.of(i)
        family = int(groups.family[i])
        costing = space.costings[group.cp]
        floors = families.get(family)
        if floors is None:
            if group.cp not in blocks:
                blocks[group.cp] = BlockFloors(costing, groups.sizes(group.cp))
            floors = families[family] = Floors(
                blocks[group.cp], algorithms, shapes[group.tp], group.micro_batch, group.ep
            )
            pass_family(family, group.ep, floors)
            if skip[i]:
                continue
        for mesh in run:
            # the top only gets faster, so a mesh skipped here skips the rest of the run
            best_s = ranked[top - 1].step.step_s if len(ranked) >= top else math.inf
            known = limits.get(i)
            if known is None or known[0] != best_s:  # else the checks of best_s alone pass
                if group.quick >= best_s:
                    settle(i)
                    break
                # the budget is at most its ceiling: no need to price the bound below it
                ceiling = math.inf
                if best_s < math.inf:
                    fit = rows.get(group.row)
                    if fit is None:
                        fit = rows[group.row] = fitting[group.row]
                    ceiling = space.budget_ceiling(fit, group.ep, best_s)
                known = limits[i] = (best_s, ceiling, None)
            _, ceiling, budget = known
            least = floors.least(len(infeasible) < INFEASIBLE_EXAMPLES)
            if least >= ceiling:
                skip_for_floors(family, [i])
                break
            if budget is None:
                bound = space.bound(group.split, group.zero, group.ep, group.cp)
                if bound.beaten(best_s):
                    settle(i)
                    break
                budget = bound.budget(best_s) if best_s < math.inf else math.inf
                limits[i] = (best_s, ceiling, budget)
            if least >= budget:
                skip_for_floors(family, [i])
                break
            if floors.of(mesh, len(infeasible) < INFEASIBLE_EXAMPLES) >= budget:
                continue  # this mesh's costing would answer None (or its infeasible level)
            candidate, why = _cost(space, costing, algorithms, group, mesh, budget, flops)
            floors.cost(mesh)
            for j in passed.pop(family, ()):  # their floors rose: looked at again when they come
                if not settled[j]:
                    skip[j] = 0
            pass_family(family, group.ep, floors)  # those its raised floors pass now
            if candidate is None:
                if why is not None:
                    infeasible.append(why)
                continue
            memory = candidate.memory
            if not fits(memory, profile.memory_bytes, options.step.headroom):
                rejected.append(Rejection.of(candidate.label, memory))
                continue
            bisect.insort(ranked, candidate, key=_rank_key)
            del ranked[top:]
    if not ranked:
        if dropped or rejected:
            raise InfeasibleError(
                f"no DP × PP × mesh split of {chips} chips fits in memory; the closest, "
                f"{_reasons(dropped, rejected, 1, profile, options)[0]}"
            )
        raise InfeasibleError(
            f"no feasible mesh for {chips} chips even with padding: "
            + "; ".join(infeasible[:INFEASIBLE_EXAMPLES])
        )
    best = ranked[0]
    costing = space.costings[best.cp]
    level, others = _level(costing, algorithms, best, shapes[best.mesh.chips])
    return ClusterResult(
        ranked=tuple(ranked),
        level=level,
        others=others,
        block=costing.block(best.result.algorithm, best.micro_batch, best.ep),
        rejected=len(dropped) + len(rejected),
        rejections=tuple(_reasons(dropped, rejected, REJECTION_EXAMPLES, profile, options)),
        searched=space.searched,
    )


def _cost(
    space: SplitSpace,
    costing: Costing,
    algorithms: Sequence[Algorithm],
    group: Group,
    mesh: Mesh,
    budget: float,
    flops: float,
) -> tuple[ClusterCandidate | None, str | None]:
    """The candidate of ``group`` on ``mesh`` (its fastest algorithm there) at the lowest allowed
    ZeRO stage from the group's up that fits with the buffers, else the last one tried; ``None`` and
    the reason when no algorithm is feasible there (``None, None``: every algorithm's block
    passed ``budget``, so the split cannot make the top). ``flops``: the step's
    (:func:`~meshtune.search.split.step_flops`)."""
    model, profile, options, batch = space.model, space.profile, space.options, space.batch
    dp, pp, m, vpp = group.split
    micro = batch // (dp * m)
    evaluated = [costing.evaluate(a, mesh, micro, budget, group.ep) for a in algorithms]
    results = [r for r in evaluated if r is not None]
    feasible = [r for r in results if r.feasible]
    if not feasible:
        complete = results and len(results) == len(evaluated)
        return None, results[0].infeasible if complete else None
    result = min(feasible, key=lambda r: r.time_s)
    if sum(c.time_s for c in result.layers) >= budget:  # a cached level past the budget
        return None, None
    level = costing.level(result, micro, group.ep)
    stages = [z for z in options.zero_stages() if z >= group.zero] if dp > 1 else [group.zero]
    candidate = None
    for zero in stages:
        candidate = cluster_candidate(
            model,
            profile,
            level,
            batch=batch,
            seq_len=space.seq_len,
            dp=dp,
            pp=pp,
            micro_batches=m,
            options=options,
            vpp=vpp,
            zero=zero,
            ep=group.ep,
            cp=group.cp,
            exact=space.layers(micro, group.cp, group.ep),
            flops=flops,
        )
        if fits(candidate.memory, profile.memory_bytes, options.step.headroom):
            break
    return candidate, None


def _reasons(
    dropped: Dropped,
    rejected: Sequence[Rejection],
    count: int,
    profile: HardwareProfile,
    options: ClusterOptions,
) -> list[str]:
    """The first ``count`` reasons of ``dropped`` and ``rejected`` together
    (:func:`first_reasons`; of ``dropped`` only those it can show are made,
    :meth:`Dropped.least`)."""
    rejections = [*dropped.least(count), *rejected]
    return first_reasons(rejections, count, profile.memory_bytes, options.step.headroom)


def _rank_key(c: ClusterCandidate) -> tuple[float, int, int, int, int, int, int, int, int]:
    return (c.step.step_s, c.dp, c.pp, c.mesh.rows, c.micro_batches, c.vpp, c.zero, c.ep, c.cp)


def _level(
    costing: Costing,
    algorithms: Sequence[Algorithm],
    best: ClusterCandidate,
    shapes: Sequence[Mesh],
) -> tuple[tuple[MeshResult, ...], tuple[MeshResult, ...]]:
    """Every searched mesh of the chosen TP size at the chosen micro-batch and EP with the
    chosen algorithm (fastest first, then infeasible ones), and the other algorithms' best
    there."""
    chosen = best.result.algorithm
    micro, ep = best.micro_batch, best.ep
    results = [
        r for mesh in shapes if (r := costing.evaluate(chosen, mesh, micro, ep=ep)) is not None
    ]
    feasible = sorted(
        (r for r in results if r.feasible), key=lambda r: (r.time_s, r.mesh.rows, r.mesh.depth)
    )
    others = []
    for algorithm in algorithms:
        if algorithm.name == chosen.name:
            continue
        found = [
            r
            for mesh in shapes
            if (r := costing.evaluate(algorithm, mesh, micro, ep=ep)) is not None
        ]
        fastest = sorted(
            (r for r in found if r.feasible), key=lambda r: (r.time_s, r.mesh.rows, r.mesh.depth)
        )
        others.extend(fastest[:1])
    others.sort(key=lambda r: r.time_s)
    return tuple(feasible) + tuple(r for r in results if not r.feasible), tuple(others)
