"""The split level of the cluster search (issue 17): grouped visit, budget ceiling, mesh floors.

The search visits (split, ZeRO, EP, CP) groups with their meshes instead of one (split, mesh)
at a time, and skips a group when the floors its meshes' costing has reached pass its budget,
or a ceiling of that budget priced without the step model. None of it may change a decision:
the visit order is that of the item-by-item sort, the ceiling is at least the budget, and the
whole search answers as the item-by-item loop it replaced (the oracle below, the loop of
f23ce28) on dense, MoE, tiered, multi-algorithm and memory-bound cases.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import make_profile
from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_model, load_profile
from meshtune.hardware.mesh import Mesh, mesh_shapes
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.search import levels, visit
from meshtune.search.legal import split_columns, splits
from meshtune.search.levels import search_cluster
from meshtune.search.space import Fittings, SplitSpace, collector_paused
from meshtune.search.split import (
    ClusterCandidate,
    Rejection,
    cluster_candidate,
    first_reasons,
)
from meshtune.step.bounds import NO_STAGE, fitting_zero, fitting_zeros, split_memory
from meshtune.step.memory import (
    MemoryBreakdown,
    Recompute,
    block_parameters,
    fits,
    memory_per_chip,
    over_capacity,
)
from meshtune.step.model import step_flops
from meshtune.step.options import ClusterOptions, StepOptions
from meshtune.step.pipeline import (
    Schedule,
    dualpipe_legal,
    interleavings,
    model_copies,
    stage_layout,
)
from test_memory import TINY

HBM = {"hbm_bytes_per_s": 1e11}


def _item_by_item(
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    *,
    batch: int,
    algorithms: Sequence[Algorithm],
    options: ClusterOptions,
    top: int,
) -> tuple[list[tuple[str, float]], int, list[str]]:
    """The search loop of f23ce28: every (split, mesh) sorted, then decided one at a time.
    Returns (ranked labels and steps, rejected count, rejection examples)."""
    space = SplitSpace.build(
        model, profile, chips, batch=batch, seq_len=model.seq_len, options=options
    )
    items = []
    for row, fit in enumerate(space.fitting):
        for ep in fit.eps:
            micro = batch // (fit.split[0] * fit.split[2])
            group = visit.Group(fit.quick, fit.split, fit.zero, fit.tp, ep, fit.cp, micro, row)
            items += [(group, mesh) for mesh in levels._shapes(fit.tp, algorithms, None)]
    items.sort(key=lambda item: _visit_key(*item))
    ranked: list[ClusterCandidate] = []
    capacity, headroom = profile.memory_bytes, options.step.headroom
    rejected = [(r.total_bytes, r.reason(capacity, headroom)) for r in space.rejected]
    for group, mesh in items:
        best_s = ranked[top - 1].step_s if len(ranked) >= top else math.inf
        if group.quick >= best_s:
            continue
        bound = space.bound(group.split, group.zero, group.ep, group.cp)
        if bound.beaten(best_s):
            continue
        budget = bound.budget(best_s) if best_s < math.inf else math.inf
        costing = space.costings[group.cp]
        flops = step_flops(model, batch, model.seq_len)
        candidate, _ = levels._cost(space, costing, algorithms, group, mesh, budget, flops)
        if candidate is None:
            continue
        reason = over_capacity(candidate.memory, profile.memory_bytes, options.step.headroom)
        if reason is not None:
            rejected.append((candidate.memory.total_bytes, f"{candidate.label}: {reason}"))
            continue
        ranked.append(candidate)
        ranked.sort(key=levels._rank_key)
        del ranked[top:]
    examples = [reason for _, reason in sorted(rejected)[: levels.REJECTION_EXAMPLES]]
    return [(c.label, c.step_s) for c in ranked], len(rejected), examples


def _visit_key(group: visit.Group, mesh: Mesh) -> tuple[float, int, int, int, int, int, int, int]:
    """Where (group, mesh) comes in the visit, item by item: the group's quick bound raised by
    VISIT_TP_WEIGHT per doubling of its TP size, DP, PP, the mesh's rows, m, v, EP, CP."""
    dp, pp, m, v = group.split
    lead = group.quick * (1 + visit.VISIT_TP_WEIGHT * math.log2(group.tp))
    return (lead, dp, pp, mesh.rows, m, v, group.ep, group.cp)


