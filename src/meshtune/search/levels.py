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
decisions are those of a visit one (split, mesh) at a time. A group is skipped
whole when what the costing already knows of its meshes' block times reaches its budget, or a
ceiling of that budget priced without the step model
(:func:`~meshtune.step.bounds.budget_ceiling`): every mesh's costing would answer None.
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
from meshtune.algorithms.registry import DEFAULT_ALGORITHM, REGISTRY
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
)
from meshtune.search.visit import BlockFloors, Floors, Group, Groups, visits
from meshtune.step.memory import fits
from meshtune.step.model import step_flops
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
    algorithms = list(algorithms) if algorithms else [REGISTRY[DEFAULT_ALGORITHM]]
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
    if not len(groups):
        raise _no_group(space, chips)
    visit = _Visit(space, algorithms, groups, shapes, top)
    visit.run()
    ranked, rejected = visit.ranked, visit.rejected
    if not ranked:
        if dropped or rejected:
            raise InfeasibleError(
                f"no DP × PP × mesh split of {chips} chips fits in memory; the closest, "
                f"{_reasons(dropped, rejected, 1, profile, options)[0]}"
            )
        raise InfeasibleError(
            f"no feasible mesh for {chips} chips even with padding: "
            + "; ".join(visit.infeasible[:INFEASIBLE_EXAMPLES])
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


def _no_group(space: SplitSpace, chips: int) -> InfeasibleError:
    """Why a search has no group to visit: no split fits in memory, the pinned EP divides no
    split's DP, or no listed mesh has the chips a split leaves for TP."""
    options, dropped = space.options, space.rejected
    if dropped:
        return InfeasibleError(
            f"no DP × PP × mesh split of {chips} chips fits in memory ({len(dropped)} "
            f"tried); the closest, {_reasons(dropped, [], 1, space.profile, options)[0]}"
        )
    if options.ep is not None and options.ep > 1:
        return InfeasibleError(
            f"--ep {options.ep} divides the DP of no split of {chips} chips (expert "
            "parallelism runs among the DP replicas)"
        )
    return InfeasibleError(
        f"no mesh shape of the listed ones divides the chips left after DP × PP for {chips} chips"
    )


class _Visit:
    """One visit of a search's groups (module docstring): the ``top`` candidates found so far
    (``ranked``, fastest first), the candidates that do not fit with their buffers
    (``rejected``), the reasons of infeasible meshes, and which groups are skipped.

    A group's ``skip`` byte is set while its runs are skipped: for good once its quick bound or
    bound passed the top (which only gets faster: ``settled``), or while its budget passes its
    family's least floor, until one of the family's meshes is costed again (``passed``)."""

    def __init__(
        self,
        space: SplitSpace,
        algorithms: Sequence[Algorithm],
        groups: Groups,
        shapes: dict[int, tuple[Mesh, ...]],
        top: int,
    ) -> None:
        self.space, self.algorithms, self.groups, self.shapes = space, algorithms, groups, shapes
        self.top = top
        self.ranked: list[ClusterCandidate] = []
        self.rejected: list[Rejection] = []
        self.infeasible: list[str] = []
        self.families: dict[int, Floors] = {}  # family number → its floors
        self.blocks: dict[int, BlockFloors] = {}  # CP → the block floors of its families
        self.skip = bytearray(len(groups))
        self.settled = bytearray(len(groups))
        self.passed: dict[int, list[int]] = {}  # family number → its groups skipped for floors
        # group → the top's step its checks were last made at, the ceiling of its budget there
        # and the budget (None until priced): a group's runs share them while the top holds
        self.limits: dict[int, tuple[float, float, float | None]] = {}
        self.rows: dict[int, Fitting] = {}  # fitting row → its split, once its budget is checked
        self.flops = step_flops(space.model, space.batch, space.seq_len)  # every candidate's

    def best_s(self) -> float:
        """The ``top``-th best step so far (inf until there are ``top``)."""
        return self.ranked[self.top - 1].step.step_s if len(self.ranked) >= self.top else math.inf

    def examples_wanted(self) -> bool:
        """Whether infeasible meshes' reasons are still collected."""
        return len(self.infeasible) < INFEASIBLE_EXAMPLES

    def settle(self, i: int) -> None:
        """Skip group ``i`` for good."""
        self.skip[i] = self.settled[i] = 1

    def skip_for_floors(self, family: int, found: Sequence[int]) -> None:
        """Skip the groups ``found`` of ``family`` until one of its meshes is costed."""
        for i in found:
            self.skip[i] = 1
        self.passed.setdefault(family, []).extend(found)

    def pass_family(self, family: int, ep: int, floors: Floors) -> None:
        """Skip the groups of ``family`` (EP ``ep``) its least floor passes now: those whose
        quick bound passes the top or whose budget ceiling the least floor reaches
        (:meth:`SplitSpace.passed`), with no top those of a family every mesh of which is
        infeasible. Floors only rise and the top only gets faster, so each would be skipped
        when its turn came."""
        best_s = self.best_s()
        least = floors.least(self.examples_wanted())
        if best_s < math.inf or least == math.inf:
            members = self.groups.members[family]
            decided = self.space.passed(self.groups.row[members], ep, best_s, least)
            self.skip_for_floors(family, members[decided].tolist())

    def run(self) -> None:
        """Visit every group's runs of meshes in order (:func:`visits`)."""
        for i, run in visits(self.groups, self.shapes, self.skip):
            group = self.groups.of(i)
            family = int(self.groups.family[i])
            floors = self.families.get(family)
            if floors is None:
                floors = self.families[family] = self.first_floors(group)
                self.pass_family(family, group.ep, floors)
                if self.skip[i]:
                    continue
            for mesh in run:
                # the top only gets faster, so a mesh skipped here skips the rest of the run
                budget = self.budget(i, group, family, floors)
                if budget is None:
                    break
                if floors.of(mesh, self.examples_wanted()) >= budget:
                    continue  # this mesh's costing would answer None (or its infeasible level)
                self.cost(group, family, floors, mesh, budget)

    def first_floors(self, group: Group) -> Floors:
        """The floors of ``group``'s family, at its first visit."""
        blocks = self.blocks.get(group.cp)
        if blocks is None:
            costing = self.space.costings[group.cp]
            blocks = self.blocks[group.cp] = BlockFloors(costing, self.groups.sizes(group.cp))
        return Floors(blocks, self.algorithms, self.shapes[group.tp], group.micro_batch, group.ep)

    def budget(self, i: int, group: Group, family: int, floors: Floors) -> float | None:
        """The largest block FC time with which group ``i`` can still make the top, or None
        when it cannot (the group then skipped: for good, or for its family's floors)."""
        best_s = self.best_s()
        known = self.limits.get(i)
        if known is None or known[0] != best_s:  # else the checks of best_s alone pass
            if group.quick >= best_s:
                self.settle(i)
                return None
            # the budget is at most its ceiling: no need to price the bound below it
            ceiling = math.inf
            if best_s < math.inf:
                fit = self.rows.get(group.row)
                if fit is None:
                    fit = self.rows[group.row] = self.space.fitting[group.row]
                ceiling = self.space.budget_ceiling(fit, group.ep, best_s)
            known = self.limits[i] = (best_s, ceiling, None)
        _, ceiling, budget = known
        least = floors.least(self.examples_wanted())
        if least >= ceiling:
            self.skip_for_floors(family, [i])
            return None
        if budget is None:
            bound = self.space.bound(group.split, group.zero, group.ep, group.cp)
            if bound.beaten(best_s):
                self.settle(i)
                return None
            budget = bound.budget(best_s) if best_s < math.inf else math.inf
            self.limits[i] = (best_s, ceiling, budget)
        if least >= budget:
            self.skip_for_floors(family, [i])
            return None
        return budget

    def cost(self, group: Group, family: int, floors: Floors, mesh: Mesh, budget: float) -> None:
        """Cost ``group`` on ``mesh`` within ``budget`` and keep the candidate if it makes the
        top; raise the family's floors and look again at the groups they had passed."""
        space = self.space
        costing = space.costings[group.cp]
        candidate, why = _cost(space, costing, self.algorithms, group, mesh, budget, self.flops)
        floors.cost(mesh)
        for j in self.passed.pop(family, ()):  # their floors rose: looked at again when they come
            if not self.settled[j]:
                self.skip[j] = 0
        self.pass_family(family, group.ep, floors)  # those its raised floors pass now
        if candidate is None:
            if why is not None:
                self.infeasible.append(why)
            return
        memory = candidate.memory
        if not fits(memory, space.profile.memory_bytes, space.options.step.headroom):
            self.rejected.append(Rejection.of(candidate.label, memory))
            return
        bisect.insort(self.ranked, candidate, key=_rank_key)
        del self.ranked[self.top :]


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
    (:func:`~meshtune.step.model.step_flops`)."""
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
