"""FP8 training (``--precision fp8``, issue 18 item 4), worked by hand: the FC GeMMs at the
profile's FP8 rate, state and cached activations as DeepSeek-V3 §3.3 keeps them, the error
for a profile without FP8, and the option through the plan file (the MoE dispatch in FP8:
tests/moe/test_moe_fp8.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshtune.catalog import catalog_dir, load_model, load_profile
from meshtune.cli import app
from meshtune.cost.compute import at_precision, gemm_time
from meshtune.errors import InfeasibleError, ProfileError
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import fc_layers
from meshtune.plan import read_plan
from meshtune.planner.make import make_plan
from meshtune.search.levels import search_cluster
from meshtune.step.memory import block_activation_bytes, memory_per_chip, state_bytes
from meshtune.step.options import ClusterOptions, StepOptions
from meshtune.step.precision import FP8_TILE_BYTES, optimizer_bytes_per_param
from meshtune.step.work import optimizer_s
from meshtune.verify.check import check_plan
from test_memory import TINY

PROFILES = catalog_dir("profiles")
FP8 = {"peak_flops_per_s": 4e12, "effective_flops_per_s": 2e12, "sources": ["round numbers"]}


@pytest.fixture(name="profile")
def _profile(make_profile: Callable[..., HardwareProfile]) -> HardwareProfile:
    """The round profile (1e12 FLOP/s bf16) with FP8 at 2e12 FLOP/s and HBM at 1e11 B/s."""
    return make_profile(hbm_bytes_per_s=1e11, fp8=FP8)


def test_fp8_swaps_the_gemm_rates_and_nothing_else(profile: HardwareProfile) -> None:
    assert at_precision(profile, "bf16") is profile
    fp8 = at_precision(profile, "fp8")
    assert (fp8.peak_flops_per_s, fp8.effective_flops_per_s) == (4e12, 2e12)
    assert at_precision(profile, "fp8") is fp8  # memoised: the search's caches key on it
    assert fp8.model_dump(exclude={"peak_flops_per_s", "effective_flops_per_s"}) == (
        profile.model_dump(exclude={"peak_flops_per_s", "effective_flops_per_s"})
    )
    # 2·m·n·k / F: a 100 × 200 × 300 GeMM, 12 MFLOP, 12 µs in bf16, 6 µs in FP8
    assert gemm_time(profile, 100, 200, 300) == pytest.approx(12e-6)
    assert gemm_time(fp8, 100, 200, 300) == pytest.approx(6e-6)


def test_the_shipped_hopper_profiles_have_fp8_and_the_others_do_not() -> None:
    for name in ("h100-8gpu-nodes", "h800-8gpu-nodes"):
        hopper = load_profile(name)
        assert hopper.fp8 is not None
        assert hopper.fp8.peak_flops_per_s == pytest.approx(2 * hopper.peak_flops_per_s, 1e-4)
        # 0.895 (the BF16 rate's training-stack factor) x DeepGEMM's 1358 TFLOP/s
        assert hopper.fp8.effective_flops_per_s == pytest.approx(0.895 * 1358e12, 1e-4)
        # FP8's own curve: DeepGEMM's N 7168 x K 16384 at M = 64 / 128 / 4096, over 1358 TFLOP/s
        curve = at_precision(hopper, "fp8").gemm_efficiency
        assert curve is not None and curve == hopper.fp8.gemm_efficiency != hopper.gemm_efficiency
        points = [x for p in curve.curve for x in (p.flops, p.efficiency)]
        shapes = [(64, 336), (128, 645), (4096, 1358)]
        expected = [x for m, t in shapes for x in (2 * m * 7168 * 16384, t / 1358)]
        assert points == pytest.approx(expected, rel=1e-4)
    for name in ("a100-80gb-8gpu-nodes", "tpuv4"):
        assert load_profile(name).fp8 is None


def test_an_fp8_rate_above_its_peak_names_the_section(tmp_path: Path) -> None:
    text = Path(PROFILES / "h100-8gpu-nodes.toml").read_text(encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("= 1215.4e12", "= 2215.4e12"), encoding="utf-8")
    with pytest.raises(ProfileError, match=r"field 'fp8': effective_flops_per_s .* exceeds"):
        load_profile(bad)


def test_a_profile_without_fp8_is_one_error_naming_it(runner: CliRunner) -> None:
    with pytest.raises(ProfileError, match="profile 'tpuv4' has no fp8 section"):
        at_precision(load_profile("tpuv4"), "fp8")
    args = ["plan", "gpt3", "-n", "64", "-p", "a100-80gb-8gpu-nodes", "--precision", "fp8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "profile 'a100-80gb-8gpu-nodes' has no fp8 section" in result.stderr
    bad = runner.invoke(app, ["plan", "gpt3", "-n", "64", "--precision", "fp4"])
    assert bad.exit_code == 2 and "Traceback" not in bad.stderr
    with pytest.raises(InfeasibleError, match="precision 'fp4' is not one of bf16, fp8"):
        ClusterOptions(step=StepOptions(precision="fp4"))  # type: ignore[arg-type]


def test_fc_time_by_hand_at_fp8_and_bf16(profile: HardwareProfile) -> None:
    # TINY on one chip (no TP traffic), 2 sequences of 32 in one micro-batch: a block's FC
    # layers hold Σ in·out = 64·192 + 64·64 + 64·256 + 256·64 = 49,152 weights, so its three
    # passes take 3 · 2 · 64 tokens · 49,152 / F, and the step's 4 blocks four times that.
    want = {"bf16": 4 * 3 * 2 * 64 * 49_152 / 1e12, "fp8": 4 * 3 * 2 * 64 * 49_152 / 2e12}
    for precision, fc_s in want.items():
        options = ClusterOptions(dp=1, pp=1, micro_batches=1, step=StepOptions(precision=precision))
        found = search_cluster(
            TINY, profile, 1, batch=2, seq_len=32, options=options, meshes=[Mesh(1, 1)]
        )
        assert found.best.step.fc_s == pytest.approx(fc_s)
        assert found.best.precision == precision
    # attention, element-wise work and the LM head stay at the bf16 rate: only fc_s moves
    bf16, fp8 = (
        search_cluster(
            TINY,
            profile,
            1,
            batch=2,
            seq_len=32,
            options=ClusterOptions(dp=1, pp=1, micro_batches=1, step=StepOptions(precision=p)),
            meshes=[Mesh(1, 1)],
        ).best.step
        for p in ("bf16", "fp8")
    )
    assert fp8.attention_s == bf16.attention_s
    assert fp8.other_s == pytest.approx(bf16.other_s)


def test_fp8_state_and_activations_by_hand(profile: HardwareProfile) -> None:
    # Optimizer state: fp32 master (4) + two BF16 moments (2 + 2) = 8 bytes per parameter.
    assert optimizer_bytes_per_param("bf16") == 12
    assert optimizer_bytes_per_param("fp8") == 8
    assert state_bytes(1000, 2, 1, 0, 4, optimizer_bytes_per_param("fp8")) == (2000, 4000, 8000)
    # Adam's pass over 1e6 parameters at 1e11 B/s: read the 2-byte gradient and the 12 (8)
    # bytes of state, write the state and the 2-byte weight, and the norm's read (2): 30 (22)
    assert optimizer_s(1e6, 2, profile) == pytest.approx(30e6 / 1e11)
    assert optimizer_s(1e6, 2, profile, state_bytes=8) == pytest.approx(22e6 / 1e11)
    # TINY (h 64, 4 heads of 16, GeLU 256), T = 64 tokens, selective recompute, e = 2:
    # bf16: residual T·h·(4e + 2) = 640·T, the rest T·e·(qkv 192 + attn 64 + up 256 + ffn 256)
    # = 1536·T; FP8: residual T·h·(2·(1 + 4/128) + 2e + 2) = 516·T, the rest
    # T·(2·192 + 1.5·64 + (1 + 4/128)·256 + 0·256) = 744·T.
    assert block_activation_bytes(TINY, 2, 32, 2, "selective") == 64 * (640 + 1536)
    fp8 = block_activation_bytes(TINY, 2, 32, 2, "selective", precision="fp8")
    assert fp8 == pytest.approx(64 * (64 * (2 * FP8_TILE_BYTES + 6) + 384 + 96 + 264))
    assert fp8 == pytest.approx(64 * (516 + 744))
    # "full" keeps the block's input at the operand width in either precision
    assert block_activation_bytes(TINY, 2, 32, 2, "full", precision="fp8") == 2 * 64 * 64

    def memory(precision: str) -> tuple[float, float]:
        found = memory_per_chip(
            TINY,
            fc_layers(TINY, 2, 32),
            micro_batch=2,
            seq_len=32,
            bytes_per_element=2,
            dp=1,
            pp=1,
            tp=1,
            stage_blocks=4,
            micro_batches=1,
            zero=0,
            recompute="selective",
            precision=precision,  # type: ignore[arg-type]
        )
        return found.optimizer_bytes, found.activations_bytes

    # 4 blocks of 49,152 weights; one micro-batch in flight, TP 1
    assert memory("bf16") == (4 * 49_152 * 12, 4 * 64 * 2176)
    assert memory("fp8") == pytest.approx((4 * 49_152 * 8, 4 * 64 * 1260))


def test_an_fp8_plan_records_its_precision_and_checks_up_to_date() -> None:
    model, profile = load_model("gpt3"), load_profile("h100-8gpu-nodes")
    options = ClusterOptions(step=StepOptions(precision="fp8"))
    plan = make_plan(model, profile, 64, cluster=options)
    text = plan.to_json()
    again = read_plan(text, "p.json")
    assert again.inputs.levels is not None and again.inputs.levels.precision == "fp8"
    assert again.cluster is not None and again.cluster.precision == "fp8"
    assert again.inputs.precision == "fp8"
    assert json.loads(text)["inputs"]["levels"]["precision"] == "fp8"
    verdict = check_plan(again, text, "p.json", verify=False)
    assert verdict.ok, verdict.line()
    # the same plan in bf16 is slower and does not check as the FP8 one
    bf16 = make_plan(model, profile, 64, cluster=ClusterOptions())
    assert bf16.cluster is not None and plan.cluster is not None
    assert plan.cluster.step.step_s < bf16.cluster.step.step_s
    assert plan.utilization <= 1.0  # FC figures against the FP8 peak
