"""What an engine runs for a plan: every layer pass with its algorithm, size and slice count.

Engine-independent (no JAX): the JAX engine, the exported module and the timeline all start from
:func:`plan_passes`. The sizes are the plan's (``full``) or the reduced sizes of ``meshtune
verify`` (:func:`meshtune.executor.verify.reduced_layer`: the smallest sizes that keep every
divisibility the plan relies on, doubled). A pass's predicted time comes from the MeshSlice cost
model (§3.2.2) at the size run, when the plan's profile is at hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from meshtune.cost.meshslice import MeshAxes, meshslice_pass
from meshtune.dataflow import GemmOp, Stationary, layer_dataflow
from meshtune.errors import EngineError
from meshtune.executor.verify import reduced_layer
from meshtune.layers import FcLayer
from meshtune.plan import LayerPlan, Plan
from meshtune.search import slice_counts
from meshtune.specs import HardwareProfile

Size = Literal["reduced", "full"]

SUPPORTED_ALGORITHMS = ("meshslice", "collective")


def layer_algorithm(layer: LayerPlan) -> tuple[str, int]:
    """(algorithm name, slice count S) of a plan layer; the one place that reads the algorithm.

    Plans of schema version 1 have no per-layer algorithm: they are MeshSlice. Collective is
    MeshSlice with S = 1 (Figure 2b). Raises :class:`EngineError` for any other algorithm.
    """
    name = str(getattr(layer, "algorithm", "meshslice"))
    if name not in SUPPORTED_ALGORITHMS:
        raise EngineError(
            f"layer {layer.name}: algorithm '{name}' has no engine implementation; supported: "
            f"{', '.join(SUPPORTED_ALGORITHMS)}"
        )
    return name, 1 if name == "collective" else layer.slices


@dataclass(frozen=True)
class LayerPass:
    """One GeMM to run: a layer's forward, backward-data or backward-weight pass."""

    layer: str
    algorithm: str
    slices: int
    stationary: str
    op: GemmOp
    predicted_s: float | None


def plan_passes(
    plan: Plan, size: Size = "reduced", profile: HardwareProfile | None = None
) -> list[LayerPass]:
    """Every pass of every layer of ``plan`` at ``size`` (see the module docstring).

    ``profile`` gives the predicted times; it must be the plan's own (same content hash), else
    the predictions are ``None``. Raises :class:`EngineError` when a layer's slice count is not
    valid on the plan's mesh or its algorithm is not supported.
    """
    mesh = MeshAxes(plan.mesh.rows, plan.mesh.cols)
    block = plan.inputs.slice_block
    if profile is not None and profile.content_hash() != plan.inputs.profile_hash:
        profile = None
    out: list[LayerPass] = []
    for layer in plan.layers:
        algorithm, slices = layer_algorithm(layer)
        fc = FcLayer(layer.name, layer.tokens, layer.in_features, layer.out_features, None)
        full = layer_dataflow(fc, Stationary(layer.stationary), layer.transposed)
        legal, reason = slice_counts(full, mesh, block)
        if reason is not None or slices not in legal:
            raise EngineError(
                reason
                or f"layer {layer.name}: slices {slices} is not valid on {mesh.rows}x{mesh.cols} "
                f"(valid: {', '.join(map(str, legal))})"
            )
        chosen = full
        if size == "reduced":
            small = reduced_layer(full, mesh, block, slices)
            chosen = layer_dataflow(small, full.stationary, full.transposed)
        for op in chosen.ops:
            predicted = (
                meshslice_pass(op, mesh, profile, slices).total_s if profile is not None else None
            )
            out.append(LayerPass(layer.name, algorithm, slices, layer.stationary, op, predicted))
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
