"""The universal one-sided GeMM (Brock & Golin): executor against dense NumPy, counted traffic
against the cost model's, the Collective equivalence, hand-worked cost, the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from typer.testing import CliRunner

from meshtune.algorithms.registry import REGISTRY
from meshtune.compare.gemm import gemm_study
from meshtune.compare.model import compare_models
from meshtune.compare.records import View
from meshtune.cost import onesided
from meshtune.cost.config import Config
from meshtune.cost.onesided import config_of, describe, layout_configs, partitioning_of
from meshtune.cost.schedule import AxisTraffic, traffic
from meshtune.dataflow import Dataflow, Stationary, layer_dataflow
from meshtune.errors import InfeasibleError
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.partition.layout import KINDS, MATRICES, process_grid
from meshtune.partition.partitioning import (
    NAMED,
    Partitioning,
    explored_partitionings,
    partition_problem,
)
from test_cli import assert_bad_input, invoke, ok
from test_memory import TINY

ONESIDED = REGISTRY["onesided"]

# Misaligned across A, B and C: different tile grids whose bounds do not line up, with sizes
# that divide none of the process counts.
LAYOUTS = [
    NAMED["2d_blocks"],
    NAMED["block_cyclic"],
    NAMED["sequence_parallel"],
    NAMED["megatron_row"],
    Partitioning("cyclic", "rows", "blocks"),
    Partitioning("cols", "blocks", "cyclic"),
    Partitioning("blocks", "full", "cols"),
]


def _run(mesh: Mesh, layer: FcLayer, config: Config, rng: np.random.Generator) -> None:
    for stationary, transposed in ((Stationary.Y, False), (Stationary.W, True)):
        for op in layer_dataflow(layer, stationary, transposed).ops:
            a = rng.standard_normal(op.operand_shapes[0])
            b = rng.standard_normal(op.operand_shapes[1])
            virtual = VirtualMesh(mesh.rows, mesh.cols, 2)
            got = ONESIDED.execute(op, a, b, virtual, config, 8)
            where = f"{describe(config)} {op.pass_.value} {op.dataflow.value} on {mesh.label}"
            np.testing.assert_allclose(got, dense_gemm(op, a, b), atol=1e-10, err_msg=where)
            counted = tuple(AxisTraffic(*c.as_tuple()) for c in virtual.counters)
            assert counted == traffic(ONESIDED.comms(op, mesh, config, 2)), where


@pytest.mark.parametrize(
    ("mesh", "sizes"),
    [(Mesh(2, 3), (13, 11, 7)), (Mesh(4, 2), (9, 17, 5)), (Mesh(1, 5), (6, 3, 11))],
)
def test_ragged_misaligned_layouts_match_dense_numpy_and_predicted_traffic(
    mesh: Mesh, sizes: tuple[int, int, int]
) -> None:
    rng = np.random.default_rng(11)
    layer = FcLayer("l", *sizes, None)
    for part in LAYOUTS:
        for stationary in "ABC":
            for replicas in (1, 2):
                if part.kind(stationary) == "full" or mesh.chips % replicas:  # type: ignore[arg-type]
                    continue
                _run(mesh, layer, config_of(part, stationary, replicas), rng)


def test_every_searched_configuration_runs_on_a_ragged_layer() -> None:
    rng = np.random.default_rng(3)
    mesh, layer = Mesh(2, 2), FcLayer("l", 7, 5, 6, None)
    configs, reason = ONESIDED.configs(layer_dataflow(layer, Stationary.Y, False), mesh, 8)
    assert reason is None and len(configs) == 28 * 3 * 3  # partitionings x stationary x c
    for config in configs:
        _run(mesh, layer, config, rng)


def test_every_searched_configuration_runs_on_a_layer_whose_exploration_is_shared() -> None:
    # Every size a multiple of 2p = 8: the cost reads the loads of the 8 x 8 x 8 problem,
    # scaled (meshtune.cost.onesided_loads.reduced); the executor moves the real arrays.
    rng = np.random.default_rng(5)
    mesh, layer = Mesh(2, 2), FcLayer("l", 16, 24, 40, None)
    configs, _ = ONESIDED.configs(layer_dataflow(layer, Stationary.Y, False), mesh, 8)
    for config in configs:
        _run(mesh, layer, config, rng)


def _clear_caches() -> None:
    onesided._summary.cache_clear()
    onesided._shared.cache_clear()


@pytest.fixture
def unshared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The one-sided GeMM without sharing across sizes: every problem explored as itself."""
    _clear_caches()
    monkeypatch.setattr(onesided, "reduced", lambda p: ((p.m, p.n, p.k), (1, 1, 1)))
    yield
    _clear_caches()


