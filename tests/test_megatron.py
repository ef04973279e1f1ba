"""Megatron-LM tensor parallelism (Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2):
costs worked by hand, the traffic of one block, and the oracle on the virtual ring."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshtune.algorithms.registry import REGISTRY, megatron_without_sp
from meshtune.cli import app
from meshtune.cost.config import Config
from meshtune.cost.megatron import describe, megatron_configs
from meshtune.cost.schedule import Comm, traffic
from meshtune.dataflow import LayerDataflow, Pass, Stationary, layer_dataflow, plan_dataflows
from meshtune.engines.passes import layer_algorithm
from meshtune.errors import EngineError
from meshtune.executor.megatron import reduced, replicas
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import make_plan

MEGATRON = REGISTRY["megatron"]
AG, RDS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
F, BD, BW = Pass.FORWARD, Pass.BACKWARD_DATA, Pass.BACKWARD_WEIGHT
RING = Mesh(4, 1)
# A pair: column-parallel (from the residual stream), then the row-parallel layer it feeds.
# Both local GeMMs are 2·4000·1000·3000 / 4 = 6e9 FLOPs; X of the first and Y of the second
# are T × h = 4000 × 1000, so every collective moves shards of 4000·1000·2 / 4 = 2e6 bytes.
COLUMN = FcLayer("first", 4000, 1000, 3000, None)
ROW = FcLayer("second", 4000, 3000, 1000, "first")


def _choices(*layers: FcLayer) -> dict[str, LayerDataflow]:
    return {c.layer.name: c for c in plan_dataflows(layers, MEGATRON.mode("auto")).layers}


def _config(layer: FcLayer, seq_shards: int) -> Config:
    return Config.of(parallel=2 if layer.fed_by else 1, seq_shards=seq_shards)


# --------------------------------------------------------------------------- configurations


def test_the_role_comes_from_fed_by_and_sp_is_on_for_more_than_one_chip() -> None:
    for mesh, shards in ((RING, 4), (Mesh(1, 1), 1)):
        for layer, role in ((COLUMN, 1), (ROW, 2)):
            choice = layer_dataflow(layer, Stationary.Y, False)
            assert megatron_configs(choice, mesh, 8) == (
                (Config.of(parallel=role, seq_shards=shards),),
                None,
            )
    assert describe(Config.of(parallel=1, seq_shards=4)) == "column-parallel, SP over 4"
    assert describe(Config.of(parallel=2, seq_shards=1)) == "row-parallel, no SP"


def test_configurations_need_the_y_row_and_sizes_that_divide() -> None:
    configs, reason = megatron_configs(layer_dataflow(COLUMN, Stationary.W, True), RING, 8)
    assert configs == () and reason == (
        "layer first: megatron runs Table 1's Y-stationary row untransposed"
    )
    odd_out = layer_dataflow(FcLayer("q", 4000, 1000, 3002, None), Stationary.Y, False)
    assert megatron_configs(odd_out, RING, 8)[1] == (
        "layer q: dimension out=3002 does not divide over the ring of 4 chips"
    )
    # A row-parallel layer splits in, not out; both split tokens.
    assert megatron_configs(layer_dataflow(ROW, Stationary.Y, False), Mesh(6, 1), 8)[1] == (
        "layer second: dimension tokens=4000 does not divide over the ring of 6 chips"
    )
    odd_in = layer_dataflow(FcLayer("o", 4000, 3002, 3000, "q"), Stationary.Y, False)
    assert megatron_configs(odd_in, RING, 8)[1] == (
        "layer o: dimension in=3002 does not divide over the ring of 4 chips"
    )


def test_the_variant_without_sp_offers_all_reduces_and_needs_no_token_split() -> None:
    no_sp = megatron_without_sp()
    assert no_sp.name == "megatron" and "megatron" in REGISTRY
    for layer, role in ((COLUMN, 1), (ROW, 2)):
        choice = layer_dataflow(layer, Stationary.Y, False)
        assert no_sp.configs(choice, RING, 8) == ((Config.of(parallel=role, seq_shards=1),), None)
    # Tokens are not split without SP: 4000 tokens on 6 chips is fine for a column-parallel
    # layer whose out (3000) divides, which SP refuses.
    column = layer_dataflow(FcLayer("q", 4000, 1000, 3000, None), Stationary.Y, False)
    assert megatron_configs(column, Mesh(6, 1), 8)[0] == ()
    assert no_sp.configs(column, Mesh(6, 1), 8)[0] == (Config.of(parallel=1, seq_shards=1),)


def test_a_plan_runs_on_one_ring_with_the_pairs_of_the_block(
    gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    plan = make_plan(gpt3, tpuv4, 16, algorithm="megatron")
    assert plan.mesh.to_mesh() == Mesh(16, 1)
    assert {layer.name: layer.config["parallel"] for layer in plan.layers} == {
        "qkv": 1,
        "attn_out": 2,
        "mlp_up": 1,
        "mlp_down": 2,
    }
    assert {layer.config["seq_shards"] for layer in plan.layers} == {16}
    with pytest.raises(EngineError, match="algorithm 'megatron' has no engine implementation"):
        layer_algorithm(plan.layers[0])


# --------------------------------------------------------------------------- costs by hand

# Round profile (tests/conftest.py), axis 0, shard 2e6 bytes, ring of 4 (3 steps):
#   AG  = 10 µs + 3 · (1 µs + 2e6 / 1e9 s)   = 10 + 3 · 2001 = 6013 µs
#   RdS = 30 µs + 3 · (3 µs + 2e6 / 0.5e9 s) = 30 + 3 · 4003 = 12039 µs
#   GeMM = 6e9 / 1e12 s = 6000 µs
HAND_S = {  # (layer, seq_shards, pass) -> (before, GeMM + after) in µs
    ("first", 4, F): (6013, 6000),  # AG X, then GeMM
    ("first", 4, BD): (0, 6000 + 12039),  # GeMM, then RdS X'
    ("first", 4, BW): (6013, 6000),  # AG X again, then GeMM
    ("second", 4, F): (0, 6000 + 12039),  # GeMM, then RdS Y
    ("second", 4, BD): (6013, 6000),  # AG Y', then GeMM
    ("second", 4, BW): (0, 6000),  # Y' kept from backward data
    ("first", 1, F): (0, 6000),  # f = identity
    ("first", 1, BD): (0, 6000 + 12039 + 6013),  # all-reduce of X' = RdS + AG
    ("first", 1, BW): (0, 6000),
    ("second", 1, F): (0, 6000 + 12039 + 6013),  # all-reduce of Y
    ("second", 1, BD): (0, 6000),
    ("second", 1, BW): (0, 6000),
}


@pytest.mark.parametrize("overlapped", [[], ["all_gather", "reduce_scatter", "send_recv"]])
def test_costs_of_each_pass_worked_by_hand(
    make_profile: Callable[..., HardwareProfile], overlapped: list[str]
) -> None:
    profile = make_profile(overlapped=overlapped)
    choices = _choices(COLUMN, ROW)
    for (name, shards, pass_), (before_us, after_us) in HAND_S.items():
        choice = choices[name]
        op = next(o for o in choice.ops if o.pass_ is pass_)
        cost = MEGATRON.cost(op, RING, profile, _config(choice.layer, shards))
        where = f"{name} seq_shards={shards} {pass_.value}"
        # Every collective feeds or drains the pass's one GeMM: overlap cannot hide it.
        assert cost.iterations == 1, where
        assert cost.prologue_s == pytest.approx(before_us * 1e-6), where
        assert cost.epilogue_s == pytest.approx(after_us * 1e-6), where
        assert cost.total_s == pytest.approx((before_us + after_us) * 1e-6), where
        assert cost.compute_s == pytest.approx(6000e-6), where
        assert cost.exposed_s == pytest.approx((before_us + after_us - 6000) * 1e-6), where
        assert cost.hidden_s == pytest.approx(0.0), where


def test_sp_costs_one_more_gather_per_pair_than_all_reduces(round_profile: HardwareProfile) -> None:
    choices = _choices(COLUMN, ROW)
    totals = {
        shards: sum(
            MEGATRON.cost(op, RING, round_profile, _config(c.layer, shards)).total_s
            for c in choices.values()
            for op in c.ops
        )
        for shards in (1, 4)
    }
    # no SP: 6 GeMMs + 2 all-reduces = 36000 + 2 · 18052; SP: one more AG of X (6013 µs)
    assert totals[1] == pytest.approx(72104e-6)
    assert totals[4] == pytest.approx(78117e-6)


@settings(max_examples=60, deadline=None)
@given(
    p=st.sampled_from([2, 3, 4, 8]),
    units=st.tuples(*(st.integers(1, 64) for _ in range(4))),
    overlapped=st.sets(st.sampled_from(["all_gather", "reduce_scatter", "send_recv"])),
)
def test_sp_adds_exactly_the_re_gathers_of_x_on_any_pair(
    make_profile: Callable[..., HardwareProfile],
    p: int,
    units: tuple[int, int, int, int],
    overlapped: set[str],
) -> None:
    """Per pair, AR = RdS + AG moves to the other pass, so SP costs the no-SP time plus one
    all-gather of X (the column-parallel weight gradient's), whatever the sizes and overlap."""
    t, h, wide, narrow = (p * u for u in units)
    first, second = FcLayer("a", t, h, wide, None), FcLayer("b", t, narrow, h, "a")
    profile = make_profile(overlapped=sorted(overlapped))
    mesh = Mesh(p, 1)
    totals = {
        shards: sum(
            MEGATRON.cost(op, mesh, profile, _config(c.layer, shards)).total_s
            for c in _choices(first, second).values()
            for op in c.ops
        )
        for shards in (1, p)
    }
    (gather,) = _block_comms_of([first], mesh, p, (BW,))
    assert gather.kind is AG and gather.step_bytes == t * h * 2 / p
    assert totals[p] == pytest.approx(totals[1] + gather.time(profile).total_s, rel=1e-12)


# --------------------------------------------------------------------------- traffic per block

T, H = 512, 64
BLOCK = (
    FcLayer("qkv", T, H, 3 * H, None),
    FcLayer("attn_out", T, H, H, "qkv"),
    FcLayer("mlp_up", T, H, 4 * H, None),
    FcLayer("mlp_down", T, 4 * H, H, "mlp_up"),
)


def _block_comms_of(
    layers: list[FcLayer], mesh: Mesh, seq_shards: int, passes: tuple[Pass, ...]
) -> list[Comm]:
    comms: list[Comm] = []
    for choice in plan_dataflows(layers, MEGATRON.mode("auto")).layers:
        config = _config(choice.layer, seq_shards)
        for op in choice.ops:
            if op.pass_ in passes:
                comms += MEGATRON.comms(op, mesh, config, 2)
    return comms


def _block_comms(mesh: Mesh, seq_shards: int, passes: tuple[Pass, ...]) -> list[Comm]:
    return _block_comms_of(list(BLOCK), mesh, seq_shards, passes)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_one_block_moves_what_korthikanti_counts(p: int) -> None:
    """Korthikanti §4.2.2: without SP, 2 all-reduces of T·h·e bytes forward and 2 backward per
    block; with SP the same bytes as all-gathers and reduce-scatters, plus (Megatron's
    re-gather for the column-parallel weight gradients) 2 all-gathers of X backward."""
    mesh = Mesh(p, 1)
    shard = T * H * 2 / p  # T·h·e bytes of one all-reduce, split over the ring
    all_reduce = [(RDS, shard), (AG, shard)]
    forward = (F,)
    backward = (BD, BW)

    def kinds(comms: list[Comm]) -> list[tuple[CollectiveKind, float]]:
        assert {(c.axis, c.ring, c.steps) for c in comms} <= {(0, p, p - 1)}
        return [(c.kind, c.step_bytes) for c in comms]

    assert kinds(_block_comms(mesh, 1, forward)) == all_reduce * 2
    assert kinds(_block_comms(mesh, 1, backward)) == all_reduce * 2
    sp_forward = kinds(_block_comms(mesh, p, forward))
    assert sp_forward == [(AG, shard), (RDS, shard)] * 2  # g, then ḡ, per pair
    sp_backward = kinds(_block_comms(mesh, p, backward))
    # qkv: RdS X', AG X; attn_out: AG Y'; the same for the MLP.
    assert sp_backward == [(RDS, shard), (AG, shard), (AG, shard)] * 2
    link = traffic(_block_comms(mesh, 1, forward))[0].bytes_per_link
    assert link == 2 * 2 * (p - 1) * shard  # two all-reduces: 2 (P − 1) shards each
    assert traffic(_block_comms(mesh, p, forward))[0].bytes_per_link == link
    sp_back = traffic(_block_comms(mesh, p, backward))[0].bytes_per_link
    assert sp_back == link + 2 * (p - 1) * shard


# --------------------------------------------------------------------------- the oracle


@pytest.mark.parametrize("p", [1, 2, 4])
@pytest.mark.parametrize("sp", [False, True])
def test_every_pass_matches_dense_numpy_and_its_predicted_traffic(p: int, sp: bool) -> None:
    rng = np.random.default_rng(19)
    mesh = Mesh(p, 1)
    for choice in plan_dataflows(BLOCK, MEGATRON.mode("auto")).layers:
        config = _config(choice.layer, p if sp else 1)
        for op in choice.ops:
            a = rng.standard_normal(op.operand_shapes[0])
            b = rng.standard_normal(op.operand_shapes[1])
            virtual = VirtualMesh(p, 1, 2)
            got = MEGATRON.execute(op, a, b, virtual, config, 8)
            where = f"{choice.layer.name} {op.pass_.value} p={p} {config.label}"
            np.testing.assert_allclose(got, dense_gemm(op, a, b), rtol=1e-10, atol=1e-10)
            counted = tuple(c.as_tuple() for c in virtual.counters)
            assert counted == traffic(MEGATRON.comms(op, mesh, config, 2)), where


def test_an_all_reduce_leaves_every_chip_the_same_sum() -> None:
    rng = np.random.default_rng(5)
    partials = rng.standard_normal((4, 1, 8, 3))
    mesh = VirtualMesh(4, 1, 2)
    everywhere = reduced(mesh, partials, sp=False)
    np.testing.assert_allclose(everywhere, replicas(partials.sum(axis=0)[0], 4), atol=1e-12)
    # RdS + AG: 2 launches, 2 · 3 steps of a 2 × 3 shard of 2 bytes per element.
    assert mesh.counters[0].as_tuple() == (2, 6, 6 * 6 * 2)


def test_the_executor_refuses_a_grid_and_another_table_1_row() -> None:
    op = layer_dataflow(COLUMN, Stationary.Y, False).ops[0]
    a, b = np.zeros(op.operand_shapes[0]), np.zeros(op.operand_shapes[1])
    config = Config.of(parallel=1, seq_shards=2)
    with pytest.raises(ValueError, match=r"megatron runs on a ring \(P x 1\), got 2x2"):
        MEGATRON.execute(op, a, b, VirtualMesh(2, 2, 2), config, 8)
    with pytest.raises(ValueError, match="seq_shards must be 1 or the ring size 4, got 2"):
        MEGATRON.execute(op, a, b, VirtualMesh(4, 1, 2), config, 8)
    other = layer_dataflow(COLUMN, Stationary.X, False).ops[0]
    with pytest.raises(ValueError, match="Y-stationary row untransposed"):
        MEGATRON.comms(other, RING, config, 2)
    with pytest.raises(ValueError, match=r"parallel must be 1 \(column\) or 2 \(row\), got 3"):
        MEGATRON.comms(op, RING, Config.of(parallel=3, seq_shards=4), 2)


# --------------------------------------------------------------------------- the command line


def test_gemm_and_plan_take_megatron(runner: CliRunner) -> None:
    args = ["gemm", "262144", "36864", "12288", "--chips", "8", "--algorithms", "megatron"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["entries"]
    # A GeMM on its own is a column-parallel forward: the sequence all-gather of A, then A·B.
    assert (entry["mesh"], entry["dataflow"], entry["config"]) == (
        "8x1",
        "OS",
        {"parallel": 1, "seq_shards": 8},
    )
    assert entry["layout"] == "column-parallel, SP over 8"
    assert entry["traffic_bytes"] == 7 * 262144 * 12288 * 2 / 8
    result = runner.invoke(app, ["plan", "gpt3", "--chips", "256", "-a", "megatron", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["mesh"]["cols"] == 1
    assert [layer["config"]["parallel"] for layer in plan["layers"]] == [1, 2, 1, 2]
