"""Phase 2: mesh shapes × slice counts (meshtune.search, §3.2.2) and the paper's results."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from meshslice_helpers import MESHSLICE, meshslice_pass, slice_counts
from meshtune.catalog import load_model, load_profile
from meshtune.compare.gemm import gemm_study
from meshtune.cost.config import Config
from meshtune.dataflow import plan_dataflows
from meshtune.errors import InfeasibleError, MeshtuneError
from meshtune.hardware.mesh import Mesh, divisors, mesh_shapes, parse_mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import make_plan
from meshtune.search import best_layer_choice, evaluate_mesh, search

# --------------------------------------------------------------------------- enumeration


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, (1,)),
        (7, (1, 7)),
        (12, (1, 2, 3, 4, 6, 12)),
        (16, (1, 2, 4, 8, 16)),
        (48, (1, 2, 3, 4, 6, 8, 12, 16, 24, 48)),
    ],
)
def test_divisors(n: int, expected: tuple[int, ...]) -> None:
    assert divisors(n) == expected


def test_divisors_match_brute_force() -> None:
    for n in range(1, 400):
        assert divisors(n) == tuple(d for d in range(1, n + 1) if n % d == 0), n


def test_mesh_shapes_of_256() -> None:
    shapes = [(m.rows, m.cols) for m in mesh_shapes(256)]
    rows = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert shapes == [(r, 256 // r) for r in rows]


@pytest.mark.parametrize("p", [2, 7, 13, 97])
def test_prime_chip_count_gives_only_lines(p: int) -> None:
    assert mesh_shapes(p) == (Mesh(1, p), Mesh(p, 1))


def test_one_chip_is_one_by_one() -> None:
    assert mesh_shapes(1) == (Mesh(1, 1),)


@pytest.mark.parametrize("chips", [0, -4])
def test_mesh_shapes_reject_non_positive(chips: int) -> None:
    with pytest.raises(
        InfeasibleError, match=f"chips must be between 1 and 16,777,216, got {chips}"
    ):
        mesh_shapes(chips)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32x8", Mesh(32, 8)),
        ("16X16", Mesh(16, 16)),
        (" 4x64 ", Mesh(4, 64)),
        ("32×8", Mesh(32, 8)),  # the multiplication sign the report prints
    ],
)
def test_parse_shape(text: str, expected: Mesh) -> None:
    assert parse_mesh(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "32", "32x", "x8", "0x8", "8x0", "-8x-32", "32x8x1x1", "32x0x2", "32*8", "axb", "3.5x2"],
)
def test_parse_shape_errors(text: str) -> None:
    with pytest.raises(InfeasibleError, match="is not of the form ROWSxCOLS") as info:
        parse_mesh(text)
    assert f"'{text}'" in str(info.value)


@pytest.mark.parametrize("text", ["²x8", "8x³"], ids=["superscript-rows", "superscript-cols"])
def test_parse_shape_rejects_non_ascii_digits_cleanly(text: str) -> None:
    # str.isdigit() accepts superscripts that int() refuses: the error must still be a
    # MeshtuneError (the CLI shows a traceback for anything else).
    with pytest.raises(MeshtuneError):
        parse_mesh(text)


# --------------------------------------------------------------------------- slice counts


def brute_force_slices(extent: int, rows: int, cols: int, block: int) -> tuple[int, ...]:
    """Algorithm 2: every local extent (d/P_r and d/P_c) splits into S groups of B columns."""
    return tuple(
        s
        for s in range(1, extent + 1)
        if extent % rows == 0
        and extent % cols == 0
        and (extent // rows) % (s * block) == 0
        and (extent // cols) % (s * block) == 0
    )


@pytest.mark.parametrize("mesh", [m for m in mesh_shapes(256) if m.rows > 1 and m.cols > 1])
def test_slice_candidates_are_divisors_of_extent_over_block_lcm(
    gpt3: ModelSpec, tpuv4: HardwareProfile, mesh: Mesh
) -> None:
    block = plan_dataflows(fc_layers(gpt3, 128, 2048))
    for choice in block.layers:
        candidates, reason = slice_counts(choice, mesh, tpuv4.slice_block)
        assert reason is None
        lay = choice.layer
        sizes = {"tokens": lay.tokens, "in": lay.in_features, "out": lay.out_features}
        extent = sizes[choice.sliced_dim]
        unit = tpuv4.slice_block * math.lcm(mesh.rows, mesh.cols)
        assert candidates == divisors(extent // unit)
        assert candidates == brute_force_slices(extent, mesh.rows, mesh.cols, 8)


def test_gpt3_32x8_slice_candidates(gpt3: ModelSpec) -> None:
    # Y-stn qkv slices in = 12288; 12288 / (8 · lcm(32, 8) = 256) = 48
    block = plan_dataflows(fc_layers(gpt3, 128, 2048))
    candidates, _ = slice_counts(block.layers[0], Mesh(32, 8), 8)
    assert candidates == (1, 2, 3, 4, 6, 8, 12, 16, 24, 48)


def test_slice_candidates_use_the_lcm_not_the_max() -> None:
    # 4 × 6 mesh: lcm 12, B 8 -> unit 96; in = 480 = 5 · 96 -> S ∈ {1, 5}
    lay = FcLayer("l", tokens=960, in_features=480, out_features=960, fed_by=None)
    (choice,) = plan_dataflows([lay]).layers
    assert choice.sliced_dim == "in"
    assert slice_counts(choice, Mesh(4, 6), 8) == ((1, 5), None)
    assert brute_force_slices(480, 4, 6, 8) == (1, 5)


def test_infeasible_reason_names_the_division() -> None:
    lay = FcLayer("qkv", tokens=6, in_features=64, out_features=64, fed_by=None)
    (choice,) = plan_dataflows([lay]).layers  # W-stn, transposed: X stored (tokens, in)
    candidates, reason = slice_counts(choice, Mesh(4, 2), 8)
    assert candidates == ()
    assert reason == "layer qkv: X dimension tokens=6 does not divide over P_r=4"


def test_infeasible_reason_names_the_block_constraint() -> None:
    lay = FcLayer("up", tokens=16, in_features=16, out_features=16, fed_by=None)
    (choice,) = plan_dataflows([lay]).layers  # Y-stn, slices in = 16
    candidates, reason = slice_counts(choice, Mesh(2, 4), 8)
    assert candidates == ()
    assert reason == (
        "layer up: sliced dimension in=16 is not a multiple of block 8 × lcm(2, 4) = 32"
    )


def test_evaluate_mesh_prefixes_the_shape(round_profile: HardwareProfile) -> None:
    lay = FcLayer("up", tokens=16, in_features=16, out_features=16, fed_by=None)
    result = evaluate_mesh(MESHSLICE, plan_dataflows([lay]), Mesh(2, 4), round_profile, blocks=3)
    assert not result.feasible
    assert result.infeasible is not None and result.infeasible.startswith("2x4: layer up: ")
    assert result.time_s == math.inf
    assert result.utilization(round_profile) == 0.0


# --------------------------------------------------------------------------- the search


def test_prime_chip_count_is_infeasible_for_gpt3(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    with pytest.raises(InfeasibleError) as info:
        make_plan(gpt3, tpuv4, 7)
    message = str(info.value)
    assert message.startswith("no feasible mesh shape for 7 chips with meshslice (2 tried): ")
    assert "1x7: layer qkv: X dimension in=12288 does not divide over P_c=7" in message
    assert "7x1: " in message
    assert "\n" not in message


def test_lines_are_evaluated_and_costed(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    result = search(fc_layers(gpt3, 128, 2048), tpuv4, 256, blocks=96)
    shapes = {(r.mesh.rows, r.mesh.cols): r for r in result.ranked}
    assert set(shapes) == {(m.rows, m.cols) for m in mesh_shapes(256)}
    assert result.infeasible == ()
    for key in ((1, 256), (256, 1)):
        assert 0 < shapes[key].time_s < math.inf
    # on 1 × 256 the row rings hold one chip: an OS pass (AG_col ∥ AG_row) costs its AG_col only
    line = shapes[(1, 256)]
    qkv = line.layers[0]
    forward = qkv.passes[0]
    assert qkv.dataflow.ops[0].dataflow.value == "OS"
    op = qkv.dataflow.ops[0]
    e = tpuv4.bytes_per_element
    # The ring of all 256 chips snakes over both torus axes: the slower all-gather axis, 0.
    link = tpuv4.all_gather["axis0"]
    s = qkv.config["slices"]
    ag_col = link.t_launch_s + 255 * (
        link.t_sync_s + op.m * op.k / (256 * s) * e / link.bw_bytes_per_s
    )
    assert forward.prologue_s == pytest.approx(ag_col, rel=1e-12)
    assert forward.comm.launch_s == pytest.approx(s * link.t_launch_s, rel=1e-12)


def test_one_chip_is_pure_compute(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    # No ring has more than one chip: time = FLOPs / effective FLOP/s and
    # utilization = effective / peak = 242·1024⁴ / 272e12 ≈ 97.8 %.
    plan = make_plan(gpt3, tpuv4, 1)
    assert (plan.mesh.rows, plan.mesh.cols) == (1, 1)
    assert plan.fc_time_s == pytest.approx(plan.fc_flops / tpuv4.effective_flops_per_s)
    assert plan.utilization == pytest.approx(tpuv4.effective_flops_per_s / tpuv4.peak_flops_per_s)
    for layer in plan.layers:
        assert all(p.comm_exposed_s == 0.0 and p.launch_s == 0.0 for p in layer.passes)


def test_each_layer_takes_its_fastest_slice_count(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    result = search(fc_layers(gpt3, 128, 2048), tpuv4, 256, blocks=96)
    for mesh_result in result.ranked:
        for choice in mesh_result.layers:
            assert choice.config in choice.candidates
            for s in (c["slices"] for c in choice.candidates):
                other = sum(
                    meshslice_pass(op, mesh_result.mesh, tpuv4, s).total_s
                    for op in choice.dataflow.ops
                )
                assert choice.time_s <= other
        assert mesh_result.time_s == pytest.approx(96 * sum(c.time_s for c in mesh_result.layers))
    times = [r.time_s for r in result.ranked]
    assert times == sorted(times)


def test_search_is_deterministic(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    layers = fc_layers(gpt3, 128, 2048)
    assert search(layers, tpuv4, 256, blocks=96) == search(layers, tpuv4, 256, blocks=96)
    assert make_plan(gpt3, tpuv4, 256).to_json() == make_plan(gpt3, tpuv4, 256).to_json()


def symmetric_profile(make_profile: Callable[..., HardwareProfile]) -> HardwareProfile:
    link = {"t_launch_s": 10e-6, "t_sync_s": 1e-6, "bw_bytes_per_s": 1e9}
    both = {"axis0": link, "axis1": link}
    return make_profile(all_gather=both, reduce_scatter=both)


def test_mesh_ties_prefer_fewer_rows(make_profile: Callable[..., HardwareProfile]) -> None:
    # A square layer on a profile where every collective costs the same on both axes: a
    # P_r × P_c mesh and its transpose cost exactly the same.
    profile = symmetric_profile(make_profile)
    layers = [FcLayer("sq", 256, 256, 256, None)]
    given = [Mesh(4, 1), Mesh(2, 2), Mesh(1, 4)]  # 4 × 1 listed first on purpose
    result = search(layers, profile, 4, shapes=given)
    order = [(r.mesh.rows, r.mesh.cols) for r in result.ranked]
    by_shape = {(r.mesh.rows, r.mesh.cols): r.time_s for r in result.ranked}
    assert by_shape[(1, 4)] == by_shape[(4, 1)]  # a real tie
    assert order.index((1, 4)) == order.index((4, 1)) - 1


def test_slice_ties_prefer_fewer_slices(round_profile: HardwareProfile) -> None:
    # On 1 × 1 nothing is communicated and, with power-of-two sizes, every S costs exactly the
    # same: 2·64·64·64 / 1e12 s per pass.
    result = search([FcLayer("sq", 64, 64, 64, None)], round_profile, 1)
    (choice,) = result.best.layers
    assert [c["slices"] for c in choice.candidates] == [1, 2, 4, 8]
    assert choice.config["slices"] == 1


def test_best_layer_choice_ties_prefer_fewer_slices_in_any_order(
    round_profile: HardwareProfile,
) -> None:
    # "The fastest slice count among candidates (ties: fewer slices)" — whatever their order.
    (choice,) = plan_dataflows([FcLayer("sq", 64, 64, 64, None)]).layers
    best = best_layer_choice(
        MESHSLICE, choice, Mesh(1, 1), round_profile, [Config.of(slices=s) for s in (8, 4, 2, 1)]
    )
    assert best.config["slices"] == 1


def test_restricting_shapes(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    layers = fc_layers(gpt3, 128, 2048)
    result = search(layers, tpuv4, 256, blocks=96, shapes=[Mesh(16, 16), Mesh(16, 16)])
    assert [r.mesh for r in result.ranked] == [Mesh(16, 16)]
    full = {r.mesh: r.time_s for r in search(layers, tpuv4, 256, blocks=96).ranked}
    assert result.best.time_s == full[Mesh(16, 16)]


def test_restricting_to_no_shape_is_explained(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    # rule 5 of design.md: the message names the problem (here: nothing to search)
    with pytest.raises(InfeasibleError) as info:
        search(fc_layers(gpt3, 4, 2048), tpuv4, 8, shapes=[])
    assert str(info.value) == "no mesh shape to search: the shape list is empty"


def test_restricting_to_a_shape_of_other_size_fails(
    gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    with pytest.raises(InfeasibleError, match=r"mesh shape 16x8 has 128 chips, not 256"):
        search(fc_layers(gpt3, 128, 2048), tpuv4, 256, shapes=[Mesh(16, 8)])


# --------------------------------------------------------------------------- the paper


def test_gpt3_on_256_tpuv4_picks_32x8(tpuv4: HardwareProfile) -> None:
    """Acceptance: §5.2 / Figures 13-14, GPT-3 at 256 chips runs best on a 32 × 8 mesh.

    Derived by the search over all nine shapes of 256 chips; nothing is pinned.
    """
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), 256, top=9)
    assert (plan.mesh.rows, plan.mesh.cols) == (32, 8)
    assert len(plan.candidates) == 9  # every shape was feasible and costed
    assert (plan.candidates[0].rows, plan.candidates[0].cols) == (32, 8)
    assert plan.candidates[0].fc_time_s < plan.candidates[1].fc_time_s


# Table 2 (§5.2): FC FLOP utilization at 256 chips without / with dataflow optimization.
# GPT-3 55.6 % -> 67.4 % (+21.2 %), Megatron 78.2 % -> 82.2 % (+5.1 %). Observed with the
# shipped tpuv4 profile: GPT-3 51.1 % -> 60.2 % (+17.8 %), MT-NLG 69.5 % -> 78.7 % (+13.2 %;
# +4.0 % if both stay on 32 × 8). The cost model is the paper's, the simulator behind Table 2 is
# not: the direction and "GPT-3 gains more than MT-NLG" (the paper's explanation: MT-NLG hides
# more communication) are asserted against the paper, and GPT-3's gain is pinned to the model's
# own value so that a change to the cost model shows up here.
PAPER_TABLE2_SPEEDUP = {"gpt3": 0.212, "megatron-nlg": 0.051}  # the paper: +21.2 %, +5.1 %
MODEL_TABLE2_SPEEDUP_GPT3 = 0.1775  # this cost model with the shipped tpuv4 profile: +17.8 %


def dataflow_speedup(model: str, tpuv4: HardwareProfile) -> float:
    spec = load_model(model)
    auto = make_plan(spec, tpuv4, 256)
    ystn = make_plan(spec, tpuv4, 256, mode="ystn")
    assert auto.inputs.dataflow_mode == "auto" and ystn.inputs.dataflow_mode == "ystn"
    return ystn.fc_time_s / auto.fc_time_s - 1.0


@pytest.mark.parametrize("model", ["gpt3", "megatron-nlg"])
def test_table2_dataflow_optimization_helps(model: str, tpuv4: HardwareProfile) -> None:
    assert dataflow_speedup(model, tpuv4) > 0.0


def test_table2_gpt3_speedup_pinned(tpuv4: HardwareProfile) -> None:
    speedup = dataflow_speedup("gpt3", tpuv4)
    # Paper (Table 2): +21.2 % (PAPER_TABLE2_SPEEDUP); this model gives +17.75 %, 3.4 points lower.
    assert speedup == pytest.approx(MODEL_TABLE2_SPEEDUP_GPT3, abs=5e-4)
    assert speedup < PAPER_TABLE2_SPEEDUP["gpt3"]


def test_table2_gpt3_gains_more_than_megatron(tpuv4: HardwareProfile) -> None:
    assert dataflow_speedup("gpt3", tpuv4) > dataflow_speedup("megatron-nlg", tpuv4)


def test_a_time_that_is_not_finite_is_an_error_naming_the_inputs(
    gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    # Issue 20 finding 8: a profile that slipped past validation (model_copy does not validate)
    # gave inf / NaN times that reached plans as null and reports as "nan %".
    link = tpuv4.all_gather.axis0.model_copy(update={"t_sync_s": math.inf})
    table = tpuv4.all_gather.model_copy(update={"axis0": link})
    broken = tpuv4.model_copy(update={"all_gather": table})
    with pytest.raises(MeshtuneError, match=r"^meshslice priced the forward GeMM \(OS, m=") as info:
        make_plan(gpt3, broken, 16)
    assert "not a finite time" in str(info.value) and "profile 'tpuv4'" in str(info.value)
    with pytest.raises(MeshtuneError, match="not a finite time"):
        gemm_study(4096, 4096, 4096, 16, broken, ["summa"])
