"""``meshtune export --to megatron|maxtext|torchtitan|deepspeed|jax`` (issue 15, item 1).

Golden files per target and plan (``MESHTUNE_UPDATE_GOLDEN=1`` rewrites them), and each file
read back with the format's own parser (``shlex``, ``tomllib``, ``json``, the flat-YAML reader)
to check its values against the plan's fields, independently of the exporter's helpers.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import tomllib
from export_plans import CLUSTER, EP_CP, GOLDEN, NAMES, plan_named, source
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.cli.export import ExportTarget
from meshtune.export import TARGETS, export_plan
from meshtune.export.common import plan_split, predict, without_cp
from meshtune.export.flatyaml import read_flat_yaml
from meshtune.export.maxtext import placement
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions, StepOptions

REPO = Path(__file__).resolve().parents[2]
SUFFIX = {"megatron": "args", "maxtext": "yml", "torchtitan": "toml", "deepspeed": "json"}


def test_the_cli_choices_are_the_registry() -> None:
    assert [t.value for t in ExportTarget] == list(TARGETS)


@pytest.mark.parametrize("target", list(SUFFIX))
@pytest.mark.parametrize("name", NAMES)
def test_golden(name: str, target: str) -> None:
    """The whole text, predictions included: a change of the step model changes them; rewrite
    with MESHTUNE_UPDATE_GOLDEN=1 and review the diff."""
    text = export_plan(plan_named(name), target, source(name))
    golden = GOLDEN / f"{name}.{SUFFIX[target]}"
    if os.environ.get("MESHTUNE_UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


def _megatron_options(text: str) -> dict[str, str | None]:
    tokens = shlex.split(text, comments=True)
    out: dict[str, str | None] = {}
    for i, token in enumerate(tokens):
        if token.startswith("--"):
            following = tokens[i + 1] if i + 1 < len(tokens) else "--"
            out[token] = None if following.startswith("--") else following
    return out


@pytest.mark.parametrize("name", NAMES)
def test_megatron_values_are_the_plans(name: str) -> None:
    plan = plan_named(name)
    opts = _megatron_options(export_plan(plan, "megatron", source(name)))
    cluster = plan.cluster
    assert opts["--tensor-model-parallel-size"] == str(plan.mesh.rows * plan.mesh.cols)
    assert opts["--pipeline-model-parallel-size"] == str(cluster.pp if cluster else 1)
    assert opts["--global-batch-size"] == str(plan.inputs.batch)
    assert opts["--micro-batch-size"] == str(cluster.micro_batch if cluster else plan.inputs.batch)
    assert opts["--seq-length"] == str(plan.inputs.seq_len)
    assert opts["--num-layers"] == str(plan.inputs.model.blocks)
    assert "--sequence-parallel" in opts
    if cluster is not None and cluster.vpp > 1:
        per_chunk = plan.inputs.model.blocks // (cluster.pp * cluster.vpp)
        assert opts["--num-layers-per-virtual-pipeline-stage"] == str(per_chunk)
    if cluster is not None and cluster.zero == 1:
        assert "--use-distributed-optimizer" in opts
    assert opts["--expert-model-parallel-size"] == str(cluster.ep if cluster else 1)
    assert opts["--context-parallel-size"] == str(cluster.cp if cluster else 1)
    if cluster is not None and cluster.cp > 1:
        assert opts["--cp-comm-type"] == {"ring": "p2p", "all-gather": "allgather"}[cluster.cp_comm]
    if plan.inputs.model.moe is not None:
        assert opts["--num-experts"] == str(plan.inputs.model.moe.experts)
    # Megatron-Core: DP = world / (TP · PP · CP)
    tp, pp = int(opts["--tensor-model-parallel-size"]), int(opts["--pipeline-model-parallel-size"])
    assert plan.inputs.chips // (tp * pp * int(opts["--context-parallel-size"])) == (
        cluster.dp if cluster else 1
    )


@pytest.mark.parametrize("name", NAMES)
def test_torchtitan_values_are_the_plans(name: str) -> None:
    plan = plan_named(name)
    doc = tomllib.loads(export_plan(plan, "torchtitan", source(name)))
    par, training = doc["parallelism"], doc["training"]
    cluster = plan.cluster
    dp = cluster.dp if cluster else 1
    assert par["tensor_parallel_degree"] == plan.mesh.rows * plan.mesh.cols
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == dp
    assert par["pipeline_parallel_degree"] == (cluster.pp if cluster else 1)
    assert par["context_parallel_degree"] == (cluster.cp if cluster else 1)
    assert par["expert_parallel_degree"] == (cluster.ep if cluster else 1)
    if cluster is not None and cluster.ep > 1:
        # torchtitan's rule (parallel_dims.py, ETP = TP): EP divides dp_shard x cp
        assert par["expert_tensor_parallel_degree"] == par["tensor_parallel_degree"]
        assert (par["data_parallel_shard_degree"] * par["context_parallel_degree"]) % par[
            "expert_parallel_degree"
        ] == 0
    world = (
        par["data_parallel_replicate_degree"]
        * par["data_parallel_shard_degree"]
        * par["context_parallel_degree"]
        * par["tensor_parallel_degree"]
        * par["pipeline_parallel_degree"]
    )
    assert world == plan.inputs.chips or cluster is None
    assert training["global_batch_size"] == plan.inputs.batch
    assert training["seq_len"] == plan.inputs.seq_len
    assert doc["activation_checkpoint"]["mode"] == (cluster.recompute if cluster else "selective")
    if cluster is not None and cluster.pp > 1:
        micro = par["pipeline_parallel_microbatch_size"]
        assert micro == cluster.micro_batch
        assert training["local_batch_size"] // micro == cluster.micro_batches
        assert par["pipeline_parallel_schedule"] == (
            "Interleaved1F1B" if cluster.vpp > 1 else "1F1B"
        )


@pytest.mark.parametrize("name", NAMES)
def test_deepspeed_values_are_the_plans(name: str) -> None:
    plan = plan_named(name)
    doc = json.loads(export_plan(plan, "deepspeed", source(name)))
    cluster = plan.cluster
    # DeepSpeed has no CP: its DP world is chips / (TP · PP), the plan's DP · CP
    dp = cluster.dp * cluster.cp if cluster else 1
    # DeepSpeed's own rule: train_batch_size = micro-batch x accumulation x DP world size
    assert (
        doc["train_batch_size"]
        == doc["train_micro_batch_size_per_gpu"] * doc["gradient_accumulation_steps"] * dp
        == plan.inputs.batch
    )
    assert doc["zero_optimization"]["stage"] == (cluster.zero if cluster else 0)
    assert doc["tensor_parallel"]["autotp_size"] == plan.mesh.rows * plan.mesh.cols
    assert doc["pipeline"]["stages"] == (cluster.pp if cluster else 1)
    if cluster is not None and cluster.ep > 1:
        assert doc["meshtune"]["ep_size"] == cluster.ep
        assert any(f"ep_size={cluster.ep})" in n for n in doc["meshtune"]["not_expressible"])
    if cluster is not None and cluster.cp > 1:
        assert any("no ring context parallelism" in n for n in doc["meshtune"]["not_expressible"])


@pytest.mark.parametrize("name", NAMES)
def test_maxtext_values_are_the_plans(name: str) -> None:
    plan = plan_named(name)
    values = read_flat_yaml(export_plan(plan, "maxtext", source(name)), "x.yml")

    def size(axis: str) -> int:
        ici = values.get(f"ici_{axis}_parallelism", 1)
        dcn = values.get(f"dcn_{axis}_parallelism", 1)
        assert isinstance(ici, int) and isinstance(dcn, int)
        return ici * dcn

    cluster = plan.cluster
    assert size("tensor") * size("tensor_sequence") == plan.mesh.rows * plan.mesh.cols
    if plan.mesh.cols > 1:
        assert (size("tensor_sequence"), size("tensor")) == (plan.mesh.rows, plan.mesh.cols)
    assert size("pipeline") == (cluster.pp if cluster else 1)
    assert size("data") * size("fsdp") * size("expert") == (cluster.dp if cluster else 1)
    assert size("expert") == (cluster.ep if cluster else 1)
    assert size("context") == (cluster.cp if cluster else 1)
    if cluster is not None and cluster.cp > 1:
        strategy = {"ring": "ring", "all-gather": "all_gather"}[cluster.cp_comm]
        assert values["context_parallel_strategy"] == strategy
    assert values["per_device_batch_size"] * plan.inputs.chips == plan.inputs.batch
    assert values["max_target_length"] == plan.inputs.seq_len


def test_maxtext_places_levels_on_ici_then_dcn() -> None:
    split = replace(plan_split(plan_named("llama3-70b-1024")), rows=4, cols=2, pp=2, dp=64)
    places = placement(split, 8)  # 8-GPU NVLink nodes: TP 4x2 fills one
    assert places["tensor"] == (2, 1)
    assert places["tensor_sequence"] == (4, 1)
    assert places["stage"] == (1, 2)
    assert places["data"] == (1, 64)
    # a 12-chip unit: axis 1 takes 2 (room 6), axis 0 gcd(4, 6) = 2 on ICI and 2 over DCN,
    # the stages gcd(2, 3) = 1, DP gcd(64, 3) = 1
    assert placement(split, 12)["tensor_sequence"] == (2, 2)
    assert placement(split, 12)["stage"] == (1, 2)


def test_maxtext_2d_rules_follow_phase_1() -> None:
    text = export_plan(plan_named("gpt3-256"), "maxtext", source("gpt3-256"))
    # gpt3-256: qkv, mlp_up W = [in over rows | out over cols]: embed on axis 0, mlp on axis 1
    assert '["embed", ["tensor_sequence"]]' in text
    assert '["mlp", ["tensor"]]' in text
    # attn_out (Y-stationary) puts embed on axis 1: named as not expressible, not dropped
    assert "attn_out: W shards 'embed' over tensor" in text


def test_what_a_framework_cannot_express_is_priced() -> None:
    plan = plan_named("llama3-70b-1024")
    text = export_plan(plan, "megatron", source("llama3-70b-1024"))
    c, tp = plan.cluster, plan.mesh.rows * plan.mesh.cols
    assert c is not None and plan.mesh.cols > 1  # a 2D mesh: Megatron-LM cannot express it
    assert "NOT EXPRESSIBLE: Megatron-LM runs 1D" in text
    assert f"meshtune predicts DP {c.dp} x PP {c.pp} x TP {tp} (megatron): step" in text


@pytest.mark.parametrize("name", CLUSTER)
def test_jax_module_carries_the_cluster_levels(name: str) -> None:
    plan = plan_named(name)
    text = export_plan(plan, "jax", source(name))
    cluster = plan.cluster
    assert cluster is not None
    shape = (cluster.dp, cluster.pp, plan.mesh.rows, plan.mesh.cols)
    assert f"CLUSTER_SHAPE = {shape}" in text
    assert f"Cluster levels: DP {cluster.dp} × PP {cluster.pp} (v = {cluster.vpp})" in text
    compile(text, "plan_jax.py", "exec")


def test_cli_export_writes_each_target(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    for target in TARGETS:
        out = tmp_path / f"x.{target}"
        result = runner.invoke(
            app, ["export", "plans/gpt3-256.json", "--to", target, "-o", str(out)]
        )
        assert result.exit_code == 0, result.output
        assert out.read_text(encoding="utf-8") == export_plan(
            plan_named("gpt3-256"), target, "plans/gpt3-256.json"
        )


def test_the_plans_own_split_is_priced_with_its_step_options() -> None:
    # Regression: the nearest split was priced with default step options (no dropout, fp32
    # gradients, fused accumulation), so a plan asked for others did not predict itself.
    options = ClusterOptions(
        step=StepOptions(dropout=True, fp32_grads=False, grad_accumulation="separate")
    )
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), 256, cluster=options)
    assert plan.cluster is not None
    words = predict(plan, plan_split(plan))
    assert f"step {plan.cluster.step.step_s:.4g} s," in words, words


@pytest.mark.parametrize("target", ["megatron", "torchtitan", "maxtext", "deepspeed"])
def test_a_dualpipe_plan_exports_as_1f1b_with_its_price(target: str) -> None:
    # No framework meshtune exports to runs DeepSeek's DualPipe: the export says so and prices
    # the same split under 1F1B.
    options = ClusterOptions(pp=8, step=StepOptions(schedule="dualpipe"))
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), 256, cluster=options)
    assert plan.cluster is not None and plan.cluster.schedule == "dualpipe"
    text = export_plan(plan, target, "dualpipe.json")
    assert "has no DualPipe schedule; nearest: 1F1B on the same split" in text
    one = predict(plan, replace(plan_split(plan), schedule="1f1b"))
    assert "not predicted" not in one and one in text


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("name", EP_CP)
def test_an_ep_or_cp_plan_is_never_exported_as_1(name: str, target: str) -> None:
    # Regression: Megatron-LM and torchtitan exports wrote EP 1 and CP 1 whatever the plan
    # chose, with no note, and the nearest split was priced with EP and CP searched afresh.
    plan = plan_named(name)
    c = plan.cluster
    assert c is not None and (c.ep > 1) != (c.cp > 1)
    text = export_plan(plan, target, source(name))
    level, degree = ("EP", c.ep) if c.ep > 1 else ("CP", c.cp)
    word = "expert" if c.ep > 1 else "context"
    spelled = {
        "megatron": f"--{word}-{'model-' if c.ep > 1 else ''}parallel-size {degree}\n",
        "torchtitan": f"{word}_parallel_degree = {degree}\n",
        "maxtext": f"_{word}_parallelism: ",
        "deepspeed": f"ep_size={c.ep}" if c.ep > 1 else f"nearest: CP {c.cp} made DP replicas",
        "jax": f"NOT EXPRESSIBLE: the module has no {'expert' if c.ep > 1 else 'ring'}",
    }[target]
    assert spelled in text
    assert f"{word}-{'model-' if c.ep > 1 else ''}parallel-size 1\n" not in text
    assert f"{word}_parallel_degree = 1\n" not in text
    # every prediction in the file prices the plan's own EP and CP
    for line in text.splitlines():
        if "meshtune predicts DP" in line and "made DP replicas" not in line:
            assert f"{level} {degree}" in line, line


@pytest.mark.parametrize("name", EP_CP)
def test_the_plans_own_ep_cp_split_predicts_itself(name: str) -> None:
    # predict pins the plan's EP and CP: the plan's own split is priced as the plan
    plan = plan_named(name)
    assert plan.cluster is not None
    words = predict(plan, plan_split(plan))
    assert f"step {plan.cluster.step.step_s:.4g} s," in words, words
    assert plan_split(plan).label in words


def test_without_cp_keeps_the_chips_and_batch() -> None:
    split = plan_split(plan_named("llama2-70b-cp4"))
    near = without_cp(split)
    assert (near.cp, near.dp) == (1, split.dp * split.cp)
    assert near.dp * near.pp * near.tp == split.chips
    assert near.dp * near.micro_batches * near.micro_batch == split.batch


def test_torchtitan_ep_at_zero_0_is_written_as_fsdp_and_priced() -> None:
    # torchtitan takes EP ranks from data_parallel_shard_degree x CP, never the replicate degree
    options = ClusterOptions(ep=4, cp=1, zero=0)
    plan = make_plan(
        load_model("mixtral-8x7b"), load_profile("h100-8gpu-nodes"), 128, batch=128, cluster=options
    )
    c = plan.cluster
    assert c is not None and (c.ep, c.zero) == (4, 0)
    text = export_plan(plan, "torchtitan", "p.json")
    par = tomllib.loads(text)["parallelism"]
    assert par["data_parallel_replicate_degree"] == 1
    assert par["data_parallel_shard_degree"] == c.dp
    assert par["expert_parallel_degree"] == 4
    assert "torchtitan takes EP 4 from the FSDP ranks" in text
    assert predict(plan, replace(plan_split(plan), zero=3)) in text


@pytest.mark.parametrize("target", ["megatron", "torchtitan", "maxtext", "deepspeed"])
def test_an_fp8_plan_says_its_export_runs_bf16(target: str) -> None:
    # No export writes FP8 flags (the frameworks' recipes are not DeepSeek-V3's): the file says
    # it runs bf16 GeMMs and prices that, rather than let a user run bf16 unknowingly.
    plan = make_plan(
        load_model("gpt3"),
        load_profile("h100-8gpu-nodes"),
        64,
        cluster=ClusterOptions(
            step=StepOptions(precision="fp8", recompute="full")
        ),  # fits in bf16 as well
    )
    assert plan.inputs.precision == "fp8"
    text = export_plan(plan, target, "fp8.json")
    assert "sets no FP8 training flags" in text
    bf16 = predict(plan, replace(plan_split(plan), precision="bf16"))
    assert "not predicted" not in bf16 and bf16 in text
    assert predict(plan, plan_split(plan)) != bf16  # the plan's own split is priced at FP8


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"bytes_per_element": 4}, "fields 'inputs.bytes_per_element/slice_block' differ"),
        ({"profile_hash": "sha256:" + "0" * 64}, "profile 'tpuv4' changed since the plan"),
    ],
    ids=["fp32", "stale-profile"],
)
def test_a_plan_verify_rejects_is_not_exported(
    tmp_path: Path, change: dict[str, object], problem: str
) -> None:
    """An fp32 job was exported from a plan whose element width no longer matched its own
    profile: export re-derives what `verify` does, and refuses in one line."""
    data = json.loads((REPO / "plans" / "gpt3-256.json").read_text(encoding="utf-8"))
    data["inputs"].update(change)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    result = CliRunner().invoke(app, ["export", str(path), "--to", "deepspeed"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"meshtune: error: {path}: ") and problem in result.stderr
    assert len(result.stderr.splitlines()) == 1
