"""Step 1 of ``meshtune verify``: does a plan agree with itself, its inputs and its profile?

A plan file is shared input (docs/verify.md). :func:`consistency_problems` re-derives what it
can from the plan's own inputs and lists, naming the field, every value that differs:

* without a profile (*structural*, cheap: no cost model is run): numbers finite and in range;
  the mesh's chip count; the layers are the FC layers of ``inputs.model`` with phase 1's
  choices (Table 1 row, transposition, sharding, sliced dimension, formulas, m × n × k), legal
  configurations, totals that add up, the transposes; the requested algorithm is the layers';
  the candidates are ordered, start with (or hold) the chosen mesh and agree with the request;
  the cluster section agrees with the pinned levels, its sums and its candidates;
* with the plan's profile (same content hash): every recorded time, breakdown, utilization and
  memory term, of the chosen mesh and of every candidate, re-priced with the cost model
  (MeshSlice §3.2.2; :mod:`meshtune.hardware.tiers`) to a relative :data:`TIME_RTOL`.

The candidates are checked by :mod:`meshtune.verify.candidates`, the cluster section by
:mod:`meshtune.verify.cluster`; :func:`meshtune.verify.run.load_plan`
is the one reader of plan files, which applies the structural checks of both.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.config import Config
from meshtune.dataflow import BlockDataflow, LayerDataflow, plan_dataflows
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import mesh_profile
from meshtune.model.layers import fc_layers
from meshtune.plan import AUTO, LayerPlan, Plan, plan_numbers
from meshtune.planner.records import layer_plan
from meshtune.search import flop_utilization, layer_choice
from meshtune.search.padding import padded_block

TIME_RTOL = 1e-9
"""Relative tolerance of every re-derived number (and of a utilization's bound of 1)."""

Runnable = dict[str, tuple[LayerDataflow, Algorithm, Config]]


def close(a: float, b: float) -> bool:
    """``a`` and ``b`` agree to :data:`TIME_RTOL` relative: a re-derivation runs the same
    code, so only a sum in another order may differ (by rounding)."""
    return math.isclose(a, b, rel_tol=TIME_RTOL, abs_tol=0.0)


def same_count(a: float, b: float) -> bool:
    """Counts (bytes, FLOPs) agree to half a unit: a relative tolerance would let a byte count
    of 10¹⁰ move by tens of bytes."""
    return abs(a - b) <= 0.5


def _range_problems(plan: Plan) -> list[str]:
    """Non-finite or negative numbers, and utilizations above 1 (beyond rounding)."""
    problems = []
    for path, number in plan_numbers(plan.model_dump(mode="python"), ""):
        if not math.isfinite(number):
            problems.append(f"field '{path}' is {number}, not a finite number")
        elif number < 0:
            problems.append(f"field '{path}' is negative ({number:g})")
        elif path.endswith("utilization") and number > 1 + TIME_RTOL:
            problems.append(f"field '{path}' is {number:g}, above 1 (100 % of peak)")
    return problems


def _mesh_problems(plan: Plan, mesh: Mesh) -> list[str]:
    inputs = plan.inputs
    problems = []
    cluster = plan.cluster
    if cluster is not None and cluster.dp * cluster.pp * cluster.cp * mesh.chips != inputs.chips:
        problems.append(
            f"field 'cluster': dp {cluster.dp} × pp {cluster.pp} × cp {cluster.cp} × mesh "
            f"{mesh.label} is "
            f"{cluster.dp * cluster.pp * cluster.cp * mesh.chips} chips, but inputs.chips is "
            f"{inputs.chips}"
        )
    elif cluster is None and mesh.chips != inputs.chips:
        problems.append(
            f"field 'mesh': {mesh.label} has {mesh.chips} chips, but inputs.chips is {inputs.chips}"
        )
    if inputs.shapes is not None and mesh.label not in inputs.shapes:
        problems.append(
            f"field 'mesh': {mesh.label} is not one of inputs.shapes ({', '.join(inputs.shapes)})"
        )
    if (plan.cluster is None) != (inputs.levels is None):
        problems.append(
            "fields 'cluster' and 'inputs.levels': a plan has both (cluster search) or neither"
        )
    return problems


def _arithmetic_problems(layer: LayerPlan) -> list[str]:
    """Pass totals and the layer total must add up from their own parts."""
    problems = []
    for i, p in enumerate(layer.passes):
        total = p.prologue_s + (p.iterations - 1) * p.steady_s + p.epilogue_s
        if not close(total, p.total_s):
            problems.append(
                f"field 'layers.{layer.name}.passes[{i}].total_s' is {p.total_s:.6g} s, but "
                f"prologue + (iterations − 1)·steady + epilogue = {total:.6g} s"
            )
    layer_total = sum(p.total_s for p in layer.passes)
    if not close(layer_total, layer.time_s):
        problems.append(
            f"field 'layers.{layer.name}.time_s' is {layer.time_s:.6g} s, but its passes add up "
            f"to {layer_total:.6g} s"
        )
    return problems


def _flatten(value: object, path: str) -> dict[str, object]:
    """Every leaf of a dumped record by its path."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(value, list):
        out = {f"{path}.length": len(value)}
        for i, item in enumerate(value):
            out.update(_flatten(item, f"{path}[{i}]"))
        return out
    return {path: value}


def _compare_records(recorded: LayerPlan, derived: LayerPlan) -> list[str]:
    """Every field of ``recorded`` that differs from the re-derived record (numbers to
    :data:`TIME_RTOL` relative, anything else exactly)."""
    if derived.model_copy(update={"config_candidates": recorded.config_candidates}) == recorded:
        return []  # the usual case: the re-derivation runs the same code, bit for bit
    skip = {"config", "config_candidates"}  # checked against the legal configurations
    want = _flatten(derived.model_dump(mode="json", exclude=skip), "")
    got = _flatten(recorded.model_dump(mode="json", exclude=skip), "")
    problems = []
    for path in dict.fromkeys([*want, *got]):
        a, b = got.get(path), want.get(path)
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
        whole = all(isinstance(v, int) for v in (a, b))
        if (numbers and not whole and not close(float(a), float(b))) or (  # type: ignore[arg-type]
            (whole or not numbers) and a != b
        ):
            problems.append(
                f"field 'layers.{recorded.name}.{path}' is {_show(a)}, the cost model gives "
                f"{_show(b)}"
            )
    return problems


def _show(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def _layer_problems(
    layer: LayerPlan, expected: LayerDataflow, mesh: Mesh, block: int
) -> tuple[list[str], Config | None]:
    """Phase-1 structure and configuration legality of one layer."""
    where = f"layer {layer.name}"
    algorithm = REGISTRY[layer.algorithm]
    problems = []
    if len(layer.passes) != 3:
        problems.append(f"{where}: has {len(layer.passes)} passes; a layer has 3")
    recorded = (layer.stationary, layer.transposed, layer.sliced_dim)
    derived = (expected.stationary.value, expected.transposed, expected.sliced_dim)
    if recorded != derived:
        problems.append(
            f"{where}: stationary/transposed/sliced_dim {recorded} differ from phase 1's {derived}"
        )
    for op, p in zip(expected.ops, layer.passes, strict=False):
        got = (p.name.value, p.dataflow, p.m, p.n, p.k, p.formula, layer.dataflows.get(op.pass_))
        want = (op.pass_.value, op.dataflow.value, op.m, op.n, op.k, op.formula, op.dataflow.value)
        if got != want:
            problems.append(
                f"{where} {op.pass_.value}: plan says {p.dataflow} {p.formula} (m={p.m}, "
                f"n={p.n}, k={p.k}), Table 1 row {expected.stationary.value}-stn gives "
                f"{op.dataflow.value} {op.formula} (m={op.m}, n={op.n}, k={op.k})"
            )
    sharding = {t: list(dims) for t, dims in expected.sharding.items()}
    if layer.sharding != sharding:
        problems.append(f"{where}: sharding {layer.sharding} is not Table 1's {sharding}")
    legal, reason = algorithm.configs(expected, mesh, block)
    config = Config.of(**layer.config)
    if reason is not None:
        problems.append(reason)
    elif config not in legal:
        problems.append(
            f"{where}: configuration {config.label} is not legal for {algorithm.name} on "
            f"{mesh.label} (legal: {'; '.join(c.label for c in legal)})"
        )
    elif [Config.of(**c) for c in layer.config_candidates] != list(legal):
        problems.append(f"{where}: config_candidates differ from the legal configurations")
    return problems, config


def phase1_block(
    plan: Plan,
    algorithm: Algorithm,
    mesh: Mesh,
    micro_batch: int,
    cp: int | None = None,
    ep: int | None = None,
) -> BlockDataflow:
    """Phase 1 for ``algorithm`` at ``micro_batch`` sequences (padded on ``mesh`` in a cluster
    plan, as the cluster search pads) of ``seq_len / cp`` tokens, a MoE model's experts
    grouped ``experts / ep`` to a mesh (``cp``, ``ep``: the plan's unless given)."""
    inputs = plan.inputs
    if cp is None:
        cp = plan.cluster.cp if plan.cluster is not None else 1
    if ep is None:
        ep = plan.cluster.ep if plan.cluster is not None else 1
    layers = fc_layers(inputs.model, micro_batch, inputs.seq_len // cp, ep)
    block = plan_dataflows(layers, algorithm.mode(inputs.dataflow_mode))
    if plan.cluster is not None:
        block, _ = padded_block(block, mesh, algorithm, inputs.slice_block)
    return block


def mesh_level_problems(plan: Plan, profile: HardwareProfile | None) -> tuple[list[str], Runnable]:
    """The problems of the module docstring at the mesh level (structural ones only when
    ``profile`` is None) and the layers fit to execute. ``profile`` must be the plan's own (the
    caller checks the content hash)."""
    inputs = plan.inputs
    mesh = plan.mesh.to_mesh()
    problems = _range_problems(plan) + _mesh_problems(plan, mesh)
    if profile is not None and (profile.bytes_per_element, profile.slice_block) != (
        inputs.bytes_per_element,
        inputs.slice_block,
    ):
        problems.append("fields 'inputs.bytes_per_element/slice_block' differ from the profile's")
    batch = inputs.batch if plan.cluster is None else plan.cluster.micro_batch
    names = [fc.name for fc in fc_layers(inputs.model, batch, inputs.seq_len)]
    if [layer.name for layer in plan.layers] != names:
        problems.append(
            f"field 'layers': the plan has layers {[layer.name for layer in plan.layers]}, the "
            f"model's FC layers are {names}"
        )
    algorithms = list(dict.fromkeys(layer.algorithm for layer in plan.layers))
    if len(algorithms) > 1:
        problems.append(f"field 'layers': one mesh runs one algorithm, the plan has {algorithms}")
    if inputs.algorithm != AUTO and algorithms and algorithms != [inputs.algorithm]:
        problems.append(
            f"field 'inputs.algorithm' is '{inputs.algorithm}', but the layers run {algorithms}"
        )
    runnable: Runnable = {}
    by_name: dict[str, LayerPlan] = {layer.name: layer for layer in plan.layers}
    block: BlockDataflow | None = None
    for name in algorithms:
        algorithm = REGISTRY[name]
        block = phase1_block(plan, algorithm, mesh, batch)
        for expected in block.layers:
            layer = by_name.get(expected.layer.name)
            if layer is None or layer.algorithm != name:
                continue
            sizes = (layer.tokens, layer.in_features, layer.out_features)
            fc = expected.layer
            if sizes != (fc.tokens, fc.in_features, fc.out_features):
                problems.append(
                    f"layer {layer.name}: tokens/in/out {sizes} differ from the model's "
                    f"{(fc.tokens, fc.in_features, fc.out_features)}"
                )
                continue
            if layer.groups != fc.groups:
                problems.append(
                    f"layer {layer.name}: groups {layer.groups} differ from the model's "
                    f"{fc.groups} (the experts one mesh holds at the plan's EP)"
                )
                continue
            found, config = _layer_problems(layer, expected, mesh, inputs.slice_block)
            found += _arithmetic_problems(layer)
            if not found and config is not None and profile is not None:
                costed = profile if plan.cluster is None else mesh_profile(profile, mesh)
                choice = layer_choice(algorithm, expected, mesh, costed, config)
                found += _compare_records(layer, layer_plan(choice, name, mesh, profile))
            problems.extend(found)
            if not found and config is not None:
                runnable[layer.name] = (expected, algorithm, config)
    if block is not None and list(plan.transposes) != list(block.transposes):
        problems.append(
            f"field 'transposes' is {plan.transposes}, phase 1 gives {list(block.transposes)}"
        )
    problems.extend(_total_problems(plan, profile))
    return problems, runnable


def _total_problems(plan: Plan, profile: HardwareProfile | None) -> list[str]:
    blocks = plan.inputs.model.blocks
    total = blocks * sum(layer.time_s for layer in plan.layers)
    flops = blocks * sum(
        3 * 2 * x.groups * x.tokens * x.in_features * x.out_features for x in plan.layers
    )
    problems = []
    if not close(total, plan.fc_time_s):
        problems.append(
            f"field 'fc_time_s' is {plan.fc_time_s:.6g} s, but blocks × Σ layer time = "
            f"{total:.6g} s"
        )
    if not same_count(flops, plan.fc_flops):
        problems.append(f"field 'fc_flops' is {plan.fc_flops:.6g}, the layers give {flops:.6g}")
    if profile is not None and plan.fc_time_s > 0:
        util = flop_utilization(
            flops, plan.fc_time_s, plan.mesh.to_mesh().chips, profile.peak_flops_per_s
        )
        if not close(util, plan.utilization):
            problems.append(
                f"field 'utilization' is {plan.utilization:.6g}, the plan's own time gives "
                f"{util:.6g}"
            )
    return problems


def ascending(values: Sequence[float]) -> bool:
    """Whether ``values`` never decrease (beyond :data:`TIME_RTOL`)."""
    return all(a <= b * (1 + TIME_RTOL) for a, b in itertools.pairwise(values))
