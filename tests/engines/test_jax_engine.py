"""The JAX engine on virtual CPU devices (issue 9 items 1-3): kernels, `meshtune run`, export.

JAX reads ``XLA_FLAGS`` once, when it starts, and pytest may already have started it, so every
check runs in a fresh process: ``tests/engines/jax_checks.py`` for the kernels and the exported
module, ``python -m meshtune run`` for the command (which sets the flag itself). Skipped with a
reason when jax is not installed (``pip install 'meshtune[jax]'``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from meshtune.calibrate import parse_logs
from meshtune.catalog import load_model, load_profile
from meshtune.engines.jax_codegen import export_jax
from meshtune.planner.make import make_plan

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None,
    reason="jax is not installed: pip install 'meshtune[jax]'",
)

ROOT = Path(__file__).resolve().parents[2]
CHECKS = Path(__file__).with_name("jax_checks.py")
HANG_SECONDS = 1800
"""Hang detector of the JAX child processes (wall clock): half an hour, so that no load on a
shared machine trips it; the tests bound nothing else in time."""
GPT3_256 = ROOT / "plans" / "gpt3-256.json"


def _env(devices: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _python(args: list[str], devices: int | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env=_env(devices),
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
        cwd=ROOT,
    )


def _checks(*args: str, devices: int) -> dict[str, Any]:
    done = _python([str(CHECKS), *args], devices)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["devices"] == devices
    return result


@pytest.fixture(scope="module")
def plan16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GPT-3 with one sequence on a 2x8 mesh: W-stationary, transposed and not, S in {2, 4}."""
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), 16, batch=1, shapes=["2x8"])
    assert {layer.transposed for layer in plan.layers} == {False, True}
    path = tmp_path_factory.mktemp("plans") / "gpt3-16.json"
    path.write_text(plan.to_json(), encoding="utf-8")
    return path


def test_kernels_match_numpy_and_the_executor() -> None:
    """A 2x8 mesh: P_r != P_c, so a transposed GeMM that used the wrong axes would fail."""
    result = _checks("kernels", "2x8", devices=16)
    float32 = result["cases"][:18]  # 3 dataflows × transposed or not × S in {1, 2, 3}
    bfloat16 = result["cases"][18:]
    assert [c["case"] for c in bfloat16] == ["OS bfloat16", "LS bfloat16", "RS bfloat16"]
    for case in bfloat16:
        assert case["dtype"] == "bfloat16"
        assert case["error"] <= case["tolerance"], case
    for case in float32:
        assert case["error"] <= case["tolerance"], case
        assert case["executor_error"] <= case["tolerance"], case
        transposed = "T=True" in case["case"]
        want = "P('axis1', 'axis0')" if transposed else "P('axis0', 'axis1')"
        assert case["sharded"] == want


@pytest.fixture(scope="module")
def algorithm_plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """GPT-3 with one sequence on 16 chips planned with Wang (2x8) and Cannon (4x4)."""
    folder = tmp_path_factory.mktemp("algorithm-plans")
    out = {}
    for name, shape in (("wang", "2x8"), ("cannon", "4x4")):
        plan = make_plan(
            load_model("gpt3"), load_profile("tpuv4"), 16, batch=1, algorithm=name, shapes=[shape]
        )
        assert {layer.algorithm for layer in plan.layers} == {name}
        out[name] = folder / f"gpt3-16-{name}.json"
        out[name].write_text(plan.to_json(), encoding="utf-8")
    return out


def test_kernel_table_is_the_supported_algorithms() -> None:
    import meshtune.engines.jax_engine  # noqa: F401  (fills the kernels' table from the registry)
    from meshtune.algorithms.registry import REGISTRY, engine_kernels
    from meshtune.engines.jax_kernels import ALGORITHM_FAMILY
    from meshtune.engines.passes import SUPPORTED_ALGORITHMS

    assert engine_kernels() == ALGORITHM_FAMILY
    assert set(ALGORITHM_FAMILY) == set(SUPPORTED_ALGORITHMS)
    assert set(SUPPORTED_ALGORITHMS) <= set(REGISTRY)


def test_wang_cannon_1d_tp_and_fsdp_kernels_match_numpy_and_their_executors() -> None:
    result = _checks("algorithms", devices=16)
    cases = result["cases"]
    assert len(cases) == 8 * 6  # 8 configurations × 3 dataflows × transposed or not
    assert {c["case"].split()[0] for c in cases} == {"wang", "1d_tp", "fsdp", "cannon"}
    for case in cases:
        assert case["error"] <= case["tolerance"], case
        assert case["executor_error"] <= case["tolerance"], case
        transposed = "T=True" in case["case"]
        assert case["sharded"] == ("P('axis1', 'axis0')" if transposed else "P('axis0', 'axis1')")


