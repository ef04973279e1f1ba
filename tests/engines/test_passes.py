"""What the engines run for a plan, without JAX: passes, algorithms, export text, install hint."""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from meshslice_helpers import MESHSLICE, meshslice_pass
from meshtune.algorithms.registry import engine_kernels
from meshtune.catalog import load_profile
from meshtune.cli import app
from meshtune.cli.run import MAX_HOST_DEVICES, ensure_host_devices
from meshtune.cost.config import Config
from meshtune.dataflow import Stationary, layer_dataflow
from meshtune.engines import pick_devices
from meshtune.engines.jax_codegen import export_jax
from meshtune.engines.passes import check_host_memory, layer_algorithm, plan_passes
from meshtune.errors import EngineError
from meshtune.hardware.mesh import Mesh
from meshtune.model.layers import FcLayer
from meshtune.plan import read_plan
from meshtune.verify.run import reduced_layer

PLAN_PATH = Path(__file__).resolve().parents[2] / "plans" / "gpt3-256.json"
PLAN = read_plan(PLAN_PATH.read_text(encoding="utf-8"), str(PLAN_PATH))


def test_layer_algorithm_reads_the_algorithm_and_configuration() -> None:
    layer = PLAN.layers[0]
    assert layer_algorithm(layer) == ("meshslice", Config.of(**layer.config))
    collective = SimpleNamespace(name="qkv", config={"slices": 1}, algorithm="collective")
    assert layer_algorithm(collective) == ("collective", Config.of(slices=1))  # type: ignore[arg-type]
    cannon = SimpleNamespace(name="qkv", config={}, algorithm="cannon")
    assert layer_algorithm(cannon) == ("cannon", Config.of())  # type: ignore[arg-type]
    summa = SimpleNamespace(name="qkv", config={"packets": 2, "slices": 1}, algorithm="summa")
    with pytest.raises(EngineError) as info:
        layer_algorithm(summa)  # type: ignore[arg-type]
    assert str(info.value) == (
        "layer qkv: algorithm 'summa' has no engine implementation; supported: "
        "meshslice, collective, wang, cannon, 1d_tp, fsdp"
    )


def test_plan_passes_at_reduced_and_full_size() -> None:
    profile = load_profile("tpuv4")
    reduced = plan_passes(PLAN, "reduced", profile)
    full = plan_passes(PLAN, "full", profile)
    assert len(reduced) == len(full) == 12
    mesh = Mesh(PLAN.mesh.rows, PLAN.mesh.cols)
    for layer, i in ((PLAN.layers[0], 0), (PLAN.layers[3], 9)):
        fc = FcLayer(layer.name, layer.tokens, layer.in_features, layer.out_features, None)
        df = layer_dataflow(fc, Stationary(layer.stationary), layer.transposed)
        config = Config.of(**layer.config)
        small = reduced_layer(df, MESHSLICE, mesh, config, PLAN.inputs.slice_block)
        assert reduced[i].op == layer_dataflow(small, df.stationary, df.transposed).ops[0]
        assert full[i].op == df.ops[0]
        assert full[i].predicted_s == layer.passes[0].total_s  # the plan's own number
        want = meshslice_pass(reduced[i].op, mesh, profile, config["slices"]).total_s
        assert reduced[i].predicted_s == want
    assert (reduced[0].op.m, reduced[0].op.n, reduced[0].op.k) == (64, 16, 3072)


def test_plan_passes_without_the_plan_profile_predict_nothing(make_profile: object) -> None:
    other = make_profile()  # type: ignore[operator]
    assert all(p.predicted_s is None for p in plan_passes(PLAN, "reduced", other))
    assert all(p.predicted_s is None for p in plan_passes(PLAN, "reduced", None))


def test_plan_passes_refuse_an_illegal_slice_count() -> None:
    layers = [PLAN.layers[0].model_copy(update={"config": {"slices": 5}}), *PLAN.layers[1:]]
    bad = PLAN.model_copy(update={"layers": layers})
    with pytest.raises(
        EngineError,
        match=r"layer qkv: configuration S=5 is not legal for meshslice on 32x8 \(legal: S=1; ",
    ):
        plan_passes(bad)


def test_export_is_a_readable_standalone_module() -> None:
    text = export_jax(PLAN, "plans/gpt3-256.json")
    tree = ast.parse(text)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert imported <= {"__future__", "collections", "typing", "jax", "numpy"}, imported
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    for layer in PLAN.layers:
        for p in ("forward", "backward_data", "backward_weight"):
            assert f"{layer.name}_{p}" in functions
    assert {"make_plan_mesh", "make_gemm", "slice_col", "slice_row"} <= functions
    assert "PLAN_MESH = (32, 8)" in text
    assert "SLICE_BLOCK = 8" in text
    assert (
        "    # mlp_down: X-stationary, not transposed, meshslice with S=6 slices of 'out' "
        "(Algorithm 2,\n    # block 8)\n" in text
    )
    assert '"W": PartitionSpec("axis0", "axis1"),  # stored as (out × in)' in text
    assert 'gemm = _gemm(mesh, "meshslice", "LS", 6, 1, False)' in text
    # the kernels' algorithm table, written out from the registry in place of the library's
    # empty one (which the engine fills on import)
    (table,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "ALGORITHM_FAMILY"
    ]
    assert ast.literal_eval(table) == engine_kernels()
    assert list(ast.literal_eval(table)) == [
        "meshslice",
        "collective",
        "wang",
        "1d_tp",
        "fsdp",
        "cannon",
    ]
    assert "jax_engine fills this table" not in text
    assert "Predicted 5.583 ms per block on tpuv4." in text
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=256" in text


