"""Exact array pricing of pass times (meshtune.cost.vector, ``Algorithm.layer_times``; issue 17).

Registry-wide: for every algorithm with ``layer_times``, the array time of every (configuration,
pass) equals the scalar ``priced(...)`` time within 1e-9 relative, over hypothesis-drawn meshes,
layer shapes (grouped ones included) and profiles (with and without a GeMM-efficiency curve and
overhead, full- and half-duplex, every kind overlapped or none); for every algorithm, the bound
the search uses is at most the scalar layer time, and so is the floor it checks before listing a
layer's configurations (``Algorithm.layer_floor``; also at most every configuration's time of
the padded layer). Where an algorithm prices a family of meshes at once
(``Algorithm.family_floor``), its floors equal ``layer_floor``'s to the bit. Hand-worked values
check the formulas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_profile
from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_profile
from meshtune.cost.config import Config
from meshtune.cost.meshslice import meshslice_floors, meshslice_times
from meshtune.cost.schedule import ring_collective
from meshtune.cost.vector import gemm_flop_times, ring_table, single_table
from meshtune.cost.wang import wang_floors
from meshtune.dataflow import Stationary, layer_dataflow
from meshtune.errors import ProfileError
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.search.padding import padded_layer
from meshtune.search.phase2 import config_bounds, layer_choice, layer_floor, priced
from test_algorithms import ROWS, with_depth_axis

TIMED = sorted(name for name, a in REGISTRY.items() if a.layer_times is not None)
CURVE = {
    "overhead_s": 3e-6,
    "curve": [
        {"flops": 1e5, "efficiency": 0.2},
        {"flops": 1e7, "efficiency": 0.6},
        {"flops": 1e9, "efficiency": 0.9},
    ],
}


def _profiles() -> dict[str, HardwareProfile]:
    """Shipped and round profiles, with and without a GeMM curve, half-duplex, overlapping
    nothing or only send-recv."""
    tpu = with_depth_axis(load_profile("tpuv4"))
    return {
        "tpuv4": tpu,
        "tpuv4-blocking": tpu.model_copy(update={"overlapped": []}),
        "tpuv4-half-duplex": tpu.model_copy(update={"full_duplex": False}),
        "h100": with_depth_axis(load_profile("h100-8gpu-nodes")),
        "round-curve": with_depth_axis(make_profile(gemm_efficiency=CURVE)),
        "round-sr-only": with_depth_axis(
            make_profile(overlapped=["send_recv"], full_duplex=False, gemm_efficiency=CURVE)
        ),
    }


PROFILES = _profiles()
MESHES = [Mesh(1, 1), Mesh(2, 2), Mesh(4, 4), Mesh(2, 8), Mesh(8, 2), Mesh(1, 4), Mesh(8, 1)]
MESHES += [Mesh(16, 1), Mesh(6, 1), Mesh(3, 1)]


@settings(max_examples=150)
@given(
    name=st.sampled_from(sorted(REGISTRY)),
    profile=st.sampled_from(sorted(PROFILES)),
    mesh=st.sampled_from(MESHES),
    row=st.sampled_from(ROWS),
    tokens=st.sampled_from([48, 256, 1536, 4096]),
    fin=st.sampled_from([96, 384, 2048]),
    fout=st.sampled_from([64, 768, 3072]),
    groups=st.sampled_from([1, 3]),
    fed=st.booleans(),
)
def test_array_times_equal_scalar_times(
    name: str,
    profile: str,
    mesh: Mesh,
    row: tuple[Stationary, bool],
    tokens: int,
    fin: int,
    fout: int,
    groups: int,
    fed: bool,
) -> None:
    algorithm, chosen = REGISTRY[name], PROFILES[profile]
    layer = FcLayer("h", tokens, fin, fout, "x" if fed else None, groups)
    choice = layer_dataflow(layer, *row)
    if algorithm.mesh_problem(mesh) is not None:
        return
    configs, reason = algorithm.configs(choice, mesh, chosen.slice_block)
    if reason is not None:
        return
    scalar = [
        [priced(algorithm, op, mesh, chosen, config).total_s for op in choice.ops]
        for config in configs
    ]
    times = algorithm.pass_times(choice.ops, mesh, chosen, configs)
    if times is not None:
        np.testing.assert_allclose(times, scalar, rtol=1e-9, atol=0.0)
    bounds = config_bounds(algorithm, choice, mesh, chosen, configs)
    if bounds is not None:
        for bound, passes in zip(bounds, scalar, strict=True):
            assert bound <= sum(passes)
    floor = layer_floor(algorithm, choice, mesh, chosen)
    assert floor <= min(sum(passes) for passes in scalar)
    if times is not None:
        assert floor <= times.sum(axis=1).min()


def _layers(tokens: int, features: int, groups: list[int]) -> st.SearchStrategy[FcLayer]:
    """Unfed layers of up to ``tokens`` tokens and ``features`` in and out features."""
    return st.builds(
        FcLayer,
        st.just("h"),
        st.integers(1, tokens),
        st.integers(1, features),
        st.integers(1, features),
        st.none(),
        st.sampled_from(groups),
    )


FLOORED = sorted(name for name, a in REGISTRY.items() if a.pass_floors is not None)


@settings(max_examples=80)
@given(
    name=st.sampled_from(FLOORED),
    profile=st.sampled_from(sorted(PROFILES)),
    mesh=st.sampled_from(MESHES),
    row=st.sampled_from(ROWS),
    layer=_layers(5000, 3000, [1, 3]),
)
def test_the_floor_of_a_layer_bounds_its_padded_times(
    name: str, profile: str, mesh: Mesh, row: tuple[Stationary, bool], layer: FcLayer
) -> None:
    # The search checks the floor of the exact layer before padding it (search.costing).
    algorithm, chosen = REGISTRY[name], PROFILES[profile]
    choice = layer_dataflow(layer, *row)
    if algorithm.mesh_problem(mesh) is not None:
        return
    padded, (configs, reason) = padded_layer(choice, mesh, algorithm, chosen.slice_block)
    if reason is not None:
        return
    floor = layer_floor(algorithm, choice, mesh, chosen)
    times = [
        sum(priced(algorithm, op, mesh, chosen, config).total_s for op in padded.ops)
        for config in configs
    ]
    assert floor <= min(times)


def test_the_closed_form_algorithms_have_array_times() -> None:
    assert {"meshslice", "collective", "wang", "1d_tp", "fsdp", "megatron"} <= set(TIMED)


@pytest.mark.parametrize("name", TIMED)
def test_exact_bounds_price_one_configuration_per_decision(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With exact times as bounds, best_layer_choice prices with the scalar path only the
    # configurations whose time is within BOUND_SLACK of the best (here: one).
    from meshtune.search import phase2

    algorithm, profile = REGISTRY[name], PROFILES["tpuv4"]
    mesh = next(m for m in (Mesh(4, 4), Mesh(16, 1)) if algorithm.mesh_problem(m) is None)
    choice = layer_dataflow(FcLayer("h", 4096, 2048, 3072, None), Stationary.Y, False)
    configs, reason = algorithm.configs(choice, mesh, profile.slice_block)
    assert reason is None
    calls: list[Config] = []

    def counted(*args: object) -> object:
        calls.append(args[4])  # type: ignore[arg-type]
        return layer_choice(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(phase2, "layer_choice", counted)
    best = phase2.best_layer_choice(algorithm, choice, mesh, profile, configs)
    assert calls == [best.config]
    every = [layer_choice(algorithm, choice, mesh, profile, c, configs) for c in configs]
    assert best == min(every, key=lambda c: (c.time_s, c.config.sort_key()))


def test_hand_worked_meshslice_times() -> None:
    # Y-stationary forward of tokens 64, in 96, out 32: OS, m = 64, n = 32, k = 96, on 2 × 2
    # with S = 2, 2-byte elements, the round profile. AG_col of A: 64·96 / (4·2) · 2 = 1536 B
    # on axis 1 (ring 2, one step): 20 + 2 + 1536 / 2e9 s = 22.768 µs. AG_row of B: 96·32 /
    # 8 · 2 = 768 B on axis 0: 10 + 1 + 0.768 = 11.768 µs. GeMM (32, 16, 48): 2·32·16·48 /
    # 1e12 = 0.049152 µs. Overlapped: stage(0) = stage(g) = 22.768, total 22.768 · 2 +
    # 0.049152 = 45.585152 µs. Nothing overlapped: stage(0) = 22.768 + 11.768 = 34.536,
    # stage(g) = 34.585152, total 34.536 + 34.585152 + 0.049152 = 69.170304 µs.
    op = layer_dataflow(FcLayer("l", 64, 96, 32, None), Stationary.Y, False).ops[0]
    config = Config.of(slices=2)
    for profile, want in (
        (make_profile(), 45.585152e-6),
        (make_profile(overlapped=[]), 69.170304e-6),
    ):
        got = meshslice_times([op], Mesh(2, 2), profile, [config])
        assert got.tolist()[0] == pytest.approx([want], rel=1e-12)
        scalar = REGISTRY["meshslice"].cost(op, Mesh(2, 2), profile, config).total_s
        assert scalar == pytest.approx(want, rel=1e-12)


def test_hand_worked_meshslice_floor() -> None:
    # The forward of test_hand_worked_meshslice_times (OS, both gathers overlapped) at S = 1:
    # AG_col of A 64·96 / 4 · 2 = 3072 B on axis 1: f₁ = 20 + 2 = 22 µs fixed, m₁ = 3072 / 2e9
    # = 1.536 µs moving; AG_row of B 1536 B on axis 0: f₂ = 11, m₂ = 1.536 µs; GeMM c =
    # 2·64·32·96 / (4 · 1e12) = 0.098304 µs. At S slices the pass takes S·(22 + 1.536 / S) +
    # c / S (the axis-1 gather sets every stage), least at S = 1: 23.634304 µs, the S = 1
    # time itself (above S = 2: at least 3·22 + 1.536 µs).
    op = layer_dataflow(FcLayer("l", 64, 96, 32, None), Stationary.Y, False).ops[0]
    assert meshslice_floors([op], Mesh(2, 2), make_profile()) == [pytest.approx(23.634304e-6)]
    # 1024³ on 2 × 2: m₁ = 1024² / 4 · 2 / 2e9 = 262.144 µs, m₂ = 524.288 µs, c = 2·1024³ /
    # (4 · 1e12) = 536.870912 µs. S = 1: τ₂ + c = 535.288 + 536.870912 = 1072.158912 µs; S = 2:
    # τ₂ + g + max(τ₂, g) = 273.144 + 268.435456 + 273.144 = 814.723456 µs. Above 2 slices a
    # pass takes at least 3·11 + 524.288 = 557.288 µs and c + max(f₁, f₂) = 558.870912 µs, the
    # floor (the best configuration, S = 7, takes 77 + 524.288 + 76.695845 = 677.983845 µs).
    mid = layer_dataflow(FcLayer("l", 1024, 1024, 1024, None), Stationary.Y, False).ops[0]
    assert meshslice_floors([mid], Mesh(2, 2), make_profile()) == [pytest.approx(558.870912e-6)]
    assert meshslice_floors([mid], Mesh(2, 2), make_profile()) < [
        REGISTRY["meshslice"].cost(mid, Mesh(2, 2), make_profile(), Config.of(slices=7)).total_s
    ]
    # 4096³: c = 34,359.738368 µs is above the gathers (m₂ = 8,388.608 µs); S ≤ 2 give at
    # least 11 + 8,388.608 / 2 + c = 38,565.042368 µs, and above 2 slices a pass takes at
    # least c + max(f₁, f₂) = 34,381.738368 µs (the lesser of the two is the floor).
    big = layer_dataflow(FcLayer("l", 4096, 4096, 4096, None), Stationary.Y, False).ops[0]
    assert meshslice_floors([big], Mesh(2, 2), make_profile()) == [pytest.approx(34381.738368e-6)]
    times = [
        REGISTRY["meshslice"].cost(big, Mesh(2, 2), make_profile(), Config.of(slices=s)).total_s
        for s in (1, 2, 16, 32, 64, 128)
    ]
    assert min(times) >= 34381.738368e-6


def test_hand_worked_wang_floor() -> None:
    # The same forward with Wang on 2 × 2: split axis 0 leaves the axis-1 all-gather plain,
    # 23.536 µs, and shifts B (1536 B) once on axis 0: 50 + 5 + 1.536 = 56.536 µs; split axis 1
    # leaves 12.536 µs plain and shifts A (3072 B) on axis 1: 60 + 6 + 3.072 = 69.072 µs. The
    # floor is the lesser split's larger part, 56.536 µs (the GeMM is 0.098304 µs).
    op = layer_dataflow(FcLayer("l", 64, 96, 32, None), Stationary.Y, False).ops[0]
    assert wang_floors([op], Mesh(2, 2), make_profile()) == [pytest.approx(56.536e-6)]
    configs = [Config.of(split=a, slices=1) for a in (1, 2)]
    times = [REGISTRY["wang"].cost(op, Mesh(2, 2), make_profile(), c).total_s for c in configs]
    assert min(times) >= 56.536e-6


def test_hand_worked_gemm_times_on_a_curve() -> None:
    # 2·m·n·k = 2e6 FLOPs: between 1e5 (0.2) and 1e7 (0.6), w = log(20) / log(100) = 0.650515,
    # efficiency 0.2 + 0.4 · w = 0.460206; time = 3 µs + 2e6 / (1e12 · 0.460206) = 7.345890 µs.
    # Below the curve (2e3 FLOPs) 0.2, above it (2e10) 0.9.
    profile = make_profile(gemm_efficiency=CURVE)
    m = np.array([100.0, 10.0, 1000.0])
    n = np.array([100.0, 10.0, 1000.0])
    k = np.array([100.0, 10.0, 10000.0])
    want = [3e-6 + 2e6 / (1e12 * 0.4602059991), 3e-6 + 2e3 / 0.2e12, 3e-6 + 2e10 / 0.9e12]
    np.testing.assert_allclose(gemm_flop_times(profile, 2.0 * m * n * k), want, rtol=1e-9)


@pytest.mark.parametrize("profile", ["tpuv4", "tpuv4-blocking", "tpuv4-half-duplex", "h100"])
def test_ring_table_is_the_single_table_of_ring_collectives(profile: str) -> None:
    # meshslice_times prices its collectives from their (kind, axis, ring, shard bytes) without
    # building the lists: the same rows as the lists ring_collective builds.
    chosen = PROFILES[profile]
    moves = [
        (kind, axis, ring, shard)
        for kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
        for axis in (0, 1, 2)
        for ring in (1, 2, 7)
        for shard in (0.0, 3072.0, 1e9 / 3)
    ]
    lists = [ring_collective(*move) for move in moves]
    assert ring_table(moves, chosen).tolist() == single_table(lists, chosen).tolist()


def test_a_kind_without_overlap_is_priced_blocking() -> None:
    # The same layer costs more where the profile overlaps nothing: the array times follow
    # profile.overlaps, as stage() does.
    algorithm = REGISTRY["wang"]
    choice = layer_dataflow(FcLayer("h", 256, 384, 768, None), Stationary.X, False)
    mesh = Mesh(4, 4)
    configs, _ = algorithm.configs(choice, mesh, 8)
    both = make_profile()
    none = make_profile(overlapped=[])
    sr_only = make_profile(overlapped=[CollectiveKind.SEND_RECV.value])
    fast, slow, middle = (
        algorithm.pass_times(choice.ops, mesh, p, configs) for p in (both, none, sr_only)
    )
    assert fast is not None and slow is not None and middle is not None
    assert (fast <= middle).all() and (middle <= slow).all() and (fast < slow).any()


FAMILY = sorted(name for name, a in REGISTRY.items() if a.family_floors is not None)


@settings(max_examples=80)
@given(
    name=st.sampled_from(FAMILY),
    drawn=st.lists(
        st.tuples(st.sampled_from(MESHES), st.sampled_from(sorted(PROFILES))), min_size=1
    ),
    row=st.sampled_from(ROWS),
    layer=_layers(50000, 30000, [1, 3, 8]),
)
def test_a_family_s_floors_are_its_meshes_layer_floors(
    name: str, drawn: list[tuple[Mesh, str]], row: tuple[Stationary, bool], layer: FcLayer
) -> None:
    # The search asks the floors of every mesh of a TP size at once (search.costing.floors).
    algorithm = REGISTRY[name]
    meshes = [mesh for mesh, _ in drawn]
    profiles = [PROFILES[profile] for _, profile in drawn]
    ops = layer_dataflow(layer, *row).ops
    family = algorithm.family_floor(meshes, profiles)
    assert family is not None  # every shipped and round profile has the links
    one_by_one = [
        algorithm.layer_floor(ops, mesh, profile)
        for mesh, profile in zip(meshes, profiles, strict=True)
    ]
    assert family(ops) == one_by_one
    assert family(ops[:1]) == [
        algorithm.layer_floor(ops[:1], mesh, profile)
        for mesh, profile in zip(meshes, profiles, strict=True)
    ]
    # Two layers' passes at once (the search asks every pass of a block).
    other = layer_dataflow(layer, *ROWS[(ROWS.index(row) + 1) % len(ROWS)]).ops
    assert family([*ops, *other]) == [
        algorithm.layer_floor([*ops, *other], mesh, profile)
        for mesh, profile in zip(meshes, profiles, strict=True)
    ]


@settings(max_examples=60)
@given(
    name=st.sampled_from(FAMILY),
    drawn=st.lists(
        st.tuples(st.sampled_from(MESHES), st.sampled_from(sorted(PROFILES))), min_size=1
    ),
    lists=st.lists(
        st.tuples(_layers(50000, 30000, [1, 3, 8]), st.sampled_from(ROWS), st.integers(0, 3)),
        min_size=1,
        max_size=5,
    ),
)
def test_a_family_s_block_floors_are_each_lists_layer_floors(
    name: str,
    drawn: list[tuple[Mesh, str]],
    lists: list[tuple[FcLayer, tuple[Stationary, bool], int]],
) -> None:
    # The cluster search floors the blocks of every micro-batch size of a TP size at once
    # (Algorithm.family_block_floors, search.visit.BlockFloors): lists of different lengths
    # (empty ones too), each list's floors those of layer_floor on its ops, to the bit.
    algorithm = REGISTRY[name]
    meshes = [mesh for mesh, _ in drawn]
    profiles = [PROFILES[profile] for _, profile in drawn]
    blocks = [layer_dataflow(layer, *row).ops[:passes] for layer, row, passes in lists]
    together = algorithm.family_block_floors(meshes, profiles)
    assert together is not None
    found = together(blocks)
    for ops, floors in zip(blocks, found, strict=True):
        assert floors is not None
        assert floors.tolist() == [
            algorithm.layer_floor(ops, mesh, profile)
            for mesh, profile in zip(meshes, profiles, strict=True)
        ]


def test_block_floors_leave_only_the_lists_they_cannot_price_to_layer_floor() -> None:
    meshslice, meshes = REGISTRY["meshslice"], [Mesh(4, 4), Mesh(2, 8)]
    together = meshslice.family_block_floors(meshes, [make_profile()] * 2)
    assert together is not None
    fine = layer_dataflow(FcLayer("h", 64, 128, 256, None, 1), *ROWS[0]).ops
    huge = layer_dataflow(FcLayer("h", 2**40, 2**14, 64, None, 1), *ROWS[0]).ops
    first, second = together([fine, huge])
    assert second is None
    assert first is not None
    assert first.tolist() == [meshslice.layer_floor(fine, m, make_profile()) for m in meshes]


def test_a_family_floor_leaves_to_layer_floor_what_it_cannot_price_exactly() -> None:
    meshslice, mesh = REGISTRY["meshslice"], Mesh(4, 4)
    family = meshslice.family_floor([mesh, Mesh(2, 8)], [make_profile()] * 2)
    assert family is not None
    huge = layer_dataflow(FcLayer("h", 2**40, 2**14, 64, None, 1), *ROWS[0]).ops
    assert family(huge) is None
    # a profile without a link the family needs: none (layer_floor decides, mesh by mesh)

    def lacking(meshes: Sequence[Mesh], profiles: Sequence[HardwareProfile]) -> Any:
        raise ProfileError("no such link")

    assert replace(meshslice, family_floors=lacking).family_floor([mesh], [make_profile()]) is None
