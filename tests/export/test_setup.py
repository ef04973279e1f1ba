"""``meshtune plan MODEL --from FRAMEWORK FILE`` (issue 15, item 2): each exported file read
back reproduces the plan's split (round trip); keys meshtune does not model are listed; bad
files are one line and exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_plans import CLUSTER, EP_CP, NAMES, plan_named, source
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.errors import SetupFileError
from meshtune.export import READABLE, export_plan, flatyaml, pinned_plan, read_setup
from meshtune.export.common import plan_split
from meshtune.export.flatyaml import read_flat_yaml
from meshtune.export.megatron import moe_args


@pytest.mark.parametrize("target", READABLE)
@pytest.mark.parametrize("name", NAMES)
def test_read_back_gives_the_plans_levels(name: str, target: str) -> None:
    plan = plan_named(name)
    split = plan_split(plan)
    setup = read_setup(target, export_plan(plan, target, source(name)), "x")
    assert setup.tp == split.tp
    assert setup.pp == split.pp
    assert setup.dp in (None, split.dp)
    if target == "maxtext" and split.cols > 1:
        assert (setup.rows, setup.cols) == (split.rows, split.cols)
    assert setup.unused == ()


@pytest.mark.parametrize("target", READABLE)
@pytest.mark.parametrize("name", CLUSTER)
def test_round_trip_reproduces_the_split(name: str, target: str) -> None:
    plan = plan_named(name)
    assert plan.cluster is not None
    setup = read_setup(target, export_plan(plan, target, source(name)), "x")
    inputs = plan.inputs
    pinned = pinned_plan(setup, inputs.model, load_profile(inputs.profile), inputs.chips)
    got, want = pinned.cluster, plan.cluster
    assert got is not None
    assert (got.dp, got.pp, got.micro_batches, got.micro_batch) == (
        want.dp,
        want.pp,
        want.micro_batches,
        want.micro_batch,
    )
    assert pinned.mesh.rows * pinned.mesh.cols == plan.mesh.rows * plan.mesh.cols
    assert pinned.inputs.batch == inputs.batch
    assert pinned.inputs.seq_len == inputs.seq_len
    if target != "deepspeed":  # DeepSpeed's pipeline does not interleave (named in the export)
        assert got.vpp == want.vpp


@pytest.mark.parametrize("target", READABLE)
@pytest.mark.parametrize("name", EP_CP)
def test_round_trip_keeps_ep_and_cp(name: str, target: str) -> None:
    """Megatron-LM, MaxText and torchtitan express EP and CP: read back and pinned, the plan's
    split comes back whole. DeepSpeed states neither in its config: it reads back EP 1 and
    CP 1 (its DP world takes the CP ranks), as the export names."""
    plan = plan_named(name)
    want = plan.cluster
    assert want is not None
    setup = read_setup(target, export_plan(plan, target, source(name)), "x")
    assert setup.unused == ()
    if target == "deepspeed":  # (Mixtral at EP 1 does not fit: the export says to set ep_size)
        assert (setup.ep, setup.cp, setup.tp, setup.pp) == (1, 1, plan_split(plan).tp, want.pp)
        return
    inputs = plan.inputs
    pinned = pinned_plan(setup, inputs.model, load_profile(inputs.profile), inputs.chips)
    got = pinned.cluster
    assert got is not None
    assert pinned.inputs.batch == inputs.batch and pinned.inputs.seq_len == inputs.seq_len
    assert pinned.mesh.rows * pinned.mesh.cols == plan.mesh.rows * plan.mesh.cols
    assert (setup.ep, setup.cp) == (want.ep, want.cp)
    assert (got.dp, got.pp, got.ep, got.cp, got.cp_comm) == (
        want.dp,
        want.pp,
        want.ep,
        want.cp,
        want.cp_comm,
    )
    assert (got.micro_batches, got.micro_batch) == (want.micro_batches, want.micro_batch)


def test_megatron_published_setup() -> None:
    """Narayanan et al. SC'21, GPT-3 175B on 1,024 A100: TP 8 x PP 8, batch 1536 (Table 1)."""
    args = """
    torchrun pretrain_gpt.py \\
      --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 \\
      --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 \\
      --micro-batch-size 1 --global-batch-size 1536 --lr 6.0e-5 --data-path /data/x \\
      --recompute-granularity full --recompute-method uniform  # as in the paper
    """
    setup = read_setup("megatron", args, "args.txt")
    assert (setup.rows, setup.cols, setup.pp) == (8, 1, 8)
    assert (setup.micro_batch, setup.batch, setup.seq_len) == (1, 1536, 2048)
    assert setup.recompute == "full"
    assert setup.unused == ("torchrun", "pretrain_gpt.py", "--lr", "--data-path")
    assert any("--recompute-method uniform" in n for n in setup.notes)


