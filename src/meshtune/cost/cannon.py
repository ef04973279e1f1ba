"""Cannon's 2D GeMM on a square P × P mesh (MeshSlice §2.3.2, §4.2, §5.1.2; Cannon 1969 [4]).

Every ring shift below is a send-recv of one shard per link (the profile's ``send_recv``
parameters, ``t_launch + t_sync + bytes / bw``); the systolic shifts move data one hop in the
ring's direction, like the rings of :mod:`meshtune.cost.schedule`. A *skew* moves ring ρ's
shards by h(ρ) ∈ 0 … P − 1 hops, each ring the shorter way round (h forward or P − h
backward, :func:`meshtune.cost.schedule.skew_shifts`): it takes ⌊P / 2⌋ shifts, in shift s the
rings with at least s hops to go send, and the busiest ring's links carry ⌊P / 2⌋ shards.
With e bytes per element, ``g`` the GeMM of one step
and the logical mesh of the GeMM (transposed dataflows swap the physical axes):

* OS ``C = A·B`` (C stays): skew A by (P − i) hops along row i and B by (P − j) along column j,
  then P steps: ``C_ij += A·B`` with the shards held, and (except after the last) shift A along
  the row and B along the column. A shard is m·k/P² (A) and k·n/P² (B) elements,
  ``g = gemm(m/P, n/P, k/P)``. prologue = skew (``stage(0, skew)``: both in parallel, or in
  turn where shifts cannot overlap compute), steady = ``stage(g, shift A ∥ shift B)``,
  epilogue = g; iterations = P.
* LS ``C = A·Bᵀ`` (A stays; B and the partial sums of C travel): skew B by (P − l) hops along
  column l; at step t chip (i, l) holds ``B_{(l+i−t), l}`` and the running sum of
  ``C_{i, (l+i−t)}``; it adds ``A_il·Bᵀ`` to the running sum received, passes the sum on along
  its row and B on along its column. After P steps ``C_ij`` sits at (i, j − i − 1): an unskew
  by (i + 1) hops along row i brings it home. A running sum only moves after the GeMM that
  produced it, so the P stages are {g ∥ shift B}, (P − 2) × {g ∥ shift B ∥ shift C},
  {g ∥ shift C}: prologue = skew B + the first stage, steady = the middle stage,
  epilogue = the last stage + unskew C; iterations = P − 1 (the stages after the first).
  Shards: B n·k/P², C m·n/P²; ``g = gemm(m/P, n/P, k/P)``.
* RS ``C = Aᵀ·B`` (B stays) is LS on the transposed roles: A skews along rows, the running sums
  of C travel along columns and are unskewed by (j + 1) hops along column j.

A 1 × 1 mesh runs one GeMM. Cannon moves more than the other algorithms for two reasons the
paper names (§2.3.2, §5.1.2): the skew (and, for LS/RS, the unskew) and the square mesh.
"""

from __future__ import annotations

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
from meshtune.dataflow import Dataflow, Dim, GemmOp, LayerDataflow
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile


def cannon_problem(mesh: Mesh) -> str | None:
    """Cannon runs on square 2D meshes only (§2.3.2)."""
    if mesh.rows != mesh.cols or mesh.depth != 1:
        return f"cannon needs a square mesh, got {mesh.label}"
    return None


def cannon_configs(layer: LayerDataflow, mesh: Mesh, block: int) -> Candidates:
    """One configuration (no knobs) on a square mesh whose shards divide."""
    problem = cannon_problem(mesh) or sharding_problem(layer, mesh)
    return ((), problem) if problem is not None else ((Config.of(),), None)


def cannon_units(layer: LayerDataflow, mesh: Mesh, config: Config, block: int) -> dict[Dim, int]:
    """Sharding units only."""
    return sharding_units(layer, mesh)


class _Moves:
    """One pass's shifts: the skew before, one step's shifts, the unskew after."""

    def __init__(self, op: GemmOp, mesh: Mesh, e: int) -> None:
        problem = cannon_problem(mesh)
        if problem is not None:
            raise ValueError(problem)
        (p, row_axis), (_, col_axis) = mesh.logical(op.transposed)
        per = p * p
        m, n, k = op.m, op.n, op.k
        self.p = p
        if op.dataflow is Dataflow.OS:
            a = shift(col_axis, p, m * k / per * e)
            b = shift(row_axis, p, k * n / per * e)
            self.skew, self.first, self.last, self.unskew = skew_shifts(a + b, p), a + b, [], []
            self.both = a + b
        elif op.dataflow is Dataflow.LS:
            b = shift(row_axis, p, n * k / per * e)
            c = shift(col_axis, p, m * n / per * e)
            self.skew, self.first, self.last = skew_shifts(b, p), b, c
            self.unskew = skew_shifts(c, p)
            self.both = b + c
        else:
            a = shift(col_axis, p, k * m / per * e)
            c = shift(row_axis, p, m * n / per * e)
            self.skew, self.first, self.last = skew_shifts(a, p), a, c
            self.unskew = skew_shifts(c, p)
            self.both = a + c
        self.os = op.dataflow is Dataflow.OS

    def comms(self) -> list[Comm]:
        """Every shift of the pass."""
        if self.p == 1:
            return []
        if self.os:
            return self.skew + repeated(self.both, self.p - 1)
        middle = repeated(self.both, self.p - 2)
        return self.skew + self.first + middle + self.last + self.unskew


def cannon_comms(op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int) -> list[Comm]:
    """Skew, the systolic shifts and (LS/RS) the unskew, as send-recv shifts."""
    return _Moves(op, mesh, bytes_per_element).comms()


def cannon_cost(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
    """Cost of ``op`` with Cannon's algorithm (see the module docstring for the formulas)."""
    moves = _Moves(op, mesh, profile.bytes_per_element)
    p = moves.p
    g = gemm_time(profile, op.m / p, op.n / p, op.k / p)
    comm = comm_time(moves.comms(), profile)
    if p == 1:
        return PassCost(1, 0.0, 0.0, g, g, comm, 0.0)
    skew = parallel_time(moves.skew, profile)
    both = parallel_time(moves.both, profile)
    if moves.os:
        return PassCost(
            iterations=p,
            prologue_s=stage(0.0, moves.skew, profile),
            steady_s=stage(g, moves.both, profile),
            epilogue_s=g,
            compute_s=p * g,
            comm=comm,
            comm_wall_s=skew + (p - 1) * both,
        )
    unskew = parallel_time(moves.unskew, profile)
    first = parallel_time(moves.first, profile)
    last = parallel_time(moves.last, profile)
    return PassCost(
        iterations=p - 1,
        prologue_s=skew + stage(g, moves.first, profile),
        steady_s=stage(g, moves.both, profile),
        epilogue_s=stage(g, moves.last, profile) + unskew,
        compute_s=p * g,
        comm=comm,
        comm_wall_s=skew + first + (p - 2) * both + last + unskew,
    )
