"""Cost of one MeshSlice 2D GeMM on a P_r × P_c mesh (MeshSlice §3.1, Figure 5; §3.2.2).

With ``r × c`` the logical mesh (P_r × P_c, or P_c × P_r for a transposed dataflow), P = r·c,
``e`` bytes per element, ``F`` effective FLOP/s and S slices, one loop iteration does:

* OS ``C = A·B``: AG_col of an A sub-shard (m·k / (P·S) elements, column ring) and AG_row of a
  B sub-shard (k·n / (P·S), row ring), then ``2·(m/r)·(n/c)·(k/S)`` FLOPs.
  prologue = max(AG_col, AG_row); steady = max(AG_col, AG_row, GeMM); epilogue = GeMM.
* LS ``C = A·Bᵀ``: AG_row of a B sub-shard (n·k / (P·S)), ``2·(m/r)·(k/c)·(n/S)`` FLOPs, then
  RdS_col to an output sub-shard (m·n / (P·S)).
  prologue = AG_row; steady = max(AG_row, GeMM, RdS_col); epilogue = GeMM + RdS_col.
* RS ``C = Aᵀ·B``: AG_col of an A sub-shard (k·m / (P·S)), ``2·(k/r)·(n/c)·(m/S)`` FLOPs, then
  RdS_row to an output sub-shard (m·n / (P·S)).
  prologue = AG_col; steady = max(AG_col, GeMM, RdS_row); epilogue = GeMM + RdS_row.

Communications in the two directions run in parallel with each other and with the GeMM of
another iteration (software pipelining), so the GeMM takes
``prologue + (S − 1) · steady + epilogue``; with S = 1 that is the Collective 2D GeMM
(Figure 2b). Row-ring operations use the profile's axis-0 parameters and column-ring ones
axis 1; a transposed dataflow swaps both the ring sizes and the parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.cost.collectives import CommTime, collective_time
from meshtune.cost.compute import gemm_time
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.specs import CollectiveKind, HardwareProfile

AG = CollectiveKind.ALL_GATHER
RDS = CollectiveKind.REDUCE_SCATTER


@dataclass(frozen=True)
class MeshAxes:
    """A physical mesh: ``rows`` = P_r (axis-0 ring size), ``cols`` = P_c (axis-1 ring size)."""

    rows: int
    cols: int

    @property
    def chips(self) -> int:
        """P_r · P_c."""
        return self.rows * self.cols

    def logical(self, transposed: bool) -> tuple[tuple[int, int], tuple[int, int]]:
        """((row ring size, its axis), (column ring size, its axis)) as the GeMM sees them."""
        if transposed:
            return (self.cols, 1), (self.rows, 0)
        return (self.rows, 0), (self.cols, 1)


@dataclass(frozen=True)
class PassCost:
    """Predicted time of one GeMM, split the way the report shows it (seconds).

    ``total_s = prologue_s + (slices − 1) · steady_s + epilogue_s``. ``comm`` sums every
    collective of every iteration in both directions (Figure 10); ``comm_wall_s`` is how long
    communication alone would take with both directions overlapped; ``exposed_s`` is the part of
    the wall time not covered by computation and ``hidden_s = comm_wall_s − exposed_s``.
    """

    slices: int
    prologue_s: float
    steady_s: float
    epilogue_s: float
    compute_s: float
    comm: CommTime
    comm_wall_s: float

    @property
    def total_s(self) -> float:
        """prologue + (S − 1) · steady + epilogue."""
        return self.prologue_s + (self.slices - 1) * self.steady_s + self.epilogue_s

    @property
    def exposed_s(self) -> float:
        """Wall time during which the chip waits for communication."""
        return max(0.0, self.total_s - self.compute_s)

    @property
    def hidden_s(self) -> float:
        """Communication wall time overlapped with computation."""
        return max(0.0, self.comm_wall_s - self.exposed_s)


def meshslice_pass(op: GemmOp, mesh: MeshAxes, profile: HardwareProfile, slices: int) -> PassCost:
    """Cost of ``op`` with MeshSlice at ``slices`` slices on ``mesh`` (see module docstring).

    The caller guarantees divisibility (``search`` enumerates only valid slice counts); the
    formulas themselves are continuous in the sizes.
    """
    if slices < 1:
        raise ValueError(f"slices must be >= 1, got {slices}")
    (r, row_axis), (c, col_axis) = mesh.logical(op.transposed)
    p = r * c
    e = profile.bytes_per_element
    m, n, k, s = op.m, op.n, op.k, slices
    local = {
        Dataflow.OS: (m / r, n / c, k / s),
        Dataflow.LS: (m / r, n / s, k / c),
        Dataflow.RS: (m / s, n / c, k / r),
    }[op.dataflow]
    gemm = gemm_time(profile, *local)

    if op.dataflow is Dataflow.OS:
        ag_a = collective_time(profile.link(AG, col_axis), c, m * k / (p * s) * e)
        ag_b = collective_time(profile.link(AG, row_axis), r, k * n / (p * s) * e)
        first = max(ag_a.total_s, ag_b.total_s)
        return PassCost(
            slices=s,
            prologue_s=first,
            steady_s=max(first, gemm),
            epilogue_s=gemm,
            compute_s=s * gemm,
            comm=(ag_a + ag_b).scaled(s),
            comm_wall_s=s * first,
        )

    if op.dataflow is Dataflow.LS:
        gather = collective_time(profile.link(AG, row_axis), r, n * k / (p * s) * e)
        scatter = collective_time(profile.link(RDS, col_axis), c, m * n / (p * s) * e)
    else:  # RS
        gather = collective_time(profile.link(AG, col_axis), c, k * m / (p * s) * e)
        scatter = collective_time(profile.link(RDS, row_axis), r, m * n / (p * s) * e)
    g, d = gather.total_s, scatter.total_s
    return PassCost(
        slices=s,
        prologue_s=g,
        steady_s=max(g, gemm, d),
        epilogue_s=gemm + d,
        compute_s=s * gemm,
        comm=(gather + scatter).scaled(s),
        comm_wall_s=g + d + (s - 1) * max(g, d),
    )
