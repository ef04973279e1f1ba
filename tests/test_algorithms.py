"""The registry-wide checks: every registered algorithm through the same oracle and traffic tests.

A new algorithm is picked up by these tests as soon as it is registered: on square and
rectangular meshes, for every dataflow and transposition it accepts, its executor must match
dense NumPy and the traffic its virtual mesh counted must equal what its cost model predicts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import meshtune.engines
from meshtune.algorithms.base import Algorithm, resolve
from meshtune.algorithms.registry import (
    COMPARISON_FAMILIES,
    REGISTRY,
    algorithm_names,
    engine_kernels,
    get_algorithm,
    layout_algorithm,
)
from meshtune.catalog import load_profile
from meshtune.compare.alternatives import FAMILIES
from meshtune.cost.config import Config
from meshtune.cost.schedule import AxisTraffic, traffic
from meshtune.dataflow import Stationary, layer_dataflow, plan_dataflows
from meshtune.errors import MeshtuneError
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import ring_profile
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import make_plan
from meshtune.verify.run import reduced_layer, verify_plan

ALGORITHMS = [REGISTRY[name] for name in algorithm_names()]
KERNELS = Path(meshtune.engines.__file__).with_name("jax_kernels.py")
MESHES = [Mesh(1, 1), Mesh(2, 2), Mesh(4, 4), Mesh(2, 4), Mesh(4, 2), Mesh(1, 4), Mesh(4, 1)]
# Chip counts whose 3D shapes (depth > 1) an algorithm enumerates are tested too.
DEPTH_CHIPS = (8, 32)
BLOCK = 2
BPE = 2
# One layer per Table 1 row and transposition: sizes divide by every mesh above and B.
LAYER = FcLayer("l", 64, 96, 32, None)
ROWS = [(s, t) for s in Stationary for t in (False, True)]


def _cases(algorithm: Algorithm) -> list[tuple[Mesh, Stationary, bool, Config]]:
    cases = []
    deep = [m for chips in DEPTH_CHIPS for m in algorithm.meshes(chips) if m.depth > 1]
    for mesh in MESHES + deep:
        if algorithm.mesh_problem(mesh) is not None:
            continue
        for stationary, transposed in ROWS:
            choice = layer_dataflow(LAYER, stationary, transposed)
            configs, reason = algorithm.configs(choice, mesh, BLOCK)
            if reason is None:
                # The smallest, the largest and one in between.
                picked = {configs[0], configs[len(configs) // 2], configs[-1]}
                cases.extend((mesh, stationary, transposed, c) for c in sorted(picked))
    return cases


def with_depth_axis(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` with axis-2 (depth) link parameters copied from axis 0, so that every
    communication an algorithm lists can be priced on its own axis."""
    data = profile.model_dump(mode="json")
    for kind in ("all_gather", "reduce_scatter", "send_recv"):
        data[kind]["axis2"] = data[kind]["axis0"]
    return HardwareProfile.model_validate(data)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_every_algorithm_matches_dense_numpy_and_its_predicted_traffic(
    algorithm: Algorithm,
) -> None:
    cases = _cases(algorithm)
    assert cases, f"{algorithm.name} accepts none of the test meshes"
    rng = np.random.default_rng(7)
    square = rectangular = 0
    for mesh, stationary, transposed, config in cases:
        square += mesh.rows == mesh.cols > 1
        rectangular += mesh.rows != mesh.cols
        for op in layer_dataflow(LAYER, stationary, transposed).ops:
            a = rng.standard_normal(op.operand_shapes[0])
            b = rng.standard_normal(op.operand_shapes[1])
            virtual = VirtualMesh(mesh.rows, mesh.cols, BPE, mesh.depth)
            got = algorithm.execute(op, a, b, virtual, config, BLOCK)
            where = (
                f"{algorithm.name} {op.pass_.value} {op.dataflow.value} on {mesh.label} {config}"
            )
            np.testing.assert_allclose(
                got, dense_gemm(op, a, b), rtol=1e-10, atol=1e-10, err_msg=where
            )
            counted = tuple(AxisTraffic(*c.as_tuple()) for c in virtual.counters)
            predicted = traffic(algorithm.comms(op, mesh, config, BPE))
            assert counted == predicted, where
    assert (square and rectangular) or algorithm.mesh_problem(Mesh(2, 4)) is not None


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_every_algorithm_costs_are_consistent(algorithm: Algorithm, tpuv4: HardwareProfile) -> None:
    tpuv4 = with_depth_axis(tpuv4)
    for mesh, stationary, transposed, config in _cases(algorithm):
        for op in layer_dataflow(LAYER, stationary, transposed).ops:
            cost = algorithm.cost(op, mesh, tpuv4, config)
            assert cost.total_s == pytest.approx(
                cost.prologue_s + (cost.iterations - 1) * cost.steady_s + cost.epilogue_s
            )
            # Never faster than its compute, never slower than compute and communication
            # back to back.
            assert cost.total_s >= cost.compute_s * (1 - 1e-12)
            links = ring_profile(tpuv4, mesh)  # the links the mesh's rings run on
            comm = sum(c.time(links).total_s for c in algorithm.comms(op, mesh, config, 2))
            assert cost.total_s <= (cost.compute_s + comm) * (1 + 1e-12)
            assert cost.comm.total_s == pytest.approx(comm)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_every_algorithm_reduced_sizes_stay_legal(algorithm: Algorithm) -> None:
    for mesh, stationary, transposed, config in _cases(algorithm):
        choice = layer_dataflow(LAYER, stationary, transposed)
        small = layer_dataflow(
            reduced_layer(choice, algorithm, mesh, config, BLOCK), stationary, transposed
        )
        configs, reason = algorithm.configs(small, mesh, BLOCK)
        assert reason is None and config in configs, (algorithm.name, mesh, config)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_every_algorithm_plans_and_verifies(
    algorithm: Algorithm, gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    plan = make_plan(gpt3, tpuv4, 16, algorithm=algorithm.name)
    assert {layer.algorithm for layer in plan.layers} == {algorithm.name}
    report = verify_plan(plan)
    assert report.ok, report.failures()


def _kernel_families() -> set[str]:
    """The kernel families ``make_gemm`` runs, read from ``jax_kernels.py`` without JAX: family
    ``f`` is a table ``F_KERNELS`` of one kernel per dataflow that ``make_gemm`` uses."""
    tree = ast.parse(KERNELS.read_text(encoding="utf-8"))
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    used = {n.id for n in ast.walk(functions["make_gemm"]) if isinstance(n, ast.Name)}
    return {
        node.target.id.removesuffix("_KERNELS").lower()
        for node in tree.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id.endswith("_KERNELS")
        and node.target.id in used
        and isinstance(node.value, ast.Dict)
        and {k.value for k in node.value.keys if isinstance(k, ast.Constant)} == {"OS", "LS", "RS"}
    }


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_every_algorithm_entry_resolves(algorithm: Algorithm) -> None:
    """Every field a consumer looks an algorithm up by resolves: its executor and task graph are
    functions, its engine kernel is a family the JAX engine runs, its comparison family is one
    the alternatives table lists (with it among the family's members)."""
    assert callable(resolve(algorithm.executor))
    assert callable(resolve(algorithm.timeline))
    assert resolve(algorithm.timeline).__module__ == "meshtune.timeline.graphs"
    if algorithm.kernel is not None:
        assert algorithm.kernel in _kernel_families()
        assert engine_kernels()[algorithm.name] == algorithm.kernel
    assert algorithm.engine == (algorithm.name in engine_kernels())
    if algorithm.family is not None:
        assert algorithm.family in COMPARISON_FAMILIES
        assert algorithm.name in FAMILIES[algorithm.family]
    else:
        assert all(algorithm.name not in members for members in FAMILIES.values())


def test_every_family_and_kernel_has_a_member() -> None:
    assert _kernel_families() == {"meshslice", "wang", "cannon"}
    assert set(engine_kernels().values()) == _kernel_families()
    assert tuple(FAMILIES) == COMPARISON_FAMILIES
    for family, members in FAMILIES.items():
        assert members, family
        assert members[0] == family  # the family's namesake first
    name, layouts = layout_algorithm()
    assert REGISTRY[name].layouts is layouts
    assert [a.name for a in ALGORITHMS if a.layouts is not None] == [name]
    assert layouts("fsdp", 1, "C", 4)  # one named layout's configurations


def test_registry_names_and_unknown_name() -> None:
    assert algorithm_names()[:2] == ("meshslice", "collective")
    with pytest.raises(
        MeshtuneError, match=r"unknown algorithm 'gspmd'; known algorithms: meshslice"
    ):
        get_algorithm("gspmd")


# ------------------------------------------------------------------ MeshSlice vs Collective


def test_meshslice_at_one_slice_is_collective(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    meshslice, collective = REGISTRY["meshslice"], REGISTRY["collective"]
    one = Config.of(slices=1)
    for choice in plan_dataflows(
        [FcLayer("qkv", 16384, 12288, 36864, None), FcLayer("o", 16384, 12288, 12288, "qkv")]
    ).layers:
        for mesh in (Mesh(4, 4), Mesh(8, 2), Mesh(2, 8)):
            for op in choice.ops:
                assert meshslice.cost(op, mesh, tpuv4, one) == collective.cost(op, mesh, tpuv4, one)
                assert meshslice.comms(op, mesh, one, 2) == collective.comms(op, mesh, one, 2)


@pytest.mark.parametrize("chips", [16, 64, 256])
def test_meshslice_at_its_best_is_never_slower_than_collective(
    gpt3: ModelSpec, tpuv4: HardwareProfile, chips: int
) -> None:
    ms = make_plan(gpt3, tpuv4, chips, algorithm="meshslice")
    coll = make_plan(gpt3, tpuv4, chips, algorithm="collective")
    assert ms.fc_time_s <= coll.fc_time_s
    assert all(layer.config == {"slices": 1} for layer in coll.layers)


def test_auto_picks_the_fastest_and_lists_the_others(
    gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    plan = make_plan(gpt3, tpuv4, 256, algorithm="auto")
    assert plan.inputs.algorithm == "auto"
    chosen = plan.layers[0].algorithm
    per_algorithm: dict[str, float] = {}
    for c in plan.candidates:
        per_algorithm[c.algorithm] = min(c.fc_time_s, per_algorithm.get(c.algorithm, c.fc_time_s))
    # Every algorithm an engine runs that allows a mesh of 256 chips competes (issue 14).
    allowed = {
        name
        for name, a in REGISTRY.items()
        if a.engine and any(a.mesh_problem(mesh) is None for mesh in a.meshes(256))
    }
    assert set(per_algorithm) == allowed
    assert plan.fc_time_s == min(per_algorithm.values()) == per_algorithm[chosen]


def test_unknown_algorithm_is_an_error(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    with pytest.raises(MeshtuneError, match="unknown algorithm 'fast'"):
        make_plan(gpt3, tpuv4, 16, algorithm="fast")


# --------------------------------------------------------------------------- overlap (§5.3)


def test_collectives_that_cannot_overlap_slow_meshslice_down(gpt3: ModelSpec) -> None:
    tpu = load_profile("tpuv4")
    blocking = HardwareProfile.model_validate(
        tpu.model_dump(mode="json") | {"overlapped": ["send_recv"]}
    )
    op = plan_dataflows([FcLayer("qkv", 16384, 12288, 36864, None)]).layers[0].ops[0]
    s4 = Config.of(slices=4)
    free = REGISTRY["meshslice"].cost(op, Mesh(4, 4), tpu, s4)
    held = REGISTRY["meshslice"].cost(op, Mesh(4, 4), blocking, s4)
    # The gathers run one after the other (synchronous), then the GeMM: their sum instead of
    # their max, in the prologue as in the steady state. held.comm sums the 4 iterations'.
    gathers = held.comm.total_s / 4
    gemm = held.epilogue_s
    assert held.prologue_s == pytest.approx(gathers)
    assert held.steady_s == pytest.approx(gathers + gemm)
    assert free.prologue_s < gathers  # overlapped: the two axes in parallel
    assert free.steady_s == pytest.approx(max(free.prologue_s, gemm))
    assert held.total_s > free.total_s
    # Collective has nothing to overlap with its GeMM, but its two gathers now run in turn.
    one = Config.of(slices=1)
    collective = REGISTRY["collective"]
    serial = collective.cost(op, Mesh(4, 4), blocking, one)
    assert serial.total_s == pytest.approx(serial.comm.total_s + serial.compute_s)
    assert serial.total_s > collective.cost(op, Mesh(4, 4), tpu, one).total_s
