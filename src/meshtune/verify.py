"""Verify a plan: first that it agrees with itself and its inputs, then by executing it.

:func:`verify_plan` checks, in order (MeshSlice §3.1, §3.2; docs/verify.md says what this proves):

1. *Self-consistency.* Every number is finite and in range; the mesh has ``inputs.chips`` chips
   (and is one of ``inputs.shapes`` when those were given); the layers are exactly the FC layers
   of ``inputs.model`` at ``inputs.batch`` × ``inputs.seq_len`` tokens; every layer names a
   registered algorithm whose phase-1 choice (Table 1 row, transposition, sharding, sliced
   dimension) is the one re-derived from the model; its configuration is one of the legal ones
   on the mesh, and ``config_candidates`` lists exactly those; each pass total is
   ``prologue + (iterations − 1)·steady + epilogue`` and the layer, step and utilization totals
   add up. When the profile named by the plan is found and its content hash matches, every
   recorded time is re-derived with that profile's cost model and must agree to a relative
   1e-9; a profile whose content changed makes the plan stale.
2. *Execution.* Every pass of every layer runs with the layer's algorithm on a NumPy virtual
   mesh of the plan's shape at *reduced* sizes ``reduced(d) = u_d · min(f, d / u_d)``, where
   u_d is the algorithm's size unit for dimension d (the least common multiple of the mesh axes
   d is sharded over and, for a sliced dimension, ``B · lcm(P_r, P_c) · S``): the smallest sizes
   that keep every divisibility the plan relies on, doubled (f = 2) on meshes of at most
   :data:`LARGE_MESH` chips so shards are not trivially thin, and not doubled (f = 1) above,
   where the work grows as chips × ring × iterations. No smaller sizes are legal for 1D TP and
   FSDP (two dimensions sharded over the same ring of P chips give a P × P matrix), and
   doubling only thin shards would double exactly those: docs/verify.md. Passes whose reduced
   GeMM, algorithm, pass and configuration coincide (QKV and MLP-up at large meshes) run once
   and are reported for each layer.
   Each pass multiplies random float64 operands, uniform in [−1, 1)
   (``np.random.default_rng(seed)``), and must match
   dense NumPy within ``ATOL + RTOL · |want|``; the traffic the virtual mesh counted from the
   arrays it moved must equal the traffic the algorithm's cost model predicts at those sizes.

A plan with a ``cluster`` section (:mod:`meshtune.cluster`) is checked the same way at its mesh
level (the mesh has ``inputs.chips / (dp · pp)`` chips, the layers are those of one micro-batch,
padded as the cluster search pads them), and its cluster section must add up (dp × micro-batches
× micro-batch = batch, stage blocks, the step and memory totals, the step utilization, the
memory within the recorded capacity, which must be the profile's) and, when the profile is
found, agree with the cluster cost model re-derived from the re-derived layers.

Problems of step 1 are failures (exit 1 in the CLI); a layer with a problem is not executed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace

import numpy as np

from meshtune.algorithm import Algorithm, Config
from meshtune.algorithms import REGISTRY
from meshtune.cluster import (
    ClusterOptions,
    MeshLevel,
    cluster_candidate,
    mesh_profile,
    padded_block,
    step_flops,
)
from meshtune.cost.schedule import AxisTraffic, Traffic, traffic
from meshtune.dataflow import Dataflow, Dim, GemmOp, LayerDataflow, layer_dataflow, plan_dataflows
from meshtune.errors import MeshtuneError, VerifyError
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.layers import FcLayer, fc_layers
from meshtune.mesh import Mesh
from meshtune.plan import LayerPlan, Plan, layer_plan, step_record
from meshtune.search import MeshResult, flop_utilization, layer_choice
from meshtune.specs import HardwareProfile, load_profile

DEFAULT_MAX_CHIPS = 4096
SIZE_FACTOR = 2
# Above this many chips the reduced sizes are not doubled: every chip already holds at least one
# row and column of each shard, and the work (chips × ring × iterations) stays within seconds.
LARGE_MESH = 1024
RTOL = 1e-9
ATOL = 1e-9
TIME_RTOL = 1e-9
# Result elements compared with the dense product at a time (bounds the comparison's memory).
COMPARE_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class PassCheck:
    """One pass of one layer, executed at reduced (m, n, k)."""

    layer: str
    pass_: str
    algorithm: str
    dataflow: str
    m: int
    n: int
    k: int
    config: str
    max_abs_error: float
    numerics_ok: bool
    counted: Traffic
    predicted: Traffic

    @property
    def ok(self) -> bool:
        """Numerics within tolerance and counted traffic == predicted on every axis."""
        return self.numerics_ok and self.counted == self.predicted

    def failures(self) -> list[str]:
        """One line per failed check, naming layer, pass, axis and both numbers."""
        where = f"layer {self.layer} {self.pass_}"
        out = []
        if not self.numerics_ok:
            out.append(
                f"{where}: max |error| {self.max_abs_error:.3g} exceeds atol {ATOL:g} + "
                f"rtol {RTOL:g}·|dense|"
            )
        for axis, (got, want) in enumerate(zip(self.counted, self.predicted, strict=True)):
            for name, g, w in zip(AxisTraffic._fields, got, want, strict=True):
                if g != w:
                    out.append(f"{where} axis {axis}: counted {name} {g}, predicted {w}")
        return out


@dataclass(frozen=True)
class VerifyReport:
    """The consistency problems found, every executed pass, and notes on what was skipped."""

    mesh: Mesh
    seed: int
    checks: tuple[PassCheck, ...]
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def factor(self) -> int:
        """The size factor f the reduced sizes used on this mesh."""
        return SIZE_FACTOR if self.mesh.chips <= LARGE_MESH else 1

    @property
    def ok(self) -> bool:
        """No consistency problem and every pass check passed."""
        return not self.problems and all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        """Every failure, one line each, consistency problems first."""
        return [*self.problems, *(f for c in self.checks for f in c.failures())]

    def to_json(self) -> str:
        """The report as JSON (traffic as {launches, steps, bytes_per_link} per axis)."""

        def axes(t: Traffic) -> list[dict[str, int]]:
            return [a._asdict() for a in t]

        checks = [
            {**asdict(c), "counted": axes(c.counted), "predicted": axes(c.predicted), "ok": c.ok}
            for c in self.checks
        ]
        data = {
            "ok": self.ok,
            "mesh": {"rows": self.mesh.rows, "cols": self.mesh.cols, "depth": self.mesh.depth},
            "seed": self.seed,
            "size_rule": f"u_d · min({self.factor}, d / u_d)",
            "rtol": RTOL,
            "atol": ATOL,
            "checks": checks,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "failures": self.failures(),
        }
        return json.dumps(data, indent=2) + "\n"


# --------------------------------------------------------------------------- consistency


def _numbers(value: object, path: str) -> Iterator[tuple[str, float]]:
    """Every number in a dumped plan, with its field path."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}[{i}]")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, float(value)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TIME_RTOL, abs_tol=1e-15)