# Every dimension a multiple of 2p (shared), or of none (explored as itself), mixed.
SHARED_PROBLEMS = [
    (Mesh(2, 2), (24, 16, 40)),
    (Mesh(2, 3), (36, 60, 12)),
    (Mesh(2, 4), (48, 80, 13)),
    (Mesh(4, 4), (96, 64, 160)),
]


def _priced(profile: HardwareProfile) -> dict[tuple[str, str, str], tuple[object, object]]:
    """Cost and traffic of every pass of every problem of :data:`SHARED_PROBLEMS` under every
    layout the search explores and every named one, by (mesh, pass, configuration)."""
    parts = (*explored_partitionings(), *NAMED.values())
    found: dict[tuple[str, str, str], tuple[object, object]] = {}
    for mesh, sizes in SHARED_PROBLEMS:
        configs = [
            config_of(part, matrix, c)
            for part in parts
            for matrix in MATRICES
            for c in range(1, 5)
            if partition_problem(part, matrix, c, mesh.chips) is None
        ]
        for op in layer_dataflow(FcLayer("l", *sizes, None), Stationary.Y, False).ops:
            for config in configs:
                found[(mesh.label, op.pass_.value, describe(config))] = (
                    ONESIDED.cost(op, mesh, profile, config),
                    ONESIDED.comms(op, mesh, config, 2),
                )
    return found


def test_shared_exploration_prices_every_layout_exactly_as_its_own(
    tpuv4: HardwareProfile, request: pytest.FixtureRequest
) -> None:
    _clear_caches()
    shared = _priced(tpuv4)
    request.getfixturevalue("unshared")
    alone = _priced(tpuv4)
    assert len(shared) > 1000 and shared == alone


def test_compare_is_unchanged_by_the_shared_exploration(
    tpuv4: HardwareProfile, request: pytest.FixtureRequest
) -> None:
    def run() -> str:
        views: tuple[View, ...] = ("scaling", "breakdown", "gemms")
        return compare_models(TINY, tpuv4, [4, 16], algorithms=["onesided"], views=views).to_json()

    _clear_caches()
    shared = run()
    request.getfixturevalue("unshared")
    assert run() == shared


@pytest.mark.parametrize("mesh", [Mesh(2, 2), Mesh(2, 4), Mesh(4, 4), Mesh(3, 4)])
def test_two_d_blocks_without_replication_move_what_collective_moves(mesh: Mesh) -> None:
    # Matching 2D blocks (the process grid is the mesh: the most square P_r <= P_c),
    # stationary C: each chip gets the A blocks of its mesh row and the B blocks of its mesh
    # column, which is Collective's two all-gathers (OS, S = 1).
    assert process_grid(mesh.chips) == (mesh.rows, mesh.cols)
    layer = FcLayer("l", 96, 48, 96, None)
    op = layer_dataflow(layer, Stationary.Y, False).ops[0]
    assert op.dataflow is Dataflow.OS
    one_sided = traffic(ONESIDED.comms(op, mesh, config_of(NAMED["2d_blocks"], "C", 1), 2))
    collective = traffic(REGISTRY["collective"].comms(op, mesh, Config.of(slices=1), 2))
    assert [a.bytes_per_link for a in one_sided] == [a.bytes_per_link for a in collective]
    assert sum(a.bytes_per_link for a in one_sided) > 0


def test_hand_worked_cost(round_profile: HardwareProfile) -> None:
    # 1D TP column-parallel on 1 x 2: chip 0 gets A rows 500..1000 (500 x 1000 elements,
    # 1 MB) from chip 1 over axis 1 and multiplies C(1000 x 500) = A(1000 x 1000) B(1000 x 500).
    op = layer_dataflow(FcLayer("l", 1000, 1000, 1000, None), Stationary.Y, False).ops[0]
    config = config_of(NAMED["1d_tp_column"], "C", 1)
    comms = ONESIDED.comms(op, Mesh(1, 2), config, 2)
    assert [(c.axis, c.steps, c.link_bytes) for c in comms] == [(1, 1, 1_000_000)]
    cost = ONESIDED.cost(op, Mesh(1, 2), round_profile, config)
    compute = 2 * 1000 * 500 * 1000 / 1e12
    first_get = 6e-6 + 1_000_000 / 1e9  # t_sync + bytes / bw: before the first multiply
    assert cost.compute_s == pytest.approx(compute)
    assert cost.prologue_s == pytest.approx(first_get)
    assert cost.steady_s == pytest.approx(max(60e-6, compute))  # the launch hides
    assert cost.total_s == pytest.approx(first_get + compute)
    assert cost.comm.total_s == pytest.approx(60e-6 + first_get)