def _round(memory: float | None = None) -> HardwareProfile:
    """The round-number test profile with an HBM rate, and ``memory`` bytes per chip."""
    return make_profile(memory_bytes=memory, **HBM)


CASES: list[tuple[str, Callable[[], ModelSpec], Callable[[], HardwareProfile], int, int]] = [
    ("tiny, memory-bound", lambda: TINY, lambda: _round(400_000.0), 16, 8),
    ("tiny, 12 chips", lambda: TINY, lambda: _round(), 12, 12),
    ("gpt3 on TPUv4", lambda: load_model("gpt3"), lambda: load_profile("tpuv4"), 192, 96),
    (
        "mixtral on tiered H100",
        lambda: load_model("mixtral-8x7b"),
        lambda: load_profile("h100-8gpu-nodes"),
        64,
        64,
    ),
    (  # Cannon's square meshes: families none of whose meshes is feasible, before any top
        "mixtral on 24 tiered H100",
        lambda: load_model("mixtral-8x7b"),
        lambda: load_profile("h100-8gpu-nodes"),
        24,
        24,
    ),
]


@pytest.mark.parametrize(("name", "model", "profile", "chips", "batch"), CASES)
@pytest.mark.parametrize(
    "names",
    [("meshslice",), ("meshslice", "cannon"), ("collective", "summa"), ("megatron",), ("cannon",)],
)
def test_the_grouped_search_decides_as_the_item_by_item_one(
    name: str,
    model: Callable[[], ModelSpec],
    profile: Callable[[], HardwareProfile],
    chips: int,
    batch: int,
    names: tuple[str, ...],
) -> None:
    spec, hardware = model(), profile()
    algorithms = [REGISTRY[n] for n in names]
    options = ClusterOptions()
    expected = _item_by_item(
        spec, hardware, chips, batch=batch, algorithms=algorithms, options=options, top=3
    )
    found = search_cluster(
        spec,
        hardware,
        chips,
        batch=batch,
        seq_len=spec.seq_len,
        algorithms=algorithms,
        options=options,
        top=3,
    )
    ranked = [(c.label, c.step_s) for c in found.ranked]
    assert (ranked, found.rejected, list(found.rejections)) == expected, name


def _groups(draw: st.DrawFn) -> visit.Groups:
    """Up to 12 groups of few quick bounds (many ties), their splits drawn, one EP each."""
    keys = draw(
        st.lists(
            st.tuples(
                st.sampled_from([1.0, 2.0, 3.0]),  # few quick bounds: many ties
                st.sampled_from([1, 2]),
                st.sampled_from([1, 2]),
                st.sampled_from([1, 2, 4]),
                st.sampled_from([1, 2]),
                st.sampled_from([4, 6]),
                st.sampled_from([1, 2]),
                st.sampled_from([1, 2]),
            ),
            max_size=12,
            unique_by=lambda k: k[1:5] + k[6:],  # a group is its split, EP and CP
        )
    )
    # in the order of a space's fitting splits: CP, DP, PP, m, v (then EP)
    keys.sort(key=lambda k: (k[7], *k[1:5], k[6]))
    columns = list(zip(*keys, strict=True)) or [()] * 8
    quick = np.array(columns[0], dtype=np.float64)
    dp, pp, m, v, tp, ep, cp = (np.array(c, dtype=np.int64) for c in columns[1:])
    eps: dict[tuple[int, ...], int] = {}  # one EP degree a group
    eps_of = np.array([eps.setdefault((e,), len(eps)) for e in ep.tolist()], dtype=np.int64)
    ones = np.ones(len(keys))
    fitting = Fittings(
        dp=dp,
        pp=pp,
        m=m,
        vpp=v,
        cp=cp,
        tp=tp,
        micro=64 // (dp * m),
        zero=np.ones(len(keys), dtype=np.int64),
        quick=quick,
        span=ones,
        slope=ones,
        eps_of=eps_of,
        eps=tuple(eps),
    )
    return visit.Groups(fitting, np.arange(len(keys)))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_visits_keep_the_order_of_every_group_and_mesh_sorted(data: st.DataObject) -> None:
    groups = _groups(data.draw)
    shapes = {tp: tuple(data.draw(st.permutations(mesh_shapes(tp)))) for tp in (4, 6)}
    each = [groups.of(i) for i in range(len(groups))]
    items = [(i, mesh) for i, g in enumerate(each) for mesh in shapes[g.tp]]
    expected = sorted(items, key=lambda item: _visit_key(each[item[0]], item[1]))
    skip = bytearray(len(groups))
    got = [(i, mesh) for i, run in visit.visits(groups, shapes, skip) for mesh in run]
    assert got == expected
    # a group whose byte is set is left out, the others come in the same order
    skipped = data.draw(st.sets(st.sampled_from(range(len(groups))))) if len(groups) else set()
    for i in skipped:
        skip[i] = 1
    got = [(i, mesh) for i, run in visit.visits(groups, shapes, skip) for mesh in run]
    assert got == [(i, mesh) for i, mesh in expected if i not in skipped]


