"""PrimePar's spatial-temporal primitive on a 2^k × 2^k mesh (Wang et al., ASPLOS 2024 [33],
slides "Novel Spatial-temporal Tensor Partition Primitive"; MeshSlice §7).

P = 2^k chips per side, chip (r, c), temporal index t = 0 … P − 1. For the training GeMMs of
``O = I·W`` (the slides name I [M × N], W [N × K], O [M × K]; all indices mod P, δ = 1 at
t = P − 1 and 0 before) chip (r, c) works at step t on the blocks of the slides' dimension slice
indices (DSIs):

==============  =====================  ===================  ===============================
pass            I_M                    I_N                  I_K
==============  =====================  ===================  ===============================
forward         r                      r + c + t            c
backward data   r                      r + c − 1            c + t
gradient (dW)   r + t                  r + c − 1 + δ        c − 1 + δ
==============  =====================  ===================  ===============================

The summed-over index takes every value as t runs (no all-reduce) and no two chips hold the same
block at one step (no replication). Blocks move by point-to-point send-recv ring shifts,
overlapped with the step's GeMM (:func:`meshtune.cost.schedule.stage`, the profile's
``send_recv`` parameters):

* forward (OS, O stays): I from the right, W from below; the last step moves nothing;
* backward data (LS ``dI = dO·Wᵀ``, dI stays): dO from the right, W from the top right; after
  the last step W returns home from the right (the slides' "W alignment" for the next forward);
* gradient (RS ``dW = Iᵀ·dO``, dW accumulates): I from the bottom left and dO from below, except
  into the last step: I from below and dO from the bottom right; the running dW moves in from
  the right during the last step (the slides' "shifted accumulated dW") and lands in W's home
  layout, so the optimizer's update is local.

**No re-layout between phases** (the slides' continuity): the forward's last step holds W where
backward data starts (I_N = r + c − 1, I_K = c) and I where the gradient starts; backward data's
last step holds dO where the gradient starts. W's home layout (I_N = r + c, I_K = c) is a
persistent parameter layout, chosen once.

**The diagonal shift** ("from the top right", "from the bottom left", "from the bottom right"):
meshtune's machines are 2D tori with an axis-0 and an axis-1 ring and no diagonal links (the
slides' GPU clusters are switched, where a diagonal neighbour is one transfer). A diagonal shift
is therefore two send-recv hops, one on each axis, the second waiting for the first: it is
priced as ``stage(g, first hops, then=second hop)``. In every stage the straight shift shares
an axis (and direction) with the diagonal's second hop, so the rounds are {diagonal's other-axis
hop ∥ straight shift}, then {diagonal's same-axis hop}.

**Between layers** (the slides' inter-operator redistribution, charged in their cost model):
O and dO live in the natural layout (chip (r, c) holds block (r, c)), but the forward needs I
skewed (I_N = r + c) and backward data leaves dI skewed (I_N = r + c − 1). The forward's
prologue skews I along the rows and backward data's epilogue unskews dI, each ⌊P / 2⌋
send-recv shifts on the busiest ring (Cannon's skew, MeshSlice §2.3.2, every ring the shorter
way round, :func:`meshtune.cost.schedule.skew_shifts`); neither overlaps a GeMM.

With e bytes per element, the logical P × P mesh of the GeMM (transposed Table 1 rows swap the
physical axes), g = gemm(m/P, n/P, k/P) and shards A = m·k/P² (OS, LS) or k·m/P² (RS),
B = k·n/P² or n·k/P², C = m·n/P² elements, a pass is ``before``, ``repeats`` identical
stages, the ``tail`` stages and ``after``:

* OS: before = skew of A (⌊P / 2⌋ shifts); P − 1 × stage(g, A ∥ B); tail = g.
* LS: P − 1 × stage(g, A ∥ B's axis-0 hop, then B's axis-1 hop); tail = stage(g, B home);
  after = unskew of C (⌊P / 2⌋ shifts).
* RS: P − 2 × stage(g, A's axis-1 hop ∥ B, then A's axis-0 hop); tail = stage(g, A ∥ B's
  axis-1 hop, then B's axis-0 hop), stage(g, C from the right).

``prologue = parallel(before)``, ``steady`` = one repeated stage, ``iterations = repeats + 1``,
``epilogue = Σ tail + parallel(after)``, compute = P·g. A 1 × 1 mesh runs one GeMM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshtune.cost.compute import gemm_time
from meshtune.cost.config import Candidates, Config
from meshtune.cost.meshslice import sharding_problem, sharding_units
from meshtune.cost.schedule import (
    Comm,
    PassCost,
    comm_time,
    parallel_time,
    repeated,
    shift,
    skew_shifts,
    stage,
)
from meshtune.dataflow import Dataflow, Dim, GemmOp, LayerDataflow, Stationary
from meshtune.hardware.mesh import Mesh, check_chips
from meshtune.hardware.profile import HardwareProfile


def primepar_problem(mesh: Mesh) -> str | None:
    """The primitive runs on 2^k × 2^k chips only (the slides: "regard 2^{2k} devices as a
    square")."""
    side = mesh.rows
    if mesh.depth != 1 or mesh.cols != side or side & (side - 1):
        return f"primepar needs a 2^k × 2^k mesh, got {mesh.label}"
    return None


def primepar_meshes(chips: int) -> tuple[Mesh, ...]:
    """The one legal mesh for ``chips``: 2^k × 2^k when ``chips`` is 4^k, else none."""
    check_chips(chips)
    side = math.isqrt(chips)
    mesh = Mesh(side, side)
    return (mesh,) if side * side == chips and primepar_problem(mesh) is None else ()


def primepar_configs(layer: LayerDataflow, mesh: Mesh, block: int) -> Candidates:
    """One configuration (no knobs) for the Y-stationary row on a 2^k × 2^k mesh whose shards
    divide. The slides define the forward (OS), backward-data (LS) and gradient (RS) passes of
    ``O = I·W``: the Y-stationary row of Table 1, which the registry forces."""
    problem = primepar_problem(mesh)
    if problem is None and layer.stationary is not Stationary.Y:
        problem = (
            f"layer {layer.layer.name}: primepar defines the Y-stationary row of Table 1 only "
            f"(forward OS, backward data LS, backward weight RS), got "
            f"{layer.stationary.value}-stationary"
        )
    problem = problem or sharding_problem(layer, mesh)
    return ((), problem) if problem is not None else ((Config.of(),), None)


def primepar_units(layer: LayerDataflow, mesh: Mesh, config: Config, block: int) -> dict[Dim, int]:
    """Sharding units only."""
    return sharding_units(layer, mesh)


Stage = tuple[list[Comm], list[Comm]]
"""Beside one GeMM: the first hops, then the hops that wait for them."""


@dataclass(frozen=True)
class _Schedule:
    """One pass: ``before``, ``repeats`` × ``steady``, the ``tail`` stages, ``after``."""

    p: int
    before: list[Comm]
    steady: Stage
    repeats: int
    tail: list[Stage]
    after: list[Comm]

    def comms(self) -> list[Comm]:
        """Every shift of the pass, in order (the repeated ones as counts)."""
        steady = repeated(self.steady[0] + self.steady[1], self.repeats)
        tail = [c for first, then in self.tail for c in first + then]
        return self.before + steady + tail + self.after


def _schedule(op: GemmOp, mesh: Mesh, e: int) -> _Schedule:
    """The shifts of ``op`` (see the module docstring)."""
    problem = primepar_problem(mesh)
    if problem is not None:
        raise ValueError(problem)
    (p, row_axis), (_, col_axis) = mesh.logical(op.transposed)
    if p == 1:
        return _Schedule(1, [], ([], []), 0, [([], [])], [])
    per = p * p
    m, n, k = op.m, op.n, op.k
    if op.dataflow is Dataflow.OS:
        a = shift(col_axis, p, m * k / per * e)  # I from the right
        b = shift(row_axis, p, k * n / per * e)  # W from below
        return _Schedule(p, skew_shifts(a, p), (a + b, []), p - 1, [([], [])], [])
    if op.dataflow is Dataflow.LS:
        a = shift(col_axis, p, m * k / per * e)  # dO from the right
        b_down = shift(row_axis, p, n * k / per * e)  # W from the top right: down, then left
        b_left = shift(col_axis, p, n * k / per * e)
        c = shift(col_axis, p, m * n / per * e)  # dI unskew
        return _Schedule(p, [], (a + b_down, b_left), p - 1, [(b_left, [])], skew_shifts(c, p))
    a_up = shift(row_axis, p, k * m / per * e)  # I from below (or the bottom left)
    a_right = shift(col_axis, p, k * m / per * e)
    b_up = shift(row_axis, p, k * n / per * e)  # dO from below (or the bottom right)
    b_left = shift(col_axis, p, k * n / per * e)
    c = shift(col_axis, p, m * n / per * e)  # the running dW from the right
    tail = [(b_left + a_up, b_up), (c, [])]
    return _Schedule(p, [], (a_right + b_up, a_up), p - 2, tail, [])


def primepar_comms(op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int) -> list[Comm]:
    """The skew / unskew between layers and every ring shift of the primitive."""
    return _schedule(op, mesh, bytes_per_element).comms()


def primepar_cost(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
    """Cost of ``op`` with the primitive (formulas in the module docstring)."""
    plan = _schedule(op, mesh, profile.bytes_per_element)
    p = plan.p
    g = gemm_time(profile, op.m / p, op.n / p, op.k / p)

    def timed(s: Stage) -> float:
        return stage(g, s[0], profile, then=s[1])

    def wall(s: Stage) -> float:
        return parallel_time(s[0], profile) + parallel_time(s[1], profile)

    before = parallel_time(plan.before, profile)
    after = parallel_time(plan.after, profile)
    return PassCost(
        iterations=plan.repeats + 1,
        prologue_s=before,
        steady_s=timed(plan.steady) if plan.repeats else 0.0,
        epilogue_s=sum(timed(s) for s in plan.tail) + after,
        compute_s=p * g,
        comm=comm_time(plan.comms(), profile),
        comm_wall_s=before
        + plan.repeats * wall(plan.steady)
        + sum(wall(s) for s in plan.tail)
        + after,
    )
