"""Verify a plan by executing it on a virtual mesh at reduced sizes (MeshSlice §3.1, §3.2).

For every FC layer of the plan, :func:`verify_plan` first checks that the plan's recorded
choices are the ones Table 1 gives for its stationary matrix and transposition (the dataflow and
(m, n, k) of each pass, the sharding, the sliced dimension) and that its slice count is legal at
full size (:func:`meshtune.search.slice_counts`). It then runs the three passes with MeshSlice
on the plan's mesh, dataflows, transposition and S, at *reduced* sizes:

    reduced(d) = u_d · min(2, d / u_d)

for each layer dimension d ∈ {tokens, in, out}, where u_d is the least common multiple of the
mesh axes d is sharded over (P_r for a dimension over mesh rows, P_c over mesh columns) and, for
the sliced dimension, also of ``slice_block · lcm(P_r, P_c) · S``. That is the smallest size that
keeps every divisibility the plan relies on, doubled so that shards are not trivially thin.
Each pass multiplies random float64 operands (``np.random.default_rng(seed)``) and is compared
with the dense NumPy product: it passes when ``|got − want| ≤ ATOL + RTOL · |want|``
elementwise. The ring counters of the virtual mesh (counted from the arrays it moved, with
``plan.inputs.bytes_per_element`` bytes per element) must equal
:func:`meshtune.cost.traffic.predicted_traffic` at the same reduced sizes, per physical axis.

Verification proves numerics and traffic volumes, not timing: see ``docs/verify.md``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np

from meshtune.cost.meshslice import MeshAxes
from meshtune.cost.traffic import AxisTraffic, predicted_traffic
from meshtune.dataflow import Dim, GemmOp, LayerDataflow, Stationary, layer_dataflow
from meshtune.errors import VerifyError
from meshtune.executor.algorithms import dense_gemm, operand_shapes, run_gemm
from meshtune.executor.mesh import VirtualMesh
from meshtune.layers import FcLayer
from meshtune.plan import LayerPlan, Plan
from meshtune.search import slice_counts

DEFAULT_MAX_CHIPS = 1024
SIZE_FACTOR = 2
RTOL = 1e-9
ATOL = 1e-9


@dataclass(frozen=True)
class PassCheck:
    """One pass of one layer, executed at reduced (m, n, k)."""

    layer: str
    pass_: str
    dataflow: str
    m: int
    n: int
    k: int
    slices: int
    max_abs_error: float
    numerics_ok: bool
    counted: tuple[AxisTraffic, AxisTraffic]
    predicted: tuple[AxisTraffic, AxisTraffic]

    @property
    def ok(self) -> bool:
        """Numerics within tolerance and counted traffic == predicted on both axes."""
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
    """Every executed pass, plus the layers that could not be executed and why."""

    mesh: MeshAxes
    seed: int
    checks: tuple[PassCheck, ...]
    layer_problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """No layer problem and every pass check passed."""
        return not self.layer_problems and all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        """Every failure, one line each, layer problems first."""
        return [*self.layer_problems, *(f for c in self.checks for f in c.failures())]

    def to_json(self) -> str:
        """The report as pretty JSON (traffic as {launches, steps, bytes_per_link} per axis)."""

        def traffic(pair: tuple[AxisTraffic, AxisTraffic]) -> list[dict[str, int]]:
            return [t._asdict() for t in pair]

        checks = [
            {**asdict(c), "counted": traffic(c.counted), "predicted": traffic(c.predicted)}
            | {"ok": c.ok}
            for c in self.checks
        ]
        data = {
            "ok": self.ok,
            "mesh": {"rows": self.mesh.rows, "cols": self.mesh.cols},
            "seed": self.seed,
            "size_rule": f"u_d · min({SIZE_FACTOR}, d / u_d)",
            "rtol": RTOL,
            "atol": ATOL,
            "checks": checks,
            "layer_problems": list(self.layer_problems),
            "failures": self.failures(),
        }
        return json.dumps(data, indent=2) + "\n"


def _structure_problems(plan: LayerPlan, full: LayerDataflow) -> list[str]:
    """Where the plan's recorded choices differ from Table 1 for its stationary/transposed."""
    where = f"layer {plan.name}"
    problems = []
    for op, recorded in zip(full.ops, plan.passes, strict=True):
        expected = (op.pass_, op.dataflow.value, op.m, op.n, op.k)
        got = (recorded.name, recorded.dataflow, recorded.m, recorded.n, recorded.k)
        if got != expected or plan.dataflows.get(op.pass_) != op.dataflow.value:
            problems.append(
                f"{where} {op.pass_.value}: plan says {recorded.dataflow} "
                f"(m={recorded.m}, n={recorded.n}, k={recorded.k}), Table 1 row "
                f"{plan.stationary}-stn gives {op.dataflow.value} (m={op.m}, n={op.n}, k={op.k})"
            )
    sharding = {t: list(dims) for t, dims in full.sharding.items()}
    if plan.sharding != sharding:
        problems.append(f"{where}: sharding {plan.sharding} is not Table 1's {sharding}")
    if plan.sliced_dim != full.sliced_dim:
        problems.append(f"{where}: sliced_dim {plan.sliced_dim} should be {full.sliced_dim}")
    return problems