@pytest.mark.parametrize("name", ["wang", "cannon"])
def test_run_command_on_wang_and_cannon_plans(name: str, algorithm_plans: dict[str, Path]) -> None:
    done = _python(
        ["-m", "meshtune", "run", str(algorithm_plans[name]), "--json", "--repeat", "1"], None
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"]
    assert len(report["passes"]) == 12
    assert {p["algorithm"] for p in report["passes"]} == {name}
    assert all(p["measured_s"] > 0 and p["predicted_s"] > 0 for p in report["passes"])


def test_exported_wang_module_matches_numpy(
    algorithm_plans: dict[str, Path], tmp_path: Path
) -> None:
    from meshtune.plan import read_plan

    path = algorithm_plans["wang"]
    text = export_jax(read_plan(path.read_text(), "p"), "p")
    assert "wang (Wang's method) with the P_r (axis0) collective split into shifts" in text
    module = tmp_path / "plan_jax.py"
    module.write_text(text, encoding="utf-8")
    result = _checks("exported", str(path), str(module), devices=16)
    assert result["mesh"] == [2, 8]
    assert len(result["cases"]) == 12
    for case in result["cases"]:
        assert case["flow"], case
        assert case["error"] <= case["tolerance"], case


def test_exported_module_runs_on_16_devices(plan16: Path, tmp_path: Path) -> None:
    from meshtune.plan import read_plan

    module = tmp_path / "plan_jax.py"
    module.write_text(export_jax(read_plan(plan16.read_text(), "p"), "p"), encoding="utf-8")
    result = _checks("exported", str(plan16), str(module), devices=16)
    assert result["mesh"] == [2, 8]
    assert len(result["cases"]) == 12
    for case in result["cases"]:
        assert case["flow"], case
        assert case["error"] <= case["tolerance"], case


def test_run_command_on_16_devices_with_emit_log(plan16: Path, tmp_path: Path) -> None:
    log = tmp_path / "run.csv"
    done = _python(
        ["-m", "meshtune", "run", str(plan16), "--json", "--repeat", "1", "--emit-log", str(log)],
        None,  # the command asks for its own 16 host devices
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"]
    assert (report["devices"], report["mesh"]) == (16, {"rows": 2, "cols": 8})
    assert len(report["passes"]) == 12
    assert all(p["measured_s"] > 0 and p["predicted_s"] > 0 for p in report["passes"])
    parsed = parse_logs([log, tmp_path / "run.gemm.csv"], None)
    ops = {(m.op.value, m.axis, m.ranks) for m in parsed.measurements}
    assert ("all_gather", 1, 8) in ops
    assert ("reduce_scatter", 0, 2) in ops
    assert len({m.shard_bytes for m in parsed.measurements}) >= 3  # the size sweep
    assert parsed.gemms
    assert {g.dtype for g in parsed.gemms} == {"fp32"}


def test_gpt3_256_plan_runs_and_its_export_matches_numpy(tmp_path: Path) -> None:
    done = _python(["-m", "meshtune", "run", str(GPT3_256), "--json", "--repeat", "1"], None)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"]
    assert report["devices"] == 256
    assert len(report["passes"]) == 12
    assert report["programs"] == 3  # one per (algorithm, dataflow, S, split, transposition)
    # The 12 reduced passes are 3 distinct (program, m, n, k): one timing each, shared ...
    assert report["timed"] == 3
    assert len({p["measured_s"] for p in report["passes"]}) == 3
    # ... but every pass is checked on its own operands.
    assert all(p["checked"] for p in report["passes"])
    assert len({p["max_abs_error"] for p in report["passes"]}) == 12
    module = tmp_path / "plan_jax.py"
    exported = _python(["-m", "meshtune", "export", str(GPT3_256), "-o", str(module)], None)
    assert exported.returncode == 0, exported.stderr
    result = _checks("exported", str(GPT3_256), str(module), devices=256)
    assert result["mesh"] == [32, 8]
    assert all(c["error"] <= c["tolerance"] for c in result["cases"])


def test_too_few_devices_is_one_line(tmp_path: Path) -> None:
    done = _python(["-m", "meshtune", "run", str(GPT3_256)], 8)  # XLA_FLAGS already set
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "mesh 32x8 needs 256 devices, JAX sees 8" in lines[0]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port: int = sock.getsockname()[1]
        return port


def test_distributed_run_in_two_processes(plan16: Path) -> None:
    """The multi-host start-up path: two processes of 8 CPU devices each run the 2x8 plan."""
    address = f"localhost:{_free_port()}"
    command = [sys.executable, "-m", "meshtune", "run", str(plan16), "--json", "--repeat", "1"]
    command += ["--distributed", "--coordinator", address, "--num-processes", "2"]
    procs = [
        subprocess.Popen(
            [*command, "--process-id", str(i)],
            env=_env(None),  # each process asks for its own 8 host devices
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for i in (0, 1)
    ]
    outputs = [p.communicate(timeout=HANG_SECONDS) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    report = json.loads(outputs[0][0])
    assert outputs[1][0] == ""  # only process 0 prints
    assert (report["ok"], report["devices"], report["processes"]) == (True, 16, 2)
    assert len(report["passes"]) == 12


def test_distributed_options_are_checked(plan16: Path) -> None:
    done = _python(["-m", "meshtune", "run", str(plan16), "--process-id", "1"], None)
    assert done.returncode == 2
    assert done.stderr == (
        "meshtune: error: --coordinator, --num-processes and --process-id need --distributed\n"
    )


def test_run_without_the_check_times_only(plan16: Path) -> None:
    done = _python(
        ["-m", "meshtune", "run", str(plan16), "--json", "--repeat", "1", "--no-check"], None
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"]
    assert all(not p["checked"] and p["measured_s"] > 0 for p in report["passes"])


def test_a_mesh_beyond_the_host_limit_is_one_line(plan16: Path) -> None:
    """More chips than JAX has and meshtune would start (the limit lowered to 8 here)."""
    program = (
        "import sys; import meshtune.cli.run as r; r.MAX_HOST_DEVICES = 8; "
        "from meshtune.cli import main; sys.argv = ['meshtune', 'run', sys.argv[1]]; main()"
    )
    done = _python(["-c", program, str(plan16)], None)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "meshtune: error: mesh 2x8 needs 16 devices; JAX sees 1 (cpu) and meshtune starts at "
        "most 8 virtual CPU devices: run it where 16 accelerators are (--distributed), or "
        "verify it on the NumPy virtual mesh (meshtune verify)"
    ]
