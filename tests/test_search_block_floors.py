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
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_model, load_profile
from meshtune.hardware.mesh import mesh_shapes
from meshtune.search.space import SplitSpace
from meshtune.search.visit import BlockFloors, Floors

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
    # floored with the other micro-batch sizes of the TP size, as the search floors them
    blocks = BlockFloors(costing, {tp: [(m, ep) for m in (1, 2, 8)]})
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
    # Wang's floors without its family floors (wang_family): mesh by mesh
    costing = space.costings[1]
    wang = replace(REGISTRY["wang"], name="wang-by-mesh", family_floors=None)
    meshes = tuple(mesh_shapes(64))
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
    families = _families(space)
    assert len(families) > 10
    for (_, _, ep, _), rows in families.items():
        fits = [space.fitting[row] for row in rows]
        for best_s in (min(f.quick for f in fits) * 1.5, max(f.quick for f in fits), math.inf):
            each = [space.budget_ceiling(f, ep, best_s) for f in fits]
            assert space.budget_ceilings(np.array(rows), ep, best_s).tolist() == each


@pytest.mark.parametrize("case", CASES)
def test_families_floored_together_are_floored_one_by_one(case: tuple[str, str]) -> None:
    # BlockFloors floors every family of a TP size at once when the first is asked (one NumPy
    # evaluation of all their blocks): the same floats as each family floored alone
    space = _space(*case)
    costing = space.costings[1]
    eps = (1, 2) if space.model.moe is not None else (1,)
    sizes = {tp: [(micro, ep) for micro in (1, 2, 4, 8) for ep in eps] for tp in (8, 32, 128)}
    together = BlockFloors(costing, sizes)
    for name in ("meshslice", "collective", "wang"):
        algorithm = REGISTRY[name]
        for tp, pairs in sizes.items():
            meshes = tuple(mesh_shapes(tp))
            for micro, ep in reversed(pairs):  # the last asked first: the rest come with it
                alone = BlockFloors(costing).of(algorithm, meshes, micro, ep)
                assert together.of(algorithm, meshes, micro, ep) == alone
                assert (alone is None) == (algorithm.family_floors is None)


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from([("gpt3", 6144), ("mixtral-8x7b", 1024)]),
    top=st.floats(0.5, 3.0),
    floor=st.floats(0.0, 2.0),
    nudge=st.sampled_from([0.0, 1e-12, -1e-12]),
)
def test_a_familys_groups_passed_are_those_the_exact_ceilings_pass(
    case: tuple[str, int], top: float, floor: float, nudge: float
) -> None:
    # SplitSpace.passed decides with the ceilings of the quick bounds alone (no block work
    # priced) before the exact ones: the same answers as the exact ceilings, group by group
    # (least floors drawn around the ceilings, a hair either side of one)
    model_name, chips = case
    space = _built(model_name, chips)
    for (_, _, ep, _), rows in list(_families(space).items())[::7]:
        quicks = [space.fitting[row].quick for row in rows]
        best_s = min(quicks) * top
        ceilings = space.budget_ceilings(np.array(rows), ep, best_s).tolist()
        finite = [c for c in ceilings if c < math.inf] or [1.0]
        least = sorted(finite)[int(floor * (len(finite) - 1) / 2)] * (1 + nudge)
        expected = [
            quick >= best_s or least >= ceiling
            for quick, ceiling in zip(quicks, ceilings, strict=True)
        ]
        assert space.passed(np.array(rows), ep, best_s, least).tolist() == expected


def _families(space: SplitSpace) -> dict[tuple[int, int, int, int], list[int]]:
    """Family (CP, micro-batch, EP, TP) → the rows of its fitting splits, by a loop over them."""
    families: dict[tuple[int, int, int, int], list[int]] = {}
    for row, fit in enumerate(space.fitting):
        for ep in fit.eps:
            micro = space.batch // (fit.split[0] * fit.split[2])
            families.setdefault((fit.cp, micro, ep, fit.tp), []).append(row)
    return families


_BUILT: dict[tuple[str, int], SplitSpace] = {}


def _built(model_name: str, chips: int) -> SplitSpace:
    """The TPUv4 split space of ``model_name`` at ``chips`` chips and batch chips / 2 (kept
    between examples: building it is the slow part)."""
    if (model_name, chips) not in _BUILT:
        model = load_model(model_name)
        _BUILT[model_name, chips] = SplitSpace.build(
            model, load_profile("tpuv4"), chips, batch=chips // 2, seq_len=model.seq_len
        )
    return _BUILT[model_name, chips]