@pytest.mark.parametrize(("model_name", "chips"), [("mixtral-8x7b", 1024), ("gpt3", 6144)])
def test_the_groups_are_every_fitting_split_with_each_ep_degree(
    model_name: str, chips: int
) -> None:
    # Groups expands the fitting splits by their EP degrees at array speed: the groups a
    # loop over the splits makes, in its order, with the families numbered as they appear
    model = load_model(model_name)
    space = SplitSpace.build(
        model, load_profile("h100-8gpu-nodes"), chips, batch=chips // 2, seq_len=model.seq_len
    )
    rows = np.arange(0, len(space.fitting), 3)  # every third split
    groups = visit.Groups(space.fitting, rows)
    expected: list[visit.Group] = []
    for row in rows.tolist():
        fit = space.fitting[row]
        micro = space.batch // (fit.split[0] * fit.split[2])
        expected += [
            visit.Group(fit.quick, fit.split, fit.zero, fit.tp, ep, fit.cp, micro, row)
            for ep in fit.eps
        ]
    assert [groups.of(i) for i in range(len(groups))] == expected
    assert any(g.ep > 1 for g in expected) == (model.moe is not None)
    families = list(dict.fromkeys(g.family for g in expected))
    assert [families[f] for f in groups.family.tolist()] == [g.family for g in expected]
    for f, members in enumerate(groups.members):
        assert members.tolist() == [i for i, g in enumerate(expected) if g.family == families[f]]


CEILING_CASES = [
    ("gpt3", "tpuv4", 256, ClusterOptions()),
    ("gpt3", "tpuv4", 384, ClusterOptions(zero=3, step=StepOptions(recompute="full"))),
    ("llama3-70b", "h100-8gpu-nodes", 96, ClusterOptions()),
    ("mixtral-8x7b", "h100-8gpu-nodes", 64, ClusterOptions()),
    (
        "gpt3",
        "tpuv4",
        128,
        ClusterOptions(step=StepOptions(grad_accumulation="separate", attention="plain")),
    ),
]