def test_replication_adds_a_reduction_epilogue(round_profile: HardwareProfile) -> None:
    op = layer_dataflow(FcLayer("l", 512, 4096, 512, None), Stationary.Y, False).ops[0]
    one = ONESIDED.cost(op, Mesh(2, 2), round_profile, config_of(NAMED["2d_blocks"], "C", 1))
    two = ONESIDED.cost(op, Mesh(2, 2), round_profile, config_of(NAMED["2d_blocks"], "C", 2))
    assert one.epilogue_s == 0 < two.epilogue_s
    # Each replica multiplies half of k: the same compute per chip on half the chips each.
    assert two.compute_s == pytest.approx(one.compute_s)


def test_configs_name_their_layouts() -> None:
    config = config_of(NAMED["fsdp"], "B", 2)
    assert dict(config) == {"A": 1, "B": 1, "C": 1, "replicas": 2, "stationary": 2}
    assert partitioning_of(config) == NAMED["fsdp"]
    assert describe(config) == "fsdp c=2 S-B"
    assert ONESIDED.describe(config) == "fsdp c=2 S-B"
    assert REGISTRY["meshslice"].describe(Config.of(slices=4)) == "S=4"
    assert len(KINDS) == 5
    assert layout_configs("sequence_parallel", 1, None, 8) == (
        config_of(NAMED["sequence_parallel"], "A", 1),
        config_of(NAMED["sequence_parallel"], "C", 1),
    )
    with pytest.raises(InfeasibleError, match="replication factor 5 is out of range"):
        layout_configs("fsdp", 5, None, 8)
    with pytest.raises(InfeasibleError, match="stationary matrix 'D' is unknown"):
        layout_configs("fsdp", 1, "D", 8)
    with pytest.raises(InfeasibleError, match="replication factor 3 does not divide 8"):
        layout_configs("fsdp", 3, "C", 8)


def test_more_than_64_chips_is_refused_with_a_reason() -> None:
    assert ONESIDED.mesh_problem(Mesh(8, 8)) is None
    assert "at most 64 processes, not 128" in (ONESIDED.mesh_problem(Mesh(8, 16)) or "")
    assert ONESIDED.meshes(12) == (Mesh(3, 4),)


def test_ranking_lists_every_configuration_fastest_first(tpuv4: HardwareProfile) -> None:
    study = gemm_study(4096, 12288, 3072, 16, tpuv4, ["onesided"], rank=True)
    times = [r.time_s for r in study.ranking]
    assert len(study.ranking) == 28 * 3 * 3 and times == sorted(times)
    assert [r.rank for r in study.ranking] == list(range(1, len(times) + 1))
    assert (
        study.entries[0].time_s == times[0] and study.entries[0].layout == study.ranking[0].layout
    )
    assert len({r.layout for r in study.ranking}) == len(study.ranking)


def test_cli_ranks_and_evaluates_one_layout(runner: CliRunner) -> None:
    out = ok(invoke(runner, "gemm", "4096", "12288", "3072", "-n", "16", "-a", "onesided")).stdout
    title = "Every configuration, fastest first (the fastest 100 of 252; --json lists 252)"
    assert title in out and "2d_blocks c=1 S-C" in out
    args = ("gemm", "4096", "12288", "3072", "-n", "16", "--partition", "A=rows,B=cols,C=cols")
    data = json.loads(ok(invoke(runner, *args, "--replicate", "2", "--json")).stdout)
    assert {r["layout"] for r in data["ranking"]} == {
        "1d_tp_column c=2 S-A",
        "1d_tp_column c=2 S-B",
        "1d_tp_column c=2 S-C",
    }
    pinned = json.loads(ok(invoke(runner, *args, "--stationary", "b", "--json")).stdout)
    assert [r["layout"] for r in pinned["ranking"]] == ["1d_tp_column c=1 S-B"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--partition", "A=rows,B=cols"), "no kind for C"),
        (("--partition", "fsdp", "--replicate", "3"), "replication factor 3 does not divide 16"),
        (("--partition", "fsdp", "-a", "summa"), "use --algorithms onesided"),
        (("--replicate", "2"), "--replicate and --stationary need --partition"),
    ],
)
def test_cli_bad_layouts(runner: CliRunner, extra: tuple[str, ...], needle: str) -> None:
    assert_bad_input(invoke(runner, "gemm", "64", "64", "64", "-n", "16", *extra), needle)