def reduced_layer(
    layer: LayerDataflow, mesh: MeshAxes, block: int, slices: int, factor: int = SIZE_FACTOR
) -> FcLayer:
    """``layer.layer`` with tokens / in / out shrunk by the rule of the module docstring.

    The caller guarantees the full sizes are legal (``slice_counts`` accepted ``slices``).
    """
    units: dict[Dim, int] = {"tokens": 1, "in": 1, "out": 1}
    for row_dim, col_dim in layer.sharding.values():
        units[row_dim] = math.lcm(units[row_dim], mesh.rows)
        units[col_dim] = math.lcm(units[col_dim], mesh.cols)
    sliced = layer.sliced_dim
    units[sliced] = math.lcm(units[sliced], block * math.lcm(mesh.rows, mesh.cols) * slices)
    fc = layer.layer
    full: dict[Dim, int] = {"tokens": fc.tokens, "in": fc.in_features, "out": fc.out_features}
    size = {d: units[d] * min(factor, full[d] // units[d]) for d in units}
    return FcLayer(fc.name, size["tokens"], size["in"], size["out"], fc.fed_by)


def _run_pass(
    op: GemmOp,
    layer: str,
    mesh: MeshAxes,
    plan: Plan,
    slices: int,
    rng: np.random.Generator,
) -> PassCheck:
    shape_a, shape_b = operand_shapes(op)
    a = rng.standard_normal(shape_a)
    b = rng.standard_normal(shape_b)
    bpe = plan.inputs.bytes_per_element
    virtual = VirtualMesh(mesh.rows, mesh.cols, bpe)
    got = run_gemm(op, a, b, virtual, slices=slices, block=plan.inputs.slice_block)
    want = dense_gemm(op, a, b)
    counted = tuple(AxisTraffic(*c.as_tuple()) for c in virtual.counters)
    return PassCheck(
        layer=layer,
        pass_=op.pass_.value,
        dataflow=op.dataflow.value,
        m=op.m,
        n=op.n,
        k=op.k,
        slices=slices,
        max_abs_error=float(np.max(np.abs(got - want))),
        numerics_ok=bool(np.allclose(got, want, rtol=RTOL, atol=ATOL)),
        counted=(counted[0], counted[1]),
        predicted=predicted_traffic(op, mesh, bpe, slices),
    )


def verify_plan(plan: Plan, *, seed: int = 0, max_chips: int = DEFAULT_MAX_CHIPS) -> VerifyReport:
    """Execute every layer and pass of ``plan`` at reduced sizes; see the module docstring.

    Raises :class:`VerifyError` when the mesh has more than ``max_chips`` chips (the work grows
    as chips · ring · S). Failed checks do not raise: they are in the returned report.
    """
    mesh = MeshAxes(plan.mesh.rows, plan.mesh.cols)
    if mesh.chips > max_chips:
        raise VerifyError(
            f"mesh {mesh.rows}x{mesh.cols} has {mesh.chips} chips, more than --max-chips "
            f"{max_chips}; verification costs chips × ring × S, raise --max-chips to run it"
        )
    block = plan.inputs.slice_block
    rng = np.random.default_rng(seed)
    checks: list[PassCheck] = []
    problems: list[str] = []
    for layer in plan.layers:
        fc = FcLayer(layer.name, layer.tokens, layer.in_features, layer.out_features, None)
        full = layer_dataflow(fc, Stationary(layer.stationary), layer.transposed)
        found = _structure_problems(layer, full)
        legal, reason = slice_counts(full, mesh, block)
        if reason is not None:
            found.append(reason)
        elif layer.slices not in legal:
            found.append(
                f"layer {layer.name}: slices {layer.slices} is not valid for sliced dimension "
                f"{full.sliced_dim} on {mesh.rows}x{mesh.cols} with block {block} "
                f"(valid: {', '.join(map(str, legal))})"
            )
        if found:
            problems.extend(found)
            continue
        small = layer_dataflow(
            reduced_layer(full, mesh, block, layer.slices), full.stationary, full.transposed
        )
        checks.extend(_run_pass(op, layer.name, mesh, plan, layer.slices, rng) for op in small.ops)
    return VerifyReport(mesh, seed, tuple(checks), tuple(problems))