@pytest.mark.parametrize(("model", "profile", "chips", "options"), CEILING_CASES)
def test_the_budget_ceiling_is_at_least_every_budget(
    model: str, profile: str, chips: int, options: ClusterOptions
) -> None:
    spec = load_model(model)
    space = SplitSpace.build(
        spec, load_profile(profile), chips, batch=chips // 2, seq_len=spec.seq_len, options=options
    )
    checked = 0
    for fit in space.fitting:
        for ep in fit.eps:
            bound = space.bound(fit.split, fit.zero, ep, fit.cp)
            assert fit.quick <= bound.step_s
            for above in (1e-9, 0.01, 0.3, 2.0, 50.0):
                best_s = bound.step_s * (1 + above)
                ceiling = space.budget_ceiling(fit, ep, best_s)
                assert ceiling >= bound.budget(best_s)
                checked += 1
            # the ceiling's floor of the step (the pipeline of the shared block work) is
            # tighter than the quick bound and still at most the bound's step
            dp, _, m, _ = fit.split
            block, _ = space.floors[space.batch // (dp * m), fit.tp, fit.cp, ep]
            floor = fit.span * block
            assert fit.quick <= floor * (1 + 1e-12)
            assert floor <= bound.step_s * (1 + 1e-12)
            assert fit.slope <= bound.slope * (1 + 1e-12)  # the ceiling's slope
    assert checked > 100


ZERO3_CASES = [
    ("gpt3", "tpuv4", 384, ClusterOptions(zero=3)),
    (
        "gpt3",
        "tpuv4",
        384,
        ClusterOptions(zero=3, step=StepOptions(recompute="full", zero3_recompute_gather=True)),
    ),
    (
        "llama3-70b",
        "h100-8gpu-nodes",
        96,
        ClusterOptions(zero=3, step=StepOptions(grad_accumulation="separate")),
    ),
    ("mixtral-8x7b", "h100-8gpu-nodes", 64, ClusterOptions(zero=3)),
]


@pytest.mark.parametrize(("model", "profile", "chips", "options"), ZERO3_CASES)
def test_the_zero3_floor_is_at_most_every_meshs_step(
    model: str, profile: str, chips: int, options: ClusterOptions
) -> None:
    # Bound.floor_s holds ZeRO-3's gathers at the compute-only block: every mesh's priced step
    # is at least it (and the linear bound), and it beats the linear bound where the gathers
    # show, so that the search skips those splits whatever their mesh
    spec, hardware = load_model(model), load_profile(profile)
    space = SplitSpace.build(
        spec, hardware, chips, batch=chips // 2, seq_len=spec.seq_len, options=options
    )
    meshslice = REGISTRY["meshslice"]
    checked = raised = 0
    for fit in space.fitting[::3]:
        for ep in fit.eps:
            bound = space.bound(fit.split, fit.zero, ep, fit.cp)
            assert fit.zero == 3 and bound.floor_s > 0.0
            raised += bound.floor_s > bound.step_s
            dp, pp, m, v = fit.split
            micro = space.batch // (dp * m)
            costing = space.costings[fit.cp]
            for mesh in levels._shapes(fit.tp, [meshslice], None):
                result = costing.evaluate(meshslice, mesh, micro, ep=ep)
                if result is None or not result.feasible:
                    continue
                candidate = cluster_candidate(
                    spec,
                    hardware,
                    costing.level(result, micro, ep),
                    batch=space.batch,
                    seq_len=spec.seq_len,
                    dp=dp,
                    pp=pp,
                    micro_batches=m,
                    options=options,
                    vpp=v,
                    zero=3,
                    ep=ep,
                    cp=fit.cp,
                )
                assert candidate.step_s >= bound.floor_s, (fit.split, mesh)
                assert candidate.step_s >= bound.step_s, (fit.split, mesh)
                checked += 1
    assert checked > 20 and raised > 0


def test_the_budget_ceiling_of_dualpipe_or_no_best_is_infinite() -> None:
    gpt3 = load_model("gpt3")
    options = ClusterOptions(step=StepOptions(schedule="dualpipe"))
    space = SplitSpace.build(
        gpt3, load_profile("tpuv4"), 256, batch=128, seq_len=gpt3.seq_len, options=options
    )
    fit = space.fitting[0]
    assert space.budget_ceiling(fit, 1, 10 * fit.quick) == math.inf
    plain = SplitSpace.build(gpt3, load_profile("tpuv4"), 256, batch=128, seq_len=gpt3.seq_len)
    fit = plain.fitting[0]
    assert plain.budget_ceiling(fit, 1, math.inf) == math.inf


def test_a_mesh_floor_is_what_its_costing_has_reached() -> None:
    gpt3 = load_model("gpt3")
    space = SplitSpace.build(gpt3, load_profile("tpuv4"), 256, batch=128, seq_len=gpt3.seq_len)
    costing = space.costings[1]
    meshslice = REGISTRY["meshslice"]
    mesh = Mesh(16, 16)
    # asked first, the floor starts the level: compute floors, the largest layer's raised to
    # its algorithm's floor, nothing priced
    assert 0.0 < costing.floor(meshslice, mesh, 1) < math.inf
    assert not costing.results and not costing.partial[("meshslice", mesh, 1, 1)].chosen
    # a budget below the compute floor stops before any layer is tuned
    assert costing.evaluate(meshslice, mesh, 1, budget=1e-9) is None
    floor = costing.floor(meshslice, mesh, 1)
    assert floor is not None and 1e-9 <= floor < math.inf
    assert costing.evaluate(meshslice, mesh, 1, budget=floor) is None
    result = costing.evaluate(meshslice, mesh, 1)
    assert result is not None and result.feasible
    assert costing.floor(meshslice, mesh, 1) == sum(c.time_s for c in result.layers) >= floor
    cannon, oblong = REGISTRY["cannon"], Mesh(2, 8)
    infeasible = costing.evaluate(cannon, oblong, 1)  # Cannon needs a square mesh
    assert infeasible is not None and not infeasible.feasible
    assert costing.floor(cannon, oblong, 1) == math.inf


def _stage_by_stage(
    model: ModelSpec,
    profile: HardwareProfile,
    split: tuple[int, int, int, int],
    tp: int,
    micro: int,
    options: ClusterOptions,
) -> tuple[int | None, float]:
    """fitting_zero of f23ce28: every allowed stage priced in turn until one fits."""
    dp, pp, m, vpp = split
    stages = options.zero_stages()
    if dp == 1 and 0 in stages:
        stages = (0,)
    elif dp > 1 and options.zero is None and not options.zero1:
        stages = stages[1:]
    total = 0.0
    for zero in stages:
        memory = memory_per_chip(
            model,
            fc_layers(model, micro, model.seq_len),
            micro_batch=micro,
            seq_len=model.seq_len,
            bytes_per_element=profile.bytes_per_element,
            dp=dp,
            pp=pp,
            tp=tp,
            stage_blocks=stage_layout(model.blocks, pp, vpp).most,
            micro_batches=m,
            zero=zero,
            recompute=options.step.recompute,
            vpp=vpp,
            attention=options.step.attention,
            ends=True,
            copies=model_copies(options.step.schedule),
            precision=options.step.precision,
        )
        total = memory.total_bytes
        if fits(memory, profile.memory_bytes, options.step.headroom):
            return zero, total
    return None, total


@pytest.mark.parametrize("memory", [2e5, 4e5, 8e5, 1.2e6])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_the_memory_pre_check_picks_the_stage_of_a_stage_by_stage_one(
    memory: float, recompute: Recompute
) -> None:
    profile = _round(memory)
    options = ClusterOptions(step=StepOptions(recompute=recompute))
    for split in splits(TINY, 16, 64, options):
        dp, pp, m, _ = split
        micro, tp = 64 // (dp * m), 16 // (dp * pp)
        zero, found = fitting_zero(
            TINY,
            profile,
            split,
            micro_batch=micro,
            block_params=block_parameters(fc_layers(TINY, micro, TINY.seq_len)),
            tp=tp,
            seq_len=TINY.seq_len,
            options=options,
        )
        expected = _stage_by_stage(TINY, profile, split, tp, micro, options)
        assert (zero, found.total_bytes) == expected, split


ARRAY_CASES = [
    ("gpt3", "tpuv4", 6_144, ClusterOptions()),
    ("llama3-405b", "tpuv4", 24_576, ClusterOptions()),
    (
        "llama3-405b",
        "tpuv4",
        1_000,
        ClusterOptions(step=StepOptions(recompute="none", attention="plain")),
    ),
    ("gpt3", "tpuv4", 4_096, ClusterOptions(step=StepOptions(schedule="dualpipe"))),
    ("gpt3", "tpuv4", 2_048, ClusterOptions(zero=3, step=StepOptions(headroom=0.3))),
    (
        "llama3-70b",
        "h100-8gpu-nodes",
        1_024,
        ClusterOptions(zero1=True, step=StepOptions(precision="fp8")),
    ),
]


@pytest.mark.parametrize(("name", "profile_name", "chips", "options"), ARRAY_CASES)
@pytest.mark.parametrize("cp", [1, 2])
def test_the_array_memory_pre_check_is_the_scalar_one_split_by_split(
    name: str, profile_name: str, chips: int, options: ClusterOptions, cp: int
) -> None:
    # fitting_zeros prices every split's totals as arrays; each stage and each rejected
    # split's last total must be fitting_zero's, bit for bit (both stages near the capacity
    # boundary and far from it appear among thousands of splits)
    model, profile = load_model(name), load_profile(profile_name)
    batch = chips // 2
    found = split_columns(model, chips // cp, batch, options)
    terms = split_memory(model, profile, model.seq_len // cp, options)
    params = {
        micro: block_parameters(fc_layers(model, micro, model.seq_len // cp))
        for micro in {batch // (dp * m) for dp, _, m, _ in found.rows()}
    }
    zeros, totals = fitting_zeros(
        model,
        profile,
        found,
        chips=chips,
        batch=batch,
        options=options,
        terms=terms,
        block_params=params,
        cp=cp,
    )
    assert NO_STAGE in zeros and any(zeros != NO_STAGE)
    for (dp, pp, m, vpp), zero, total in zip(found.rows(), zeros, totals, strict=True):
        micro = batch // (dp * m)
        expected, memory = fitting_zero(
            model,
            profile,
            (dp * cp, pp, m, vpp),
            micro_batch=micro,
            block_params=params[micro],
            tp=chips // (dp * pp * cp),
            seq_len=model.seq_len // cp,
            options=options,
            terms=terms,
        )
        assert zero == (NO_STAGE if expected is None else expected), (dp, pp, m, vpp)
        if expected is None:
            assert total == memory.total_bytes


def test_the_collector_is_paused_only_within_a_search(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    assert gc.isenabled()
    seen: list[bool] = []
    with collector_paused():
        seen.append(gc.isenabled())
        with collector_paused():  # nested: still off, and the outer scope turns it back on
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
    assert seen == [False, False, False] and gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a program that turned it off keeps it off
    finally:
        gc.enable()
    real = levels.visits

    def watching(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(levels, "visits", watching)
    search_cluster(TINY, make_profile(**HBM), 16, batch=32, seq_len=TINY.seq_len)
    assert seen[-1] is False and gc.isenabled()


def test_a_split_space_is_freed_without_the_cyclic_collector() -> None:
    # Regression (issue 17): each rejection held the space that holds it, a reference cycle
    # that left every search's space and its tens of thousands of objects to the collector,
    # whose first pass after a large search took a tenth of it. Freed by reference counts now.
    import gc
    import weakref

    llama = load_model("llama3-405b")
    gc.disable()
    try:
        space = SplitSpace.build(
            llama, load_profile("tpuv4"), 1024, batch=512, seq_len=llama.seq_len
        )
        assert space.rejected and space.fitting
        assert space.rejected[0].reason(space.profile.memory_bytes, 0.0)  # still writable
        freed = weakref.ref(space)
        del space
        assert freed() is None
    finally:
        gc.enable()


@settings(max_examples=30, deadline=None)
@given(
    count=st.integers(1, 4),
    others=st.lists(st.tuples(st.floats(0.0, 4.0), st.sampled_from("abc")), max_size=4),
)
def test_a_spaces_least_rejections_give_the_reasons_of_all_of_them(
    count: int, others: list[tuple[float, str]]
) -> None:
    # The search makes a Rejection only of the dropped splits it may show (Dropped.least): with
    # the candidates' rejections beside them, the reasons of every one of them (ties included:
    # the splits of one (PP, micro-batch) shape often need the same bytes)
    llama = load_model("llama3-405b")
    space = _dropping(llama)
    dropped = space.rejected
    assert len(dropped) > 100 and len(dropped.least(count)) < len(dropped)
    least = min(r.total_bytes for r in dropped)
    capacity, headroom = space.profile.memory_bytes, space.options.step.headroom
    extra = [Rejection(least * scale, lambda tag=tag: (tag, _MEMORY)) for scale, tag in others]
    every = first_reasons([*dropped, *extra], count, capacity, headroom)
    assert first_reasons([*dropped.least(count), *extra], count, capacity, headroom) == every


_MEMORY = MemoryBreakdown(1e12, 0.0, 0.0, 0.0, 0.0)
_SPACES: dict[str, SplitSpace] = {}


def _dropping(model: ModelSpec) -> SplitSpace:
    """A space of ``model`` on 1,024 TPUv4 chips that drops many splits (kept)."""
    if model.name not in _SPACES:
        _SPACES[model.name] = SplitSpace.build(
            model, load_profile("tpuv4"), 1024, batch=512, seq_len=model.seq_len
        )
    return _SPACES[model.name]


@pytest.mark.parametrize("micro", [[1, 3, 5, 8], [1, 3, 2**22, 2**40]])
def test_the_logits_of_many_splits_are_each_splits(micro: list[int]) -> None:
    # SplitMemory.totals takes the logits of every split as arrays when their products stay
    # below 2**53 (the first list), else pair by pair in Python (the second): the same floats
    import numpy as np

    llama = load_model("llama3-405b")
    terms = split_memory(llama, load_profile("tpuv4"), llama.seq_len, ClusterOptions())
    tp = [1, 7, 3, 6]
    found = terms._logits(np.array(micro), np.array(tp)).tolist()
    assert found == [terms.logits(m, t) for m, t in zip(micro, tp, strict=True)]


def _splits_one_by_one(
    model: ModelSpec, chips: int, batch: int, options: ClusterOptions
) -> list[tuple[int, int, int, int]]:
    """The rules of split_columns as nested loops over DP, PP, m and v."""
    found = []
    for dp in range(1, chips + 1):
        if chips % dp or batch % dp or options.dp not in (None, dp):
            continue
        for pp in range(1, min(chips // dp, model.blocks) + 1):
            if (chips // dp) % pp or options.pp not in (None, pp):
                continue
            for m in range(1, batch // dp + 1):
                if (batch // dp) % m or options.micro_batches not in (None, m):
                    continue
                for v in interleavings(model.blocks, pp, m):
                    if options.vpp not in (None, v):
                        continue
                    if options.step.schedule == "dualpipe" and not dualpipe_legal(pp, m, v):
                        continue
                    found.append((dp, pp, m, v))
    return found


def _pin(*values: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.sampled_from(values))


@settings(max_examples=300, deadline=None)
@given(
    chips=st.sampled_from([1, 6, 12, 16, 24, 36, 48, 60, 64, 96]),
    batch=st.sampled_from([1, 4, 6, 12, 16, 36, 64]),
    blocks=st.sampled_from([1, 3, 4, 6, 8, 12, 30]),
    dp=_pin(1, 2, 3, 4, 5),
    pp=_pin(1, 2, 3, 4, 8),
    micro_batches=_pin(1, 2, 4, 6, 7),
    vpp=_pin(1, 2, 3),
    schedule=st.sampled_from(["1f1b", "dualpipe"]),
)
@example(16, 64, 8, None, None, None, None, "dualpipe")  # m = 2 and m = 4 legal apart
@example(96, 64, 30, None, None, None, None, "1f1b")
def test_the_split_columns_are_the_splits_of_the_rules_one_by_one(
    chips: int,
    batch: int,
    blocks: int,
    dp: int | None,
    pp: int | None,
    micro_batches: int | None,
    vpp: int | None,
    schedule: Schedule,
) -> None:
    # split_columns expands each (dp, pp, m) by the v of its class at array speed: every
    # split of the rules, each once, in the order DP, PP, m, v, whatever the pins
    model = TINY.model_copy(update={"blocks": blocks})
    options = ClusterOptions(
        dp=dp, pp=pp, micro_batches=micro_batches, vpp=vpp, step=StepOptions(schedule=schedule)
    )
    expected = _splits_one_by_one(model, chips, batch, options)
    assert splits(model, chips, batch, options) == expected
    assert split_columns(model, chips, batch, options).dp.dtype == np.int64
