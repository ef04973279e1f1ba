"""Array pricing (meshtune.search.arrays, issue 17) against the scalar path, registry-wide.

For every registered algorithm, every mesh it accepts among a square, rectangular, 1D and 3D
set, every dataflow row and transposition and *every* legal configuration: the array-priced
launch / sync / transfer of each pass equal ``comm_time(algorithm.comms(...))`` and the
``PassCost.comm`` the cost model reports; the per-axis times equal Σ ``Comm.time`` per axis;
the layer bound never exceeds the priced layer time, and the pruned choice equals the
exhaustive one. A hand-worked case checks the formula itself.

The hypothesis test of the bound draws 100 layers for every algorithm but the one-sided GeMM,
whose configurations take about 0.5 s per layer to price: 15 layers for it (its every
configuration on the fixed layer is checked above), 100 with ``MESHTUNE_EXHAUSTIVE=1``.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_profile
from meshtune.algorithms.base import Algorithm
from meshtune.catalog import load_profile
from meshtune.cost.config import Config
from meshtune.cost.schedule import AXES, Comm, comm_time, ring_collective
from meshtune.dataflow import LayerDataflow, Stationary, layer_dataflow
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.tiers import ring_profile
from meshtune.model.layers import FcLayer
from meshtune.search import phase2
from meshtune.search.arrays import axis_times, column_axis_times, comm_parts, layer_bounds
from meshtune.search.phase2 import best_layer_choice, layer_choice
from test_algorithms import ALGORITHMS, BLOCK, DEPTH_CHIPS, ROWS, with_depth_axis

MESHES = [Mesh(1, 1), Mesh(2, 2), Mesh(4, 4), Mesh(2, 4), Mesh(4, 2), Mesh(1, 8), Mesh(8, 1)]
LAYER = FcLayer("l", 256, 384, 128, None)

PROFILES = {
    "tpuv4": with_depth_axis(load_profile("tpuv4")),
    "blocking": with_depth_axis(load_profile("tpuv4")).model_copy(update={"overlapped": []}),
    "round": with_depth_axis(make_profile()),
}


def _cases(algorithm: Algorithm) -> list[tuple[Mesh, LayerDataflow, tuple[Config, ...]]]:
    """Every accepted mesh × Table 1 row × transposition with *all* its configurations."""
    deep = [m for n in DEPTH_CHIPS for m in algorithm.meshes(n) if m.depth > 1]
    accepted = [m for m in MESHES + deep if algorithm.mesh_problem(m) is None]
    choices = [layer_dataflow(LAYER, *row) for row in ROWS]
    found = [(m, c, algorithm.configs(c, m, BLOCK)) for m in accepted for c in choices]
    return [(m, c, configs) for m, c, (configs, reason) in found if reason is None]


@functools.cache
def _listed_cases(
    name: str, bytes_per_element: int
) -> list[tuple[Mesh, LayerDataflow, tuple[Config, ...], list[list[Comm]]]]:
    """:func:`_cases` of the algorithm with the comms list of every (configuration, pass),
    configuration-major: they do not depend on the profile beyond its element size, so the
    three profiles' tests list them once (the one-sided GeMM's lists are most of its time)."""
    algorithm = next(a for a in ALGORITHMS if a.name == name)
    return [
        (
            mesh,
            choice,
            configs,
            [
                algorithm.comms(op, mesh, config, bytes_per_element)
                for config in configs
                for op in choice.ops
            ],
        )
        for mesh, choice, configs in _cases(algorithm)
    ]


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_array_pricing_equals_scalar_pricing(algorithm: Algorithm, profile_name: str) -> None:
    profile = PROFILES[profile_name]
    cases = _listed_cases(algorithm.name, profile.bytes_per_element)
    assert cases
    for mesh, choice, configs, lists in cases:
        parts = comm_parts(lists, profile)
        per_axis = axis_times(lists, profile)
        for row, listed in enumerate(lists):
            scalar = comm_time(listed, profile)
            assert parts[row].tolist() == pytest.approx(
                [scalar.launch_s, scalar.sync_s, scalar.transfer_s], rel=1e-12, abs=1e-300
            )
            axis = [0.0] * AXES
            for comm in listed:
                axis[comm.axis] += comm.time(profile).total_s
            assert per_axis[row].tolist() == pytest.approx(axis, rel=1e-12, abs=1e-300)
        bounds = layer_bounds(algorithm, choice, mesh, profile, configs)
        ringed = comm_parts(lists, ring_profile(profile, mesh))  # as Algorithm.cost prices
        passes = len(choice.ops)
        for index, config in enumerate(configs):
            priced = layer_choice(algorithm, choice, mesh, profile, config)
            array = ringed[index * passes : (index + 1) * passes].sum(axis=1)
            assert array.tolist() == pytest.approx([p.comm.total_s for p in priced.passes])
            assert bounds[index] <= priced.time_s * (1 + 1e-12)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_layer_columns_price_as_the_listed_comms(algorithm: Algorithm, profile_name: str) -> None:
    # Algorithm.layer_columns (an algorithm's own comm_columns, or the lists turned into
    # columns) prices every (configuration, pass) as its pass_comms list does, grouped layers
    # (each op issued `groups` times) included.
    profile = PROFILES[profile_name]
    e = profile.bytes_per_element
    grouped = FcLayer("g", LAYER.tokens, LAYER.in_features, LAYER.out_features, None, 3)
    for mesh, choice, configs, _ in _listed_cases(algorithm.name, e):
        for layer in (choice, layer_dataflow(grouped, choice.stationary, choice.transposed)):
            ops = layer.ops
            lists = [algorithm.pass_comms(op, mesh, c, e) for c in configs for op in ops]
            blocks = algorithm.layer_columns(ops, mesh, configs, e)
            got = column_axis_times(blocks, len(lists), profile)
            want = axis_times(lists, profile)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_pruned_choice_equals_exhaustive_choice(
    algorithm: Algorithm, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = PROFILES["tpuv4"]
    pruned = [
        best_layer_choice(algorithm, choice, mesh, profile, configs)
        for mesh, choice, configs in _cases(algorithm)
    ]
    monkeypatch.setattr(phase2, "layer_bounds", lambda *a: np.full(len(a[-1]), -np.inf))
    exhaustive = [
        best_layer_choice(algorithm, choice, mesh, profile, configs)
        for mesh, choice, configs in _cases(algorithm)
    ]
    assert pruned == exhaustive


def test_hand_worked_comm_parts() -> None:
    # round profile: all-gather axis 0 = 10 µs launch, 1 µs sync, 1e9 B/s; axis 1 = 20 µs,
    # 2 µs, 2e9 B/s. A 4-ring all-gather of 1000 B on axis 0 issued twice: 2 · (10 + 3 · 1)
    # µs of launch and sync, 2 · 3 · 1000 / 1e9 s = 6 µs of transfer. A 2-ring one of 4000 B
    # on axis 1: 20 + 2 µs, 4000 / 2e9 = 2 µs.
    profile = make_profile()
    ag = CollectiveKind.ALL_GATHER
    first = [Comm(ag, 0, 4, 3, 1000.0, 3000.0, 2)]
    second = ring_collective(ag, 1, 2, 4000.0)
    parts = comm_parts([first, second, []], profile)
    expected = [[20e-6, 6e-6, 6e-6], [20e-6, 2e-6, 2e-6], [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(parts, expected, rtol=1e-12)
    np.testing.assert_allclose(axis_times([first + second], profile), [[32e-6, 24e-6, 0.0]])


LAYER_SIZES = {
    "tokens": st.sampled_from([64, 128, 512]),
    "fin": st.sampled_from([64, 192, 256]),
    "fout": st.sampled_from([64, 128, 320]),
    "mesh": st.sampled_from([Mesh(2, 2), Mesh(4, 2), Mesh(2, 4)]),
    "row": st.sampled_from(ROWS),
}
PRICEY = {"onesided"}
"""Algorithms whose every configuration takes ~0.5 s to price on one layer: a sample of
:data:`PRICEY_EXAMPLES` layers in the suite, hypothesis's 100 with ``MESHTUNE_EXHAUSTIVE=1``."""
PRICEY_EXAMPLES = 100 if os.environ.get("MESHTUNE_EXHAUSTIVE") == "1" else 15


