"""Verify a plan: first that it agrees with itself and its inputs, then by executing it.

:func:`verify_plan` checks, in order (MeshSlice §3.1, §3.2; docs/verify.md says what this proves):

1. *Self-consistency* (:func:`consistency_problems`; the whole list is in docs/verify.md).
   Every number is finite and in range; the mesh has ``inputs.chips`` chips
   (and is one of ``inputs.shapes`` when those were given); the layers are exactly the FC layers
   of ``inputs.model`` at ``inputs.batch`` × ``inputs.seq_len`` tokens; every layer names a
   registered algorithm whose phase-1 choice (Table 1 row, transposition, sharding, sliced
   dimension) is the one re-derived from the model; its configuration is one of the legal ones
   on the mesh, and ``config_candidates`` lists exactly those; each pass total is
   ``prologue + (iterations − 1)·steady + epilogue`` and the layer, step and utilization totals
   add up; the candidates and the cluster section agree with the plan and the pinned levels.
   When the plan's profile is found (the catalog profile it names, or the file the user
   gives) and its content hash matches, every recorded time, of the chosen mesh and of every
   candidate, is re-derived with that profile's cost model and must agree to a relative
   1e-9; a profile whose content changed makes the plan stale; a plan whose profile is not
   found is *unverified* (a failure when ``strict``).
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

A plan with a ``cluster`` section (:mod:`meshtune.search.levels`) is checked the same way at its
mesh level (the mesh has ``inputs.chips / (dp · pp)`` chips, the layers are those of one
micro-batch, padded as the cluster search pads them), and its cluster section must add up (dp ×
micro-batches × micro-batch = batch, stage blocks, the step and memory totals, the step
utilization, the memory within the recorded capacity, which must be the profile's) and, when the
profile is found, agree with the cluster cost model re-derived from the re-derived layers.

Problems of step 1 are failures (exit 1 in the CLI); a layer with a problem is not executed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

import numpy as np

from meshtune.algorithms.base import Algorithm
from meshtune.catalog import load_profile
from meshtune.cost.compute import at_precision
from meshtune.cost.config import Config
from meshtune.cost.schedule import AxisTraffic, Traffic, traffic
from meshtune.dataflow import Dataflow, Dim, GemmOp, LayerDataflow, layer_dataflow
from meshtune.errors import MeshtuneError, PlanFileError, VerifyError
from meshtune.executor.mesh import VirtualMesh, dense_gemm
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.plan import Plan, read_plan
from meshtune.verify.candidates import candidate_problems
from meshtune.verify.cluster import cluster_problems
from meshtune.verify.consistency import Runnable, mesh_level_problems

DEFAULT_MAX_CHIPS = 4096
SIZE_FACTOR = 2
# Above this many chips the reduced sizes are not doubled: every chip already holds at least one
# row and column of each shard, and the work (chips × ring × iterations) stays within seconds.
LARGE_MESH = 1024
RTOL = 1e-9
ATOL = 1e-9
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
    """The consistency problems found, every executed pass, and notes on what was skipped.

    ``rederived``: the recorded times were re-derived with the plan's profile. A plan whose
    times could not be is *unverified*: never "passed", and a failure when ``strict``.
    """

    mesh: Mesh
    seed: int
    checks: tuple[PassCheck, ...]
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()
    rederived: bool = True
    strict: bool = False

    @property
    def verdict(self) -> str:
        """``passed``, ``unverified`` (times not re-derived, not strict) or ``FAILED``."""
        if not self.ok:
            return "FAILED"
        return "passed" if self.rederived else "unverified"

    @property
    def factor(self) -> int:
        """The size factor f the reduced sizes used on this mesh."""
        return SIZE_FACTOR if self.mesh.chips <= LARGE_MESH else 1

    @property
    def ok(self) -> bool:
        """No consistency problem, every pass check passed and, when ``strict``, the times
        were re-derived."""
        return not self.failures()

    def failures(self) -> list[str]:
        """Every failure, one line each, consistency problems first."""
        unverified = (
            [f"unverified (--strict): {note}" for note in self.notes if self.strict]
            if not self.rederived
            else []
        )
        return [*self.problems, *unverified, *(f for c in self.checks for f in c.failures())]

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
            "verdict": self.verdict,
            "rederived": self.rederived,
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


_STALE = "field 'inputs.profile_hash'"
"""How :func:`profile_for` begins the reason a plan's profile is not its own (a stale plan)."""