def _range_problems(plan: Plan) -> list[str]:
    """Non-finite or negative numbers, and fractions outside 0 … 1."""
    problems = []
    for path, number in _numbers(plan.model_dump(mode="python"), ""):
        if not math.isfinite(number):
            problems.append(f"field '{path}' is {number}, not a finite number")
        elif number < 0:
            problems.append(f"field '{path}' is negative ({number:g})")
        elif path.endswith("utilization") and number > 1:
            problems.append(f"field '{path}' is {number:g}, above 1 (100 % of peak)")
    return problems


def _mesh_problems(plan: Plan, mesh: Mesh) -> list[str]:
    inputs = plan.inputs
    problems = []
    cluster = plan.cluster
    if cluster is not None and cluster.dp * cluster.pp * mesh.chips != inputs.chips:
        problems.append(
            f"field 'cluster': dp {cluster.dp} × pp {cluster.pp} × mesh {mesh.label} is "
            f"{cluster.dp * cluster.pp * mesh.chips} chips, but inputs.chips is {inputs.chips}"
        )
    elif cluster is None and mesh.chips != inputs.chips:
        problems.append(
            f"field 'mesh': {mesh.label} has {mesh.chips} chips, but inputs.chips is {inputs.chips}"
        )
    if inputs.shapes is not None and mesh.label not in inputs.shapes:
        problems.append(
            f"field 'mesh': {mesh.label} is not one of inputs.shapes ({', '.join(inputs.shapes)})"
        )
    return problems


