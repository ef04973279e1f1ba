"""JAX engine checks that must run in a fresh process (XLA_FLAGS is read when JAX starts).

Run as ``python tests/engines/jax_checks.py MODE ARGS...``; prints one JSON object on stdout.
The pytest side (test_jax_engine.py) starts it with the device count in ``XLA_FLAGS``.

* ``kernels ROWSxCOLS``: every dataflow × transposition × S ∈ {1, 2, 3} of
  ``make_gemm`` against the registry's MeshSlice executor and dense NumPy, at sizes that keep
  Algorithm 2's divisibility on the mesh.
* ``algorithms``: Wang (2x8, 8x2 and 16x1, both ``split`` rings, S = 1, p or between), 1D TP
  and FSDP (16x1), Cannon (4x4), every dataflow × transposition, against dense NumPy and the
  registry's executor of the same algorithm and configuration.
* ``exported PLAN MODULE``: imports the exported module and runs every pass function at the
  plan's reduced sizes against dense NumPy.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.config import Config
from meshtune.dataflow import Dataflow, GemmOp, Pass
from meshtune.engines.jax_engine import TOLERANCE
from meshtune.engines.jax_kernels import make_gemm, make_mesh, operand_sharding
from meshtune.engines.passes import plan_passes
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.plan import read_plan

BLOCK = 8


def _operands(op: GemmOp, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    shape_a, shape_b = op.operand_shapes
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    return a, b


def kernels(shape: str) -> dict[str, Any]:
    rows, cols = map(int, shape.split("x"))
    mesh = make_mesh(rows, cols)
    rng = np.random.default_rng(1)
    cases = []
    for flow in Dataflow:
        for transposed in (False, True):
            for slices in (1, 2, 3):
                unit = math.lcm(rows, cols)
                sliced = BLOCK * unit * slices
                dims = {"m": 2 * unit, "n": unit, "k": 2 * unit}
                dims[{"OS": "k", "LS": "n", "RS": "m"}[flow.value]] = sliced
                op = GemmOp(Pass.FORWARD, flow, dims["m"], dims["n"], dims["k"], transposed, "")
                a, b = _operands(op, rng)
                sharding = operand_sharding(mesh, transposed)
                gemm = make_gemm(
                    mesh, flow.value, slices=slices, block=BLOCK, transposed=transposed
                )
                out = gemm(jax.device_put(a, sharding), jax.device_put(b, sharding))
                got = np.asarray(out)
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                want = dense_gemm(op, a64, b64)
                executor = REGISTRY["meshslice"].execute(
                    op, a64, b64, VirtualMesh(rows, cols, 4), Config.of(slices=slices), BLOCK
                )
                cases.append(
                    {
                        "case": f"{flow.value} T={transposed} S={slices}",
                        "error": float(np.max(np.abs(got - want))),
                        "executor_error": float(np.max(np.abs(got - executor))),
                        "tolerance": TOLERANCE["float32"] * math.sqrt(op.k),
                        "sharded": str(out.sharding.spec),
                    }
                )
    for flow in Dataflow:  # bfloat16 operands: one case per dataflow
        unit = math.lcm(rows, cols)
        op = GemmOp(
            Pass.FORWARD, flow, 2 * BLOCK * unit, 2 * BLOCK * unit, 2 * BLOCK * unit, True, ""
        )
        a, b = _operands(op, rng)
        a16, b16 = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
        sharding = operand_sharding(mesh, True)
        gemm = make_gemm(mesh, flow.value, slices=2, block=BLOCK, transposed=True)
        out = gemm(jax.device_put(a16, sharding), jax.device_put(b16, sharding))
        want = dense_gemm(op, a16.astype(np.float64), b16.astype(np.float64))
        cases.append(
            {
                "case": f"{flow.value} bfloat16",
                "dtype": str(out.dtype),
                "error": float(np.max(np.abs(np.asarray(out, dtype=np.float64) - want))),
                "tolerance": TOLERANCE["bfloat16"] * math.sqrt(op.k),
            }
        )
    return {"devices": jax.device_count(), "cases": cases}


def _algorithm_cases() -> list[tuple[str, int, int, Config]]:
    """(algorithm, P_r, P_c, configuration) of every kernel case: each Wang ring of both
    rectangles split, unrolled to one iteration, to one step per iteration (S = p) and to
    iterations of several steps (1 < S < p)."""
    wang = [
        (2, 8, 1, 2),
        (2, 8, 2, 2),
        (8, 2, 1, 8),
        (8, 2, 2, 1),
        (16, 1, 1, 1),
    ]
    out = [("wang", r, c, Config.of(split=split, slices=s)) for r, c, split, s in wang]
    out += [("1d_tp", 16, 1, Config.of(split=1, slices=4))]
    out += [("fsdp", 16, 1, Config.of(split=1, slices=16))]
    return [*out, ("cannon", 4, 4, Config.of())]


def algorithms() -> dict[str, Any]:
    rng = np.random.default_rng(3)
    unit = 16  # m, n and k are multiples of every ring and chunk count above
    cases = []
    for name, rows, cols, config in _algorithm_cases():
        mesh = make_mesh(rows, cols)
        for flow in Dataflow:
            for transposed in (False, True):
                op = GemmOp(Pass.FORWARD, flow, 2 * unit, unit, 3 * unit, transposed, "")
                a, b = _operands(op, rng)
                sharding = operand_sharding(mesh, transposed)
                gemm = make_gemm(
                    mesh,
                    flow.value,
                    slices=config.get("slices", 1),
                    block=BLOCK,
                    transposed=transposed,
                    algorithm=name,
                    split=config.get("split", 1),
                )
                out = gemm(jax.device_put(a, sharding), jax.device_put(b, sharding))
                got = np.asarray(out)
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                executor = REGISTRY[name].execute(
                    op, a64, b64, VirtualMesh(rows, cols, 4), config, BLOCK
                )
                cases.append(
                    {
                        "case": f"{name} {rows}x{cols} {config.label} {flow.value} T={transposed}",
                        "error": float(np.max(np.abs(got - dense_gemm(op, a64, b64)))),
                        "executor_error": float(np.max(np.abs(got - executor))),
                        "tolerance": TOLERANCE["float32"] * math.sqrt(op.k),
                        "sharded": str(out.sharding.spec),
                    }
                )
    return {"devices": jax.device_count(), "cases": cases}


def exported(plan_path: str, module_path: str) -> dict[str, Any]:
    plan = read_plan(Path(plan_path).read_text(encoding="utf-8"), plan_path)
    spec = importlib.util.spec_from_file_location("plan_jax", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mesh = module.make_plan_mesh()
    rng = np.random.default_rng(2)
    cases = []
    for job in plan_passes(plan, "reduced"):
        op = job.op
        name = f"{job.layer}_{op.pass_.value}"
        function, flow, transposed = module.PASSES[name]
        a, b = _operands(op, rng)
        sharding = module.operand_sharding(mesh, transposed)
        got = np.asarray(function(mesh, jax.device_put(a, sharding), jax.device_put(b, sharding)))
        want = dense_gemm(op, a.astype(np.float64), b.astype(np.float64))
        cases.append(
            {
                "case": name,
                "flow": flow == op.dataflow.value and transposed == op.transposed,
                "error": float(np.max(np.abs(got - want))),
                "tolerance": TOLERANCE["float32"] * math.sqrt(op.k),
            }
        )
    return {"devices": jax.device_count(), "mesh": list(module.PLAN_MESH), "cases": cases}


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    modes = {"kernels": kernels, "algorithms": algorithms, "exported": exported}
    result = modes[mode](*args)
    print(json.dumps(result))