def profile_for(
    plan: Plan, profile: HardwareProfile | None = None
) -> tuple[HardwareProfile | None, str | None]:
    """The profile to re-derive ``plan``'s times with, or None and why not.

    ``profile`` is one the user named (``--profile FILE``); else the catalog profile the plan
    names (a catalog name: a plan never names a file). Either must have the plan's content hash.
    """
    if profile is None:
        try:
            profile = load_profile(plan.inputs.profile)
        except MeshtuneError:
            return None, (
                f"profile '{plan.inputs.profile}' is not in the catalog: recorded times not "
                "re-derived (give the profile file with --profile FILE)"
            )
    if profile.content_hash() != plan.inputs.profile_hash:
        return None, (
            f"{_STALE}: profile '{profile.name}' changed since the plan was "
            "made (the plan is stale)"
        )
    return profile, None


def consistency_problems(plan: Plan, profile: HardwareProfile | None) -> tuple[list[str], Runnable]:
    """Step 1 of the module docstring: the problems, and the layers fit to execute.

    Structural checks only when ``profile`` is None (:func:`load_plan`); with the plan's own
    profile, every recorded number is re-derived too (:mod:`meshtune.verify.consistency`,
    :mod:`meshtune.verify.candidates`, :mod:`meshtune.verify.cluster`), the FC layers at the
    plan's precision (:func:`~meshtune.cost.compute.at_precision`).
    """
    fc = None if profile is None else at_precision(profile, plan.inputs.precision)
    problems, runnable = mesh_level_problems(plan, fc)  # the FC GeMMs at the plan's precision
    if not problems:
        problems.extend(candidate_problems(plan, fc))
    problems.extend(cluster_problems(plan, profile, runnable))
    return problems, runnable


def load_plan(text: str, source: str, *, check: bool = True, rederive: bool = False) -> Plan:
    """The one reader of plan files for every command.

    :func:`meshtune.plan.read_plan` (strict types, vocabularies) and, with ``check``, the
    structural checks of :func:`consistency_problems` (cheap: no cost model, no execution),
    so that no command acts on a plan ``verify`` refuses. ``rederive`` adds what ``verify``
    re-derives with the plan's catalog profile (every recorded number, the element width): a
    stale profile is refused; a profile not in the catalog leaves the structural checks, as
    it leaves ``verify`` unverified. Raises :class:`PlanFileError` naming ``source`` and the
    first problem. ``meshtune verify`` reads with ``check=False``: it runs every check itself
    and reports each.
    """
    plan = read_plan(text, source)
    if check:
        problems, _ = consistency_problems(plan, None)  # the structural problem first
        costed, note = profile_for(plan) if rederive and not problems else (None, None)
        if note is not None and note.startswith(_STALE):
            problems.append(note)
        elif costed is not None:
            problems, _ = consistency_problems(plan, costed)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise PlanFileError(
                f"{source}: {problems[0]}{more}; `meshtune verify` lists every problem"
            )
    return plan


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
    return FcLayer(fc.name, size["tokens"], size["in"], size["out"], fc.fed_by, fc.groups)


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


def verify_plan(
    plan: Plan,
    *,
    seed: int = 0,
    max_chips: int = DEFAULT_MAX_CHIPS,
    profile: HardwareProfile | None = None,
    strict: bool = False,
    execute: bool = True,
) -> VerifyReport:
    """Check ``plan`` for consistency, then execute it at reduced sizes (module docstring).

    ``profile``: the plan's profile as a file the user named (else the catalog profile the plan
    names). ``strict``: a plan whose times cannot be re-derived (no such profile) fails.
    ``execute=False`` skips step 2 (the consistency checks alone). Raises
    :class:`VerifyError` when the mesh has more than ``max_chips`` chips or ``seed`` is
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
    costed, note = profile_for(plan, profile)
    problems, runnable = consistency_problems(plan, costed)
    if note is not None and note.startswith(_STALE):
        problems.insert(0, note)  # a stale plan fails; a missing profile leaves it unverified
        note = None
    checks = _execute(plan, mesh, runnable, seed) if execute else []
    return VerifyReport(
        mesh,
        seed,
        tuple(checks),
        tuple(problems),
        (note,) if note else (),
        rederived=costed is not None,
        strict=strict,
    )


def _execute(plan: Plan, mesh: Mesh, runnable: Runnable, seed: int) -> list[PassCheck]:
    """Step 2: every pass of every runnable layer on the virtual mesh."""
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
    return checks