def test_cli_prints_the_gain(tmp_path: Path) -> None:
    plan = plan_named("llama3-70b-1024")
    args = tmp_path / "args.txt"
    args.write_text(export_plan(plan, "megatron", "p") + "--lr 3e-4\n", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "plan",
            "llama3-70b",
            "-n",
            "1024",
            "-p",
            "h100-8gpu-nodes",
            "--from",
            "megatron",
            str(args),
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    c = plan.cluster
    assert c is not None
    tp = plan.mesh.rows * plan.mesh.cols
    assert f"you run DP {c.dp} x PP {c.pp} x TP {tp} (megatron): step" in result.output
    assert f"meshtune's best: DP {c.dp} x PP {c.pp} x TP {plan.mesh.rows}x" in result.output
    assert "x faster" in result.output
    assert "not modelled by meshtune, ignored: --lr" in result.output


@pytest.mark.parametrize(
    ("framework", "text", "message"),
    [
        ("megatron", "--tensor-model-parallel-size $TP", "'$TP' is not a whole number"),
        ("megatron", "--context-parallel-size 2 --cp-comm-type a2a", "is not one of p2p"),
        ("megatron", "--expert-model-parallel-size 3", "EP 3 does not divide DP 256"),
        ("megatron", "--context-parallel-size 3", "not a multiple of TP 1 x PP 1 x CP 3"),
        (
            "torchtitan",
            "[parallelism]\ntensor_parallel_degree = 4\nexpert_parallel_degree = 2\n",
            "shards each expert over the TP group",
        ),
        ("maxtext", "ici_context_usp_ulysses_parallelism: 2\n", "does not model it"),
        ("megatron", "--tensor-model-parallel-size 3", "not a multiple of TP 3"),
        ("megatron", "--micro-batch-size 3 --global-batch-size 128", "not a multiple of DP"),
        ("megatron", "--pp 1 'open", "not a list of arguments"),
        ("torchtitan", "[parallelism\n", "invalid TOML"),
        ("torchtitan", "[parallelism]\ntensor_parallel_degree = 'x'\n", "not a whole number"),
        ("deepspeed", "[1, 2]", "a JSON object, not list"),
        ("deepspeed", '{"zero_optimization": {"stage": 4}}', "not one of 0, 1, 2, 3"),
        ("maxtext", "model:\n  a: 1\n", "nested blocks are not part"),
        ("maxtext", "a: 1\n  b: 2\n", "flat 'key: value'"),
        ("maxtext", "ici_tensor_parallelism: -1\n", "(auto): give the TP and PP sizes"),
        ("maxtext", "remat_policy: 'everything'\n", "is not one of"),
        # regressions of the fuzz test: integers past Python's 4,300-digit conversion limit
        ("torchtitan", f"[parallelism]\npipeline_parallel_degree = {'9' * 5000}\n", "digits"),
        ("maxtext", f"ici_tensor_parallelism: {'9' * 5000}\n", "digits"),
        ("torchtitan", f"[parallelism]\nx = {'[' * 5000}\n", "nested too deep"),
        ("megatron", f"--tensor-model-parallel-size {'9' * 5000}", "not a whole number"),
        ("deepspeed", f'{{"train_batch_size": {"9" * 5000}}}', "out-of-range numbers"),
    ],
)
def test_bad_files_are_one_line(tmp_path: Path, framework: str, text: str, message: str) -> None:
    path = tmp_path / "setup"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["plan", "gpt3", "-n", "256", "--from", framework, str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("meshtune: error: ") and message in lines[-1], result.output


def test_from_refuses_pinned_levels(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("--tensor-model-parallel-size 8\n", encoding="utf-8")
    for pin in (["--dp", "2"], ["--cp", "2"], ["--ep", "1"]):
        result = CliRunner().invoke(
            app, ["plan", "gpt3", "-n", "256", *pin, "--from", "megatron", str(path)]
        )
        assert result.exit_code == 2
        assert "--from pins the split" in result.output


def test_maxtext_auto_fsdp_is_zero_3() -> None:
    """MaxText's defaults shard over an automatic fsdp axis (``ici_fsdp_parallelism: -1``)."""
    setup = read_setup("maxtext", "ici_fsdp_parallelism: -1\nici_tensor_parallelism: 4\n", "c")
    assert (setup.zero, setup.dp, setup.tp) == (3, None, 4)
    assert setup.notes == ("ici_fsdp_parallelism = -1: DP takes the chips TP x PP leave",)


def test_flat_yaml_subset() -> None:
    text = (
        "# MaxText\nbase_emb_dim: 8_192  # comment\nname: 'a # b'\nflag: true\nx: 0.5\n"
        "rules: [\n  ['a', ['b']],  # c\n]\nplain: hello\nempty: {}\n    # an indented comment\n"
    )
    assert read_flat_yaml(text, "c.yml") == {
        "base_emb_dim": 8192,
        "name": "a # b",
        "flag": True,
        "x": 0.5,
        "rules": "[ ['a', ['b']], ]",
        "plain": "hello",
        "empty": "{}",
    }
    with pytest.raises(SetupFileError, match=r"c\.yml:2: key 'a' appears twice"):
        read_flat_yaml("a: 1\na: 2\n", "c.yml")
    with pytest.raises(SetupFileError, match="list of 'r' is not closed"):
        read_flat_yaml("r: [1,\n", "c.yml")


def test_a_long_multi_line_list_is_read_in_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: a list of 200,000 lines (quadratic before: each line copied the text read so
    far, 800k lines took minutes) is read with each line scanned once by the inner helpers and
    joined once; the size alone makes a quadratic reader obvious."""
    lines = 200_000
    text = "ici_tensor_parallelism: 4\nrules: [\n" + "  ['a', 'b'],  # c\n" * lines + "]\n"
    scanned = {"_strip_comment": [0, 0], "_depth": [0, 0]}  # calls, characters

    def spy(name: str) -> object:
        inner = getattr(flatyaml, name)

        def counted(line: str) -> object:
            scanned[name][0] += 1
            scanned[name][1] += len(line)
            return inner(line)

        return counted

    for name in scanned:
        monkeypatch.setattr(flatyaml, name, spy(name))
    values = read_flat_yaml(text, "c.yml")
    assert values["rules"] == "[ " + "['a', 'b'], " * lines + "]"
    assert scanned["_strip_comment"] == [lines + 3, len(text) - lines - 3]
    assert scanned["_depth"][0] == lines + 2
    assert scanned["_depth"][1] <= len(text)


def test_megatron_moe_arguments_and_their_reading() -> None:
    """DeepSeek-V3 (61 blocks, the first 3 dense; 256 routed experts of width 2048, top 8, one
    shared expert): Megatron's MoE options, written and read back as implied by the model."""
    args = moe_args(load_model("deepseek-v3"))
    assert args == [
        "--num-experts 256",
        "--moe-router-topk 8",
        "--moe-ffn-hidden-size 2048",
        "--moe-layer-freq [" + ",".join(["0"] * 3 + ["1"] * 58) + "]",
        "--moe-shared-expert-intermediate-size 2048",
    ]
    text = " ".join(args) + " --expert-model-parallel-size 8 --context-parallel-size 2"
    setup = read_setup("megatron", text + " --cp-comm-type allgather", "a.txt")
    assert (setup.ep, setup.cp, setup.cp_comm, setup.unused) == (8, 2, "all-gather", ())


@pytest.mark.parametrize(
    ("framework", "text"),
    [
        ("maxtext", "ici_context_parallelism: 2\n"),
        ("torchtitan", "[parallelism]\ncontext_parallel_degree = 2\n"),
    ],
)
def test_an_unstated_cp_pass_is_the_frameworks_default(framework: str, text: str) -> None:
    # MaxText's context_parallel_strategy and torchtitan's rotate method default to all-gather
    assert read_setup(framework, text, "c").cp_comm == "all-gather"


@pytest.mark.parametrize(
    ("framework", "text", "message"),
    [
        # a Unicode digit passes str.isdigit() but not int(): refused by every reader
        ("megatron", "--tensor-model-parallel-size ²", "--tensor-model-parallel-size: '²'"),
        ("maxtext", "ici_tensor_parallelism: ²\n", "ici_tensor_parallelism: '²'"),
        ("torchtitan", "[parallelism]\ntensor_parallel_degree = '²'\n", "degree: '²'"),
        ("deepspeed", '{"tensor_parallel": {"autotp_size": "²"}}', "autotp_size: '²'"),
        # a MaxText number without a digit, or one past what a batch can be
        ("maxtext", "per_device_batch_size: .\n", "per_device_batch_size: '.'"),
        ("maxtext", "per_device_batch_size: .e5\n", "per_device_batch_size: '.e5'"),
        ("maxtext", "max_target_length: +.\n", "max_target_length: '+.'"),
        ("maxtext", "per_device_batch_size: 1e308\n", "not a whole number of sequences"),
        ("maxtext", "per_device_batch_size: 1e400\n", "inf is not a finite number"),
        ("maxtext", "per_device_batch_size: 5e-324\n", "not a whole number of sequences"),
        ("maxtext", "ici_tensor_parallelism: -1.0\n", "ici_tensor_parallelism: -1.0"),
        # numbers stated as strings or floats where the format states integers
        ("torchtitan", "[training]\nglobal_batch_size = -1.0\n", "global_batch_size: -1.0"),
        ("torchtitan", "[parallelism]\ndata_parallel_shard_degree = -1.0\n", "-1.0"),
        ("deepspeed", '{"tensor_parallel": {"autotp_size": "8"}}', "autotp_size: '8'"),
        ("deepspeed", '{"zero_optimization": {"stage": 1.0}}', "stage: 1.0 is not one of"),
        ("deepspeed", '{"train_batch_size": 128.0}', "train_batch_size: 128.0"),
        # a local batch that contradicts the global batch and DP (DeepSpeed's rule)
        (
            "torchtitan",
            "[training]\nlocal_batch_size = 3\nglobal_batch_size = 64\n[parallelism]\n"
            "tensor_parallel_degree = 8\npipeline_parallel_degree = 4\n"
            "pipeline_parallel_microbatch_size = 1\n",
            "global batch 64 is not a multiple of DP 8 x local batch size 3",
        ),
    ],
)
def test_numbers_are_the_formats_own(
    tmp_path: Path, framework: str, text: str, message: str
) -> None:
    path = tmp_path / "setup"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["plan", "gpt3", "-n", "256", "--from", framework, str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1, result.output
    assert result.output.startswith("meshtune: error: ") and message in result.output


def test_a_local_batch_with_gradient_accumulation_is_read() -> None:
    text = (
        "[training]\nlocal_batch_size = 4\nglobal_batch_size = 64\n[parallelism]\n"
        "tensor_parallel_degree = 8\npipeline_parallel_degree = 4\n"
        "pipeline_parallel_microbatch_size = 1\n"
    )
    setup = read_setup("torchtitan", text, "t.toml")
    plan = pinned_plan(setup, load_model("gpt3"), load_profile("tpuv4"), 256)
    assert plan.cluster is not None
    assert (plan.cluster.dp, plan.cluster.micro_batches, plan.cluster.micro_batch) == (8, 8, 1)
