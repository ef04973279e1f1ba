"""Expert parallelism as a level of the cluster search (meshtune.search.experts, issue 18):
the EP degrees enumerated, the plan that uses them, verify and --check on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.errors import InfeasibleError, SpecError
from meshtune.model.layers import fc_layers
from meshtune.model.moe import with_capacity_factor
from meshtune.plan import read_plan
from meshtune.planner.make import make_plan
from meshtune.search.experts import check_ep, expert_degrees
from meshtune.step.options import ClusterOptions, StepOptions
from meshtune.verify.drift import plan_args
from meshtune.verify.run import verify_plan


def test_expert_degrees_are_the_common_divisors_of_dp_and_the_experts() -> None:
    mixtral, deepseek = load_model("mixtral-8x7b"), load_model("deepseek-v3")
    h100, tpuv4 = load_profile("h100-8gpu-nodes"), load_profile("tpuv4")
    assert expert_degrees(mixtral, h100, 32, None) == (1, 2, 4, 8)
    assert expert_degrees(mixtral, h100, 12, None) == (1, 2, 4)
    assert expert_degrees(deepseek, h100, 96, None) == (1, 2, 4, 8, 16, 32)
    assert expert_degrees(mixtral, h100, 32, 4) == (4,)
    assert expert_degrees(mixtral, h100, 6, 4) == ()  # 4 does not divide DP 6
    assert expert_degrees(mixtral, tpuv4, 32, None) == (1,)  # no all-to-all parameters
    assert expert_degrees(load_model("gpt3"), h100, 32, None) == (1,)
    assert expert_degrees(load_model("gpt3"), h100, 32, 1) == (1,)


def test_a_pinned_ep_that_cannot_be_priced_is_refused() -> None:
    h100 = load_profile("h100-8gpu-nodes")
    with pytest.raises(InfeasibleError, match="--ep 2: model 'gpt3' has no experts"):
        check_ep(load_model("gpt3"), h100, 2)
    with pytest.raises(InfeasibleError, match="profile 'tpuv4' has no all_to_all parameters"):
        check_ep(load_model("mixtral-8x7b"), load_profile("tpuv4"), 2)
    with pytest.raises(InfeasibleError, match="--ep 3 does not divide the 8 experts"):
        check_ep(load_model("mixtral-8x7b"), h100, 3)
    check_ep(load_model("gpt3"), h100, 1)
    check_ep(load_model("gpt3"), h100, None)
    with pytest.raises(InfeasibleError, match="ep must be at least 1"):
        ClusterOptions(ep=0)


@pytest.fixture(scope="module")
def mixtral_plan_text() -> str:
    """Mixtral at 4,096 tokens on 256 H100s, TP 8 inside a node (the Megatron-style mesh: a
    free mesh search prefers a 32 × 4 MeshSlice mesh without EP), the search free to pick EP."""
    plan = make_plan(
        load_model("mixtral-8x7b"),
        load_profile("h100-8gpu-nodes"),
        256,
        batch=128,
        seq_len=4096,
        shapes=["8x1"],
        cluster=ClusterOptions(),
    )
    return plan.to_json()


def test_the_search_picks_expert_parallelism_within_memory(mixtral_plan_text: str) -> None:
    plan = read_plan(mixtral_plan_text, "mixtral.json")
    cluster = plan.cluster
    assert cluster is not None
    assert cluster.ep > 1
    assert cluster.dp % cluster.ep == 0 and 8 % cluster.ep == 0
    capacity = load_profile("h100-8gpu-nodes").memory_bytes
    assert capacity is not None and cluster.memory.total_bytes <= 0.9 * capacity
    assert verify_plan(plan).ok
    # EP 1 is a legal split too, and slower.
    without = make_plan(
        load_model("mixtral-8x7b"),
        load_profile("h100-8gpu-nodes"),
        256,
        batch=128,
        seq_len=4096,
        shapes=["8x1"],
        cluster=ClusterOptions(ep=1),
    ).cluster
    assert without is not None and without.ep == 1
    assert without.step.step_s > cluster.step.step_s


def test_the_default_mixtral_plan_uses_expert_parallelism_within_memory(
    runner: CliRunner,
) -> None:
    """Issue 18's acceptance: ``plan mixtral-8x7b --chips 256 -p h100-8gpu-nodes`` (32K-token
    sequences) uses EP, within the capacity less the headroom. Before the experts of a mesh
    were priced as grouped GeMMs it chose TP 8 without EP (one expert's weight moved)."""
    args = ["plan", "mixtral-8x7b", "--chips", "256", "-p", "h100-8gpu-nodes", "--json"]
    got = runner.invoke(app, args)
    assert got.exit_code == 0, got.output
    plan = read_plan(got.stdout, "mixtral.json")
    cluster = plan.cluster
    assert cluster is not None and cluster.ep > 1
    capacity = load_profile("h100-8gpu-nodes").memory_bytes
    assert capacity is not None
    assert cluster.memory.total_bytes <= (1 - StepOptions().headroom) * capacity
    mlp = {layer.name: layer.groups for layer in plan.layers}
    assert mlp == {"qkv": 1, "attn_out": 1, "mlp_up": 8 // cluster.ep, "mlp_down": 8 // cluster.ep}
    assert verify_plan(plan).ok


def test_pinned_ep_and_its_memory(runner: CliRunner) -> None:
    args = ["plan", "mixtral-8x7b", "--chips", "256", "-p", "h100-8gpu-nodes", "--seq", "4096"]
    one = runner.invoke(app, [*args, "--ep", "1", "--dp", "64", "--json"])
    eight = runner.invoke(app, [*args, "--ep", "8", "--dp", "64", "--json"])
    assert one.exit_code == 0 and eight.exit_code == 0, one.output + eight.output
    a, b = json.loads(one.stdout)["cluster"], json.loads(eight.stdout)["cluster"]
    assert (a["ep"], b["ep"]) == (1, 8)
    assert b["memory"]["weights_bytes"] < a["memory"]["weights_bytes"]
    assert b["step"]["other_s"] > 0
    bad = runner.invoke(app, [*args, "--ep", "3"])
    assert bad.exit_code == 2
    assert bad.stderr == ("meshtune: error: --ep 3 does not divide the 8 experts of mixtral-8x7b\n")
    dense = runner.invoke(app, ["plan", "gpt3", "--chips", "64", "--ep", "2"])
    assert dense.exit_code == 2 and "has no experts" in dense.stderr


def test_a_tampered_ep_fails_verify(mixtral_plan_text: str, tmp_path: Path) -> None:
    data = json.loads(mixtral_plan_text)
    data["cluster"]["ep"] = 1 if data["cluster"]["ep"] > 1 else 2
    plan = read_plan(json.dumps(data), "tampered.json")
    assert not verify_plan(plan).ok


def test_a_plan_whose_ep_does_not_divide_the_experts_is_one_line(
    mixtral_plan_text: str, runner: CliRunner, tmp_path: Path
) -> None:
    """Regression: a chosen split and first candidate both edited to EP 3 gave a ValueError
    traceback when verify re-priced them."""
    data = json.loads(mixtral_plan_text)
    data["cluster"]["ep"] = data["cluster"]["candidates"][0]["ep"] = 3
    path = tmp_path / "ep3.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    got = runner.invoke(app, ["verify", str(path)])
    assert got.exit_code == 2
    assert got.stderr.endswith(
        "field 'cluster.ep' is 3: it must divide DP (" + str(data["cluster"]["dp"]) + ") and "
        "the model's experts (8)\n"
    )


def test_the_capacity_factor_is_a_stated_assumption_to_pass(
    runner: CliRunner, tmp_path: Path
) -> None:
    spec = with_capacity_factor(load_model("mixtral-8x7b"), 1.25)
    assert spec.moe is not None and spec.moe.capacity_factor == 1.25
    # the busiest expert's 1.25 × the balanced rows: 2 · 1.25 per token, over 8 experts
    up = fc_layers(spec, 1, 4096)[2]
    assert (up.groups, up.groups * up.tokens) == (8, 4096 * 2 * 1.25)
    with pytest.raises(SpecError, match="--capacity-factor: model 'gpt3' has no experts"):
        with_capacity_factor(load_model("gpt3"), 1.25)
    with pytest.raises(SpecError, match=r"must be in \[1, 1000\], got 0.5"):
        with_capacity_factor(load_model("mixtral-8x7b"), 0.5)
    out = tmp_path / "cf.json"
    args = ["plan", "mixtral-8x7b", "--chips", "64", "-p", "h100-8gpu-nodes", "--seq", "4096"]
    got = runner.invoke(app, [*args, "--capacity-factor", "1.25", "-o", str(out)])
    assert got.exit_code == 0, got.output
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["inputs"]["model"]["moe"]["capacity_factor"] == 1.25
    flags = plan_args(data)
    assert flags[flags.index("--capacity-factor") + 1] == "1.25"
    check = runner.invoke(app, [*args, "--capacity-factor", "1.25", "--check", str(out)])
    assert check.exit_code == 0, check.output
    stale = runner.invoke(app, [*args, "--check", str(out)])  # balanced routing: other rows
    assert stale.exit_code == 1