def _arithmetic_problems(layer: LayerPlan) -> list[str]:
    """Pass totals and the layer total must add up from their own parts."""
    problems = []
    for i, p in enumerate(layer.passes):
        total = p.prologue_s + (p.iterations - 1) * p.steady_s + p.epilogue_s
        if not _close(total, p.total_s):
            problems.append(
                f"field 'layers.{layer.name}.passes[{i}].total_s' is {p.total_s:.6g} s, but "
                f"prologue + (iterations − 1)·steady + epilogue = {total:.6g} s"
            )
    layer_total = sum(p.total_s for p in layer.passes)
    if not _close(layer_total, layer.time_s):
        problems.append(
            f"field 'layers.{layer.name}.time_s' is {layer.time_s:.6g} s, but its passes add up "
            f"to {layer_total:.6g} s"
        )
    return problems


def _compare_records(recorded: LayerPlan, derived: LayerPlan) -> list[str]:
    """Fields of ``recorded`` that differ from the re-derived record (times to 1e-9 relative)."""
    skip = {"config", "config_candidates"}  # checked against the legal configurations
    want = dict(_numbers(derived.model_dump(mode="json", exclude=skip), ""))
    got = dict(_numbers(recorded.model_dump(mode="json", exclude=skip), ""))
    return [
        f"field 'layers.{recorded.name}.{path}' is {got[path]:.6g}, the cost model gives "
        f"{value:.6g}"
        for path, value in want.items()
        if path in got and not _close(got[path], value)
    ]


