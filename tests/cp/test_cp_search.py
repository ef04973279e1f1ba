"""Context parallelism as a level of the cluster search and of the step model (issue 18 item 2):
the CP degrees searched, the step terms it changes, and a CP plan through verify and --check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.errors import InfeasibleError
from meshtune.model.layers import fc_layers
from meshtune.plan import read_plan
from meshtune.search.experts import check_cp, context_degrees
from meshtune.step import BlockFc, price_step
from meshtune.step.cp import ring_attention_s
from meshtune.step.work import attention_core
from meshtune.verify.run import verify_plan


def test_context_degrees_keep_at_least_8192_tokens_a_rank() -> None:
    assert context_degrees(64, 2048, None) == (1,)
    assert context_degrees(64, 32768, None) == (1, 2, 4)
    assert context_degrees(16384, 131072, None) == (1, 2, 4, 8, 16)
    assert context_degrees(24, 131072, None) == (1, 2, 4, 8)  # divisors of the chips only
    assert context_degrees(64, 2048, 2) == (2,)  # pinned: the user's choice
    check_cp(64, 2048, 2)
    with pytest.raises(InfeasibleError, match="--cp 3 does not divide 64 chips"):
        check_cp(64, 2048, 3)
    with pytest.raises(InfeasibleError, match="does not split into 2·CP = 8 equal chunks"):
        check_cp(64, 2052, 4)


def test_cp_splits_the_attention_and_the_local_terms() -> None:
    """CP 2 against the same chips as DP: the attention core's work halves per chip, the
    FC block is the local tokens', model FLOPs stay those of the whole step."""
    model, profile = load_model("llama2-70b"), load_profile("h100-8gpu-nodes")
    seq = 16384
    local = fc_layers(model, 1, seq // 2)
    fc = BlockFc(8, 1e-2, 2e-2, 0.0, local, 8)
    one = price_step(model, profile, fc, batch=2, seq_len=seq, dp=2, pp=1, micro_batches=1)
    two = price_step(model, profile, fc, batch=2, seq_len=seq, dp=2, pp=1, micro_batches=1, cp=2)
    assert two.chips == 2 * one.chips == 32
    core = attention_core(model, 1, seq, 8, 2).total_s(profile)
    assert one.split.attention_s == pytest.approx(80 * core)
    assert two.split.attention_s == pytest.approx(80 * core / 2)
    full = fc_layers(model, 1, seq)
    assert two.model_flops == pytest.approx(
        price_step(
            model,
            profile,
            BlockFc(8, 1e-2, 2e-2, 0.0, full, 8),
            batch=2,
            seq_len=seq,
            dp=2,
            pp=1,
            micro_batches=1,
        ).model_flops
    )
    assert two.memory.activations_bytes < one.memory.activations_bytes
    attention = attention_core(model, 1, seq, 16, 2)
    ring = ring_attention_s(model, profile, attention, micro_batch=1, seq_len=seq, tp=8, cp=2)
    assert two.split.cp_exposed_s == pytest.approx(80 * sum(ring))
    assert one.split.cp_exposed_s == 0.0


@pytest.fixture(scope="module")
def cp_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama 2 70B at 32,768 tokens on 64 H100s, batch 16: the search picks CP."""
    path = tmp_path_factory.mktemp("cp") / "cp.json"
    args = ["plan", "llama2-70b", "--seq", "32768", "--chips", "64", "--batch", "16"]
    got = CliRunner().invoke(app, [*args, "-p", "h100-8gpu-nodes", "-o", str(path)])
    assert got.exit_code == 0, got.output
    return path


def test_a_long_sequence_plan_uses_context_parallelism(cp_plan: Path, runner: CliRunner) -> None:
    plan = read_plan(cp_plan.read_text(encoding="utf-8"), str(cp_plan))
    cluster = plan.cluster
    assert cluster is not None and cluster.cp > 1
    assert cluster.dp * cluster.pp * cluster.cp * plan.mesh.to_mesh().chips == 64
    assert plan.layers[0].tokens == cluster.micro_batch * 32768 // cluster.cp  # local tokens
    assert verify_plan(plan).ok
    args = ["plan", "llama2-70b", "--seq", "32768", "--chips", "64", "--batch", "16"]
    check = runner.invoke(app, [*args, "-p", "h100-8gpu-nodes", "--check", str(cp_plan)])
    assert check.exit_code == 0, check.output


def test_a_tampered_cp_fails_verify(cp_plan: Path) -> None:
    data = json.loads(cp_plan.read_text(encoding="utf-8"))
    data["cluster"]["cp"] = 1
    assert not verify_plan(read_plan(json.dumps(data), "tampered.json")).ok


def test_a_bad_pinned_cp_is_one_line(runner: CliRunner) -> None:
    got = runner.invoke(app, ["plan", "gpt3", "--chips", "64", "--cp", "3"])
    assert got.exit_code == 2
    assert got.stderr == "meshtune: error: --cp 3 does not divide 64 chips\n"


def test_a_plan_whose_cp_does_not_split_the_sequence_is_one_line(
    cp_plan: Path, tmp_path: Path, runner: CliRunner
) -> None:
    """Regression: a CP plan edited to 4 tokens a sequence gave a ValueError traceback in
    verify, timeline and export (zero tokens a rank)."""
    data = json.loads(cp_plan.read_text(encoding="utf-8"))
    data["inputs"]["seq_len"] = 4
    path = tmp_path / "short.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    for command in ("verify", "timeline", "export"):
        got = runner.invoke(app, [command, str(path)])
        assert got.exit_code == 2, got.output
        assert got.stderr.count("\n") == 1
        assert "does not split into 2·cp" in got.stderr