def test_export_cli_writes_the_module(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "plan_jax.py"
    got = runner.invoke(app, ["export", str(PLAN_PATH), "--to", "jax", "-o", str(out)])
    assert got.exit_code == 0, got.output
    assert out.read_text(encoding="utf-8") == export_jax(PLAN, str(PLAN_PATH))
    again = runner.invoke(app, ["export", str(PLAN_PATH), "-o", str(out)])
    assert again.exit_code == 2
    assert "already exists" in again.stderr


def test_run_without_jax_says_how_to_install(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a)
    )
    got = runner.invoke(app, ["run", str(PLAN_PATH), "--engine", "jax"])
    assert got.exit_code == 2
    assert got.stderr == (
        "meshtune: error: the JAX engine needs the jax package: pip install 'meshtune[jax]'\n"
    )


def test_run_bad_inputs_are_one_line(runner: CliRunner, tmp_path: Path) -> None:
    got = runner.invoke(app, ["run", str(tmp_path / "none.json")])
    assert got.exit_code == 2
    assert got.stderr.startswith("meshtune: error: ")
    assert "cannot read" in got.stderr
    got = runner.invoke(app, ["run", str(PLAN_PATH), "--repeat", "0"])
    assert got.exit_code == 2
    assert "--repeat must be between 1 and 10000" in got.stderr
    got = runner.invoke(app, ["run", str(PLAN_PATH), "--seed", "-1"])
    assert got.exit_code == 2
    assert got.stderr == "meshtune: error: --seed must be a non-negative integer, got -1\n"


def test_pick_devices_prefers_the_default_backend() -> None:
    assert pick_devices(["gpu0"] * 4, ["cpu"] * 16, 4) == ["gpu0"] * 4
    assert pick_devices(["gpu0"], ["cpu"] * 16, 16) == ["cpu"] * 16  # one GPU, 16 virtual CPUs
    assert pick_devices(["gpu0"], ["cpu"] * 8, 16) is None


def test_ensure_host_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "jax", raising=False)  # as before JAX starts
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_foo=1")
    ensure_host_devices(256)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=256"
    ensure_host_devices(16)  # a count already set is kept
    assert os.environ["XLA_FLAGS"].endswith("device_count=256")
    monkeypatch.delenv("XLA_FLAGS")
    ensure_host_devices(MAX_HOST_DEVICES + 1)  # absurd meshes get no flag
    assert "XLA_FLAGS" not in os.environ
    monkeypatch.setitem(sys.modules, "jax", sys)  # JAX already started: too late to ask
    ensure_host_devices(16)
    assert "XLA_FLAGS" not in os.environ


def test_full_sizes_that_do_not_fit_the_host_are_refused(runner: CliRunner) -> None:
    check_host_memory(plan_passes(PLAN, "reduced"))
    with pytest.raises(
        EngineError, match=r"layer mlp_up forward \(262144×49152×12288\) needs 124.5 GiB"
    ):
        check_host_memory(plan_passes(PLAN, "full"))
    got = runner.invoke(app, ["run", str(PLAN_PATH), "--size", "full"])
    assert got.exit_code == 2
    assert got.stderr.endswith("more than 8 GiB; run the reduced sizes\n")


def test_wang_and_cannon_plans_give_their_configuration_and_a_timeline() -> None:
    from meshtune.catalog import load_model
    from meshtune.planner.make import make_plan
    from meshtune.timeline.trace import plan_timelines

    profile = load_profile("tpuv4")
    wang = make_plan(load_model("gpt3"), profile, 16, batch=1, algorithm="wang", shapes=["2x8"])
    jobs = plan_passes(wang, "reduced", profile)
    assert {(j.algorithm, j.slices, j.split) for j in jobs} == {
        ("wang", layer.config["slices"], layer.config["split"]) for layer in wang.layers
    }
    cannon = make_plan(load_model("gpt3"), profile, 16, batch=1, algorithm="cannon")
    assert {(j.algorithm, j.slices, j.split) for j in plan_passes(cannon)} == {("cannon", 1, 1)}
    timelines = plan_timelines(cannon, profile)  # every registered algorithm has a task graph
    assert len(timelines) == 3 * len(cannon.layers)
