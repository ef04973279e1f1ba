"""What an engine runs for a plan: every layer pass with its algorithm, size and slice count.

Engine-independent (no JAX): the JAX engine, the exported module and the timeline all start from
:func:`plan_passes`. The sizes are the plan's (``full``) or the reduced sizes of ``meshtune
verify`` (:func:`meshtune.verify.run.reduced_layer`: the smallest sizes that keep every
divisibility the plan relies on). A pass's predicted time comes from the layer's registered
algorithm's cost model (§3.2.2) at the size run, when the plan's profile is at hand. A grouped
layer's pass (a mesh's experts, :class:`~meshtune.model.layers.FcLayer`) is run and predicted as
one GeMM of its group.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from meshtune.algorithms.registry import engine_names
from meshtune.cost.config import Config
from meshtune.dataflow import GemmOp, layer_dataflow
from meshtune.errors import EngineError
from meshtune.hardware.profile import HardwareProfile
from meshtune.plan import LayerPlan, Plan, recorded_layer
from meshtune.verify.run import reduced_layer

Size = Literal["reduced", "full"]

# The registered algorithms the JAX kernels implement: those with a kernel family
# (``Algorithm.kernel``, the table ``jax_kernels.ALGORITHM_FAMILY`` is filled with). The registry
# says it JAX-free, so that plans are checked without importing JAX.
SUPPORTED_ALGORITHMS = engine_names()


def layer_algorithm(layer: LayerPlan) -> tuple[str, Config]:
    """(algorithm name, configuration) of a plan layer, if an engine implements it.

    Raises :class:`EngineError` for an algorithm the engines do not implement.
    """
    if layer.algorithm not in SUPPORTED_ALGORITHMS:
        raise EngineError(
            f"layer {layer.name}: algorithm '{layer.algorithm}' has no engine implementation; "
            f"supported: {', '.join(SUPPORTED_ALGORITHMS)}"
        )
    return layer.algorithm, Config.of(**layer.config)


@dataclass(frozen=True)
class LayerPass:
    """One GeMM to run: a layer's forward, backward-data or backward-weight pass."""

    layer: str
    algorithm: str
    slices: int  # MeshSlice's slices / Wang's unrolled iterations; 1 for Cannon (no knob)
    stationary: str
    op: GemmOp
    predicted_s: float | None
    split: int = 1  # Wang's split ring (1: P_r, 2: P_c); 1 for the algorithms without it


def plan_passes(
    plan: Plan, size: Size = "reduced", profile: HardwareProfile | None = None
) -> list[LayerPass]:
    """Every pass of every layer of ``plan`` at ``size`` (see the module docstring).

    ``profile`` gives the predicted times; it must be the plan's own (same content hash), else
    the predictions are ``None``. Raises :class:`EngineError` when a layer's slice count is not
    valid on the plan's mesh or its algorithm is not supported.
    """
    mesh = plan.mesh.to_mesh()
    block = plan.inputs.slice_block
    if profile is not None and profile.content_hash() != plan.inputs.profile_hash:
        profile = None
    out: list[LayerPass] = []
    for layer in plan.layers:
        name, _ = layer_algorithm(layer)
        algorithm, config, full = recorded_layer(plan, layer, EngineError)
        slices = config.get("slices", 1)
        chosen = full
        if size == "reduced":
            small = reduced_layer(full, algorithm, mesh, config, block)
            chosen = layer_dataflow(small, full.stationary, full.transposed)
        for op in chosen.ops:
            one = replace(op, groups=1)  # the engine runs one GeMM of a grouped layer
            predicted = (
                algorithm.cost(one, mesh, profile, config).total_s if profile is not None else None
            )
            out.append(
                LayerPass(
                    layer.name,
                    name,
                    slices,
                    layer.stationary,
                    one,
                    predicted,
                    config.get("split", 1),
                )
            )
    return out


MAX_HOST_BYTES = 8 * 1024**3  # the dense operands and result of one pass, checked in float64


def check_host_memory(passes: list[LayerPass], limit: int = MAX_HOST_BYTES) -> None:
    """Refuse passes whose dense A, B and C in float64 (the NumPy check) exceed ``limit`` bytes.

    Raises :class:`EngineError` naming the largest pass and its size.
    """
    if not passes:
        return
    largest = max(passes, key=lambda p: p.op.m * p.op.k + p.op.k * p.op.n + p.op.m * p.op.n)
    op = largest.op
    need = 8 * (op.m * op.k + op.k * op.n + op.m * op.n)
    if need > limit:
        raise EngineError(
            f"layer {largest.layer} {op.pass_.value} ({op.m}×{op.n}×{op.k}) needs "
            f"{need / 1024**3:.1f} GiB on the host for its NumPy check, more than "
            f"{limit / 1024**3:.0f} GiB; run the reduced sizes"
        )
