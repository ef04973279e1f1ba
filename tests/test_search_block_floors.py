"""A family's block floors (:class:`meshtune.search.visit.BlockFloors`, issue 17).

The cluster search skips a mesh, or a whole (split, ZeRO, EP, CP) group, when the floor of its
block FC time reaches the budget; the floors of a family are the larger of Σ its layers'
compute floors and Σ their layer floors, on every mesh at once. A floor above a mesh's block
time would skip a mesh that could make the top, so the property below checks every floor
against the costed level's block time, for dense and MoE models, flat and tiered profiles and
every algorithm; the plans themselves are checked in ``test_identical_plans.py``. A family's
groups are checked against its least floor at once when it is first visited, with the budget
ceilings :meth:`SplitSpace.budget_ceiling` gives each of them.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.algorithms import REGISTRY
from meshtune.mesh import mesh_shapes
from meshtune.search.space import Fitting, SplitSpace
from meshtune.search.visit import BlockFloors, Floors
from meshtune.specs import load_model, load_profile

CASES = [("gpt3", "tpuv4"), ("mixtral-8x7b", "h100-8gpu-nodes"), ("llama3-405b", "tpuv4")]


def _space(model_name: str, profile_name: str) -> SplitSpace:
    model = load_model(model_name)
    return SplitSpace.build(
        model, load_profile(profile_name), 1024, batch=512, seq_len=model.seq_len
    )


@settings(max_examples=40, deadline=None)
@given(
    case=st.sampled_from(CASES),
    tp=st.sampled_from([4, 8, 16, 32, 64, 128]),
    micro=st.sampled_from([1, 2, 8]),
    ep=st.sampled_from([1, 2]),
    names=st.sampled_from([["meshslice"], ["meshslice", "wang"], ["collective", "cannon"]]),
)
def test_every_block_floor_is_at_most_the_costed_block_time(
    case: tuple[str, str], tp: int, micro: int, ep: int, names: list[str]
) -> None:
    space = _space(*case)
    if ep > 1 and space.model.moe is None:
        ep = 1
    costing = space.costings[1]
    meshes = tuple(mesh_shapes(tp))
    algorithms = [REGISTRY[name] for name in names]
    blocks = BlockFloors(costing)
    floors = Floors(blocks, algorithms, meshes, micro, ep)
    for mesh in meshes:
        times = []
        for algorithm in algorithms:
            result = costing.evaluate(algorithm, mesh, micro, ep=ep)
            assert result is not None
            block = sum(c.time_s for c in result.layers) if result.feasible else math.inf
            tight = blocks.of(algorithm, meshes, micro, ep)
            if tight is not None:
                assert tight[meshes.index(mesh)] <= block
            times.append(block)
        assert floors.of(mesh, examples_wanted=False) <= min(times)
        floors.cost(mesh)  # raised to what the costing knows: the block time itself
        assert floors.of(mesh, examples_wanted=False) == min(times)


def test_block_floors_are_tighter_than_the_largest_layers_floor() -> None:
    # Costing.floors raises only the largest layer to its layer floor; the block floors raise
    # every layer, so on meshes that communicate more than they compute they are higher.
    space = _space("llama3-405b", "tpuv4")
    costing, meshslice = space.costings[1], REGISTRY["meshslice"]
    meshes = tuple(mesh_shapes(128))
    tight = BlockFloors(costing).of(meshslice, meshes, 1, 1)
    loose = costing.floors(meshslice, meshes, 1)
    assert tight is not None
    assert all(t >= f for t, f in zip(tight, loose, strict=True))
    assert any(t > 1.5 * f for t, f in zip(tight, loose, strict=True))


def test_an_algorithm_with_no_family_floor_keeps_the_costing_floors() -> None:
    space = _space("gpt3", "tpuv4")
    costing, wang = space.costings[1], REGISTRY["wang"]
    meshes = tuple(mesh_shapes(64))
    assert wang.family_floors is None
    assert BlockFloors(costing).of(wang, meshes, 1, 1) is None
    floors = Floors(BlockFloors(costing), [wang], meshes, 1, 1)
    assert floors.each == costing.floors(wang, meshes, 1)


@pytest.mark.parametrize(("model_name", "chips"), [("gpt3", 6144), ("mixtral-8x7b", 1024)])
def test_a_familys_budget_ceilings_at_once_are_each_groups_ceiling(
    model_name: str, chips: int
) -> None:
    # the search checks every group of a family against its least floor when the family is
    # first visited (SplitSpace.budget_ceilings): the values of budget_ceiling, group by group
    model = load_model(model_name)
    space = SplitSpace.build(
        model, load_profile("tpuv4"), chips, batch=chips // 2, seq_len=model.seq_len
    )
    families: dict[tuple[int, int, int, int], list[Fitting]] = {}
    for fit in space.fitting:
        for ep in fit.eps:
            micro = space.batch // (fit.split[0] * fit.split[2])
            families.setdefault((fit.cp, micro, ep, fit.tp), []).append(fit)
    assert len(families) > 10
    for (cp, _, ep, _), fits in families.items():
        for best_s in (min(f.quick for f in fits) * 1.5, max(f.quick for f in fits), math.inf):
            each = [space.budget_ceiling(f.split, f.quick, ep, cp, best_s) for f in fits]
            splits, quicks = [f.split for f in fits], [f.quick for f in fits]
            assert space.budget_ceilings(splits, quicks, ep, cp, best_s) == each