def _bound_below_priced(
    algorithms: list[Algorithm],
    tokens: int,
    fin: int,
    fout: int,
    mesh: Mesh,
    row: tuple[Stationary, bool],
) -> None:
    profile = PROFILES["tpuv4"]
    choice = layer_dataflow(FcLayer("h", tokens, fin, fout, None), *row)
    for algorithm in algorithms:
        if algorithm.mesh_problem(mesh) is not None:
            continue
        configs, reason = algorithm.configs(choice, mesh, BLOCK)
        if reason is not None:
            continue
        bounds = layer_bounds(algorithm, choice, mesh, profile, configs)
        for bound, config in zip(bounds, configs, strict=True):
            priced = layer_choice(algorithm, choice, mesh, profile, config)
            assert bound <= priced.time_s * (1 + 1e-12)


@given(**LAYER_SIZES)
def test_bound_never_passes_the_priced_time(
    tokens: int, fin: int, fout: int, mesh: Mesh, row: tuple[Stationary, bool]
) -> None:
    cheap = [a for a in ALGORITHMS if a.name not in PRICEY]
    _bound_below_priced(cheap, tokens, fin, fout, mesh, row)


@settings(max_examples=PRICEY_EXAMPLES)
@given(**LAYER_SIZES)
def test_bound_never_passes_the_priced_time_of_the_pricey_algorithms(
    tokens: int, fin: int, fout: int, mesh: Mesh, row: tuple[Stationary, bool]
) -> None:
    pricey = [a for a in ALGORITHMS if a.name in PRICEY]
    assert pricey
    _bound_below_priced(pricey, tokens, fin, fout, mesh, row)


def test_no_bound_is_trusted_on_a_link_the_profile_lacks() -> None:
    # Tesseract lists its depth all-reduce (backward weight, RS) on axis 2; tpuv4 has no
    # axis-2 parameters (its cost model prices that ring on another axis), so the array
    # pricing of that pass is not finite and config_bounds gives no bound: every configuration
    # is priced, and the choice is the exhaustive one.
    profile = load_profile("tpuv4")
    algorithm = next(a for a in ALGORITHMS if a.name == "tesseract")
    mesh = Mesh(2, 2, 2)
    choice = layer_dataflow(LAYER, *ROWS[0])
    configs, reason = algorithm.configs(choice, mesh, BLOCK)
    assert reason is None
    assert len(configs) > 1
    assert not np.isfinite(layer_bounds(algorithm, choice, mesh, profile, configs)).any()
    assert phase2.config_bounds(algorithm, choice, mesh, profile, configs) is None
    priced = [layer_choice(algorithm, choice, mesh, profile, c, configs) for c in configs]
    fastest = min(priced, key=lambda p: (p.time_s, p.config.sort_key()))
    assert best_layer_choice(algorithm, choice, mesh, profile, configs) == fastest