def _layer_problems(
    layer: LayerPlan, expected: LayerDataflow, mesh: Mesh, block: int
) -> tuple[list[str], Algorithm | None, Config | None]:
    """Phase-1 structure and configuration legality of one layer."""
    where = f"layer {layer.name}"
    algorithm = REGISTRY.get(layer.algorithm)
    if algorithm is None:
        known = ", ".join(REGISTRY)
        return [f"{where}: unknown algorithm '{layer.algorithm}' (known: {known})"], None, None
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
        got = (p.name.value, p.dataflow, p.m, p.n, p.k, layer.dataflows.get(op.pass_))
        want = (op.pass_.value, op.dataflow.value, op.m, op.n, op.k, op.dataflow.value)
        if got != want:
            problems.append(
                f"{where} {op.pass_.value}: plan says {p.dataflow} (m={p.m}, n={p.n}, k={p.k}), "
                f"Table 1 row {expected.stationary.value}-stn gives {op.dataflow.value} "
                f"(m={op.m}, n={op.n}, k={op.k})"
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
    return problems, algorithm, config


def _profile_for(plan: Plan) -> tuple[HardwareProfile | None, str | None]:
    """The plan's profile when it can be found, else a note saying why times are not re-derived."""
    try:
        profile = load_profile(plan.inputs.profile)
    except MeshtuneError:
        return None, f"profile '{plan.inputs.profile}' not found: recorded times not re-derived"
    return profile, None


def consistency_problems(
    plan: Plan, profile: HardwareProfile | None
) -> tuple[list[str], dict[str, tuple[LayerDataflow, Algorithm, Config]]]:
    """Step 1 of the module docstring; returns the problems and the layers fit to execute."""
    inputs = plan.inputs
    mesh = plan.mesh.to_mesh()
    problems = _range_problems(plan) + _mesh_problems(plan, mesh)
    if profile is not None and profile.content_hash() != inputs.profile_hash:
        problems.append(
            f"field 'inputs.profile_hash': profile '{inputs.profile}' changed since the plan was "
            "made (the plan is stale)"
        )
        profile = None
    if profile is not None and (profile.bytes_per_element, profile.slice_block) != (
        inputs.bytes_per_element,
        inputs.slice_block,
    ):
        problems.append("fields 'inputs.bytes_per_element/slice_block' differ from the profile's")
    batch = inputs.batch if plan.cluster is None else plan.cluster.micro_batch
    model_layers = fc_layers(inputs.model, batch, inputs.seq_len)
    names = [fc.name for fc in model_layers]
    if [layer.name for layer in plan.layers] != names:
        problems.append(
            f"field 'layers': the plan has layers {[layer.name for layer in plan.layers]}, the "
            f"model's FC layers are {names}"
        )
    runnable: dict[str, tuple[LayerDataflow, Algorithm, Config]] = {}
    by_name = {layer.name: layer for layer in plan.layers}
    algorithms = {layer.algorithm for layer in plan.layers}
    for requested in sorted(algorithms):
        algorithm = REGISTRY.get(requested)
        mode = algorithm.mode(inputs.dataflow_mode) if algorithm else inputs.dataflow_mode
        block = plan_dataflows(model_layers, mode)
        if plan.cluster is not None and algorithm is not None:
            block, _ = padded_block(block, mesh, algorithm, inputs.slice_block)
        for expected in block.layers:
            layer = by_name.get(expected.layer.name)
            if layer is None or layer.algorithm != requested:
                continue
            sizes = (layer.tokens, layer.in_features, layer.out_features)
            fc = expected.layer
            if sizes != (fc.tokens, fc.in_features, fc.out_features):
                problems.append(
                    f"layer {layer.name}: tokens/in/out {sizes} differ from the model's "
                    f"{(fc.tokens, fc.in_features, fc.out_features)}"
                )
                continue
            found, alg, config = _layer_problems(layer, expected, mesh, inputs.slice_block)
            found += _arithmetic_problems(layer)
            if not found and alg is not None and config is not None and profile is not None:
                costed = profile if plan.cluster is None else mesh_profile(profile, mesh)
                choice = layer_choice(alg, expected, mesh, costed, config)
                derived = layer_plan(choice, alg.name, mesh, profile)
                found += _compare_records(layer, derived)
            problems.extend(found)
            if not found and alg is not None and config is not None:
                runnable[layer.name] = (expected, alg, config)
    problems.extend(_total_problems(plan, profile))
    if plan.cluster is not None:
        problems.extend(cluster_problems(plan, profile, runnable))
    return problems, runnable


def _total_problems(plan: Plan, profile: HardwareProfile | None) -> list[str]:
    blocks = plan.inputs.model.blocks
    total = blocks * sum(layer.time_s for layer in plan.layers)
    flops = blocks * sum(3 * 2 * x.tokens * x.in_features * x.out_features for x in plan.layers)
    problems = []
    if not _close(total, plan.fc_time_s):
        problems.append(
            f"field 'fc_time_s' is {plan.fc_time_s:.6g} s, but blocks × Σ layer time = "
            f"{total:.6g} s"
        )
    if not _close(flops, plan.fc_flops):
        problems.append(f"field 'fc_flops' is {plan.fc_flops:.6g}, the layers give {flops:.6g}")
    if profile is not None and plan.fc_time_s > 0:
        chips = plan.inputs.chips if plan.cluster is None else plan.mesh.to_mesh().chips
        util = flop_utilization(flops, plan.fc_time_s, chips, profile.peak_flops_per_s)
        if not _close(util, plan.utilization):
            problems.append(
                f"field 'utilization' is {plan.utilization:.6g}, the plan's own time gives "
                f"{util:.6g}"
            )
    return problems


def cluster_problems(
    plan: Plan,
    profile: HardwareProfile | None,
    runnable: dict[str, tuple[LayerDataflow, Algorithm, Config]],
) -> list[str]:
    """The ``cluster`` section against itself and, when every layer was re-derived, against
    the cluster cost model (:mod:`meshtune.cluster`)."""
    cluster = plan.cluster
    if cluster is None:
        return []
    inputs = plan.inputs
    model = inputs.model
    problems = []
    if cluster.dp * cluster.micro_batches * cluster.micro_batch != inputs.batch:
        problems.append(
            f"field 'cluster': dp {cluster.dp} × micro_batches {cluster.micro_batches} × "
            f"micro_batch {cluster.micro_batch} is not inputs.batch {inputs.batch}"
        )
    if cluster.stage_blocks != -(-model.blocks // cluster.pp) or cluster.pp > model.blocks:
        problems.append(
            f"field 'cluster.stage_blocks' is {cluster.stage_blocks}, but {model.blocks} blocks "
            f"over {cluster.pp} stages give {-(-model.blocks // cluster.pp)}"
        )
    step = cluster.step
    parts = sum(v for k, v in step.model_dump().items() if k not in ("step_s", "tp_exposed_s"))
    if not _close(parts, step.step_s):
        problems.append(
            f"field 'cluster.step.step_s' is {step.step_s:.6g} s, its parts {parts:.6g}"
        )
    memory = cluster.memory
    terms = [
        v for k, v in memory.model_dump().items() if k not in ("total_bytes", "capacity_bytes")
    ]
    if not _close(sum(terms), memory.total_bytes):
        problems.append("field 'cluster.memory.total_bytes' is not the sum of its terms")
    if profile is not None and memory.capacity_bytes != profile.memory_bytes:
        problems.append(
            f"field 'cluster.memory.capacity_bytes' is {memory.capacity_bytes}, the profile's "
            f"memory_bytes is {profile.memory_bytes}"
        )
    usable = (memory.capacity_bytes or math.inf) * (1 - cluster.headroom)
    if memory.total_bytes > usable:
        problems.append(
            f"field 'cluster.memory.total_bytes' ({memory.total_bytes:.6g}) exceeds the "
            f"capacity less the headroom ({usable:.6g})"
        )
    flops = step_flops(model, inputs.batch, inputs.seq_len)
    if not _close(flops, cluster.flops):
        problems.append(
            f"field 'cluster.flops' is {cluster.flops:.6g}, the model gives {flops:.6g}"
        )
    if profile is not None and step.step_s > 0:
        util = flop_utilization(flops, step.step_s, inputs.chips, profile.peak_flops_per_s)
        if not _close(util, cluster.utilization):
            problems.append(
                f"field 'cluster.utilization' is {cluster.utilization:.6g}, its step gives "
                f"{util:.6g}"
            )
    if profile is None or len(runnable) != len(plan.layers) or not plan.layers:
        return problems
    mesh = plan.mesh.to_mesh()
    algorithm = next(iter(runnable.values()))[1]
    choices = tuple(
        layer_choice(alg, expected, mesh, mesh_profile(profile, mesh), config)
        for expected, alg, config in runnable.values()
    )
    result = MeshResult(algorithm, mesh, choices, None, model.blocks)
    options = ClusterOptions(
        cluster.dp,
        cluster.pp,
        cluster.micro_batches,
        recompute=cluster.recompute,
        zero=cluster.zero,
        vpp=cluster.vpp,
        headroom=cluster.headroom,
        attention=cluster.attention,
    )
    derived = cluster_candidate(
        model,
        profile,
        MeshLevel.of(result, profile.bytes_per_element),
        batch=inputs.batch,
        seq_len=inputs.seq_len,
        dp=cluster.dp,
        pp=cluster.pp,
        micro_batches=cluster.micro_batches,
        options=options,
        vpp=cluster.vpp,
    )
    record = step_record(derived, profile)
    want = {
        **{f"step.{k}": v for k, v in record["step"].model_dump().items()},
        **{k: record[k] for k in ("dp_reduction_s", "padding_waste", "mfu", "hfu")},
        **{f"memory.{k}": v for k, v in record["memory"].model_dump().items() if v is not None},
    }
    got = cluster.model_dump()
    for path, value in want.items():
        head, _, tail = path.partition(".")
        recorded = got[head][tail] if tail else got[head]
        if not _close(recorded, value):
            problems.append(
                f"field 'cluster.{path}' is {recorded:.6g}, the cost model gives {value:.6g}"
            )
    return problems


# --------------------------------------------------------------------------- execution


def reduced_layer(
    layer: LayerDataflow,
    algorithm: Algorithm,
    mesh: Mesh,
    config: Config,
    block: int,
    factor: int | None = None,
) -> FcLayer:
    """``layer.layer`` with tokens / in / out shrunk by the rule of the module docstring.

    ``factor`` defaults to the rule of the module docstring. The caller guarantees the full
    sizes are legal (``configs`` accepted ``config``).
    """
    units = algorithm.size_units(layer, mesh, config, block)
    if factor is None:
        factor = SIZE_FACTOR if mesh.chips <= LARGE_MESH else 1
    fc = layer.layer
    full: dict[Dim, int] = {"tokens": fc.tokens, "in": fc.in_features, "out": fc.out_features}
    size = {d: units[d] * min(factor, full[d] // units[d]) for d in full}
    return FcLayer(fc.name, size["tokens"], size["in"], size["out"], fc.fed_by)


def compare_dense(op: GemmOp, a: np.ndarray, b: np.ndarray, got: np.ndarray) -> tuple[float, bool]:
    """(max |got − want|, whether ``|got − want| ≤ ATOL + RTOL·|want|`` everywhere), where
    want is the dense NumPy product of ``op``; computed over blocks of :data:`COMPARE_ELEMENTS`
    result elements so that neither the dense product nor its temporaries exist whole."""
    rows = max(1, COMPARE_ELEMENTS // max(1, got.shape[1]))
    worst: list[float] = [0.0]
    ok = True
    for start in range(0, got.shape[0], rows):
        part = slice(start, start + rows)
        want = (
            dense_gemm(op, a[:, part], b)
            if op.dataflow is Dataflow.RS
            else dense_gemm(op, a[part], b)
        )
        error = np.abs(got[part] - want)
        worst.append(float(error.max(initial=0.0)))
        ok = ok and bool(np.all(error <= ATOL + RTOL * np.abs(want)))
    return float(np.max(worst)), ok


def run_pass(
    op: GemmOp,
    layer: str,
    algorithm: Algorithm,
    mesh: Mesh,
    config: Config,
    bytes_per_element: int,
    block: int,
    rng: np.random.Generator,
) -> PassCheck:
    """Execute one pass on a fresh virtual mesh and compare with dense NumPy and the model."""
    shape_a, shape_b = op.operand_shapes
    a = rng.uniform(-1.0, 1.0, shape_a)
    b = rng.uniform(-1.0, 1.0, shape_b)
    virtual = VirtualMesh(mesh.rows, mesh.cols, bytes_per_element, mesh.depth)
    got = algorithm.execute(op, a, b, virtual, config, block)
    max_error, numerics_ok = compare_dense(op, a, b, got)
    return PassCheck(
        layer=layer,
        pass_=op.pass_.value,
        algorithm=algorithm.name,
        dataflow=op.dataflow.value,
        m=op.m,
        n=op.n,
        k=op.k,
        config=config.label,
        max_abs_error=max_error,
        numerics_ok=numerics_ok,
        counted=tuple(AxisTraffic(*c.as_tuple()) for c in virtual.counters),
        predicted=traffic(algorithm.comms(op, mesh, config, bytes_per_element)),
    )


def verify_plan(plan: Plan, *, seed: int = 0, max_chips: int = DEFAULT_MAX_CHIPS) -> VerifyReport:
    """Check ``plan`` for consistency, then execute it at reduced sizes (module docstring).

    Raises :class:`VerifyError` when the mesh has more than ``max_chips`` chips or ``seed`` is
    negative. Failed checks do not raise: they are in the returned report.
    """
    mesh = plan.mesh.to_mesh()
    if seed < 0:
        raise VerifyError(f"the seed must be a non-negative integer, got {seed}")
    if max_chips < 1:
        raise VerifyError(f"the chip limit must be a positive integer, got {max_chips}")
    if mesh.chips > max_chips:
        raise VerifyError(
            f"mesh {mesh.label} has {mesh.chips} chips, more than the limit of {max_chips}; "
            "verification work grows as chips × ring × iterations"
        )
    profile, note = _profile_for(plan)
    problems, runnable = consistency_problems(plan, profile)
    block = plan.inputs.slice_block
    bpe = plan.inputs.bytes_per_element
    rng = np.random.default_rng(seed)
    checks: list[PassCheck] = []
    done: dict[tuple[object, ...], PassCheck] = {}
    for name, (expected, algorithm, config) in runnable.items():
        small = reduced_layer(expected, algorithm, mesh, config, block)
        reduced = layer_dataflow(small, expected.stationary, expected.transposed)
        for op in reduced.ops:
            # Layers whose reduced passes coincide (same algorithm, pass, GeMM, configuration)
            # would run the very same check again: it runs once and is reported for each.
            key = (
                algorithm.name,
                op.pass_,
                op.dataflow,
                op.m,
                op.n,
                op.k,
                op.transposed,
                config.label,
            )
            if key not in done:
                done[key] = run_pass(op, name, algorithm, mesh, config, bpe, block, rng)
            checks.append(replace(done[key], layer=name))
    return VerifyReport(mesh, seed, tuple(checks), tuple(problems), (note,) if note else ())
