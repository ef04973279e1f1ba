"""What :func:`meshtune.compare.model.compare_models` returns: its views and their records.

One frozen pydantic record per row of each view (MeshSlice Figures 9–14, Tables 2 and 3, and
the cluster view of :mod:`meshtune.compare.cluster`) and the :class:`Comparison` that holds
the views asked for, with everything needed to render or serialize them (``to_json``) and to
say why nothing is feasible. Records only: no pricing and no search here. Times are seconds,
utilizations fractions, speedups ``time(other) / time(reference) − 1``; a row an algorithm
cannot fill carries the reason and ``None`` for its numbers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from meshtune.compare.breakdown import Breakdown
from meshtune.compare.cluster import ClusterEntry
from meshtune.compare.gemm import GemmStudy
from meshtune.compare.selection import none_feasible
from meshtune.units import FROZEN

View = Literal[
    "scaling", "breakdown", "gemms", "shapes", "slices", "dataflow", "overlap", "cluster"
]
VIEWS: tuple[View, ...] = (
    "scaling",
    "breakdown",
    "gemms",
    "shapes",
    "slices",
    "dataflow",
    "overlap",
    "cluster",
)
"""scaling: FC time and utilization per chip count (Figures 9 and 12) with end-to-end speedups;
breakdown: communication split at one size (Figure 10); gemms: the model's distinct GeMMs
(Figure 11); shapes: every mesh shape (Figure 13); slices: every configuration on the best shape
(Figure 14); dataflow: phase 1 on versus Y-stationary everywhere (Table 2); overlap: the
profile as it is versus every kind overlapped (Table 3); cluster: each algorithm at its best
DP × PP × mesh split, step time and MFU (:mod:`meshtune.compare.cluster`)."""
MESH_VIEWS: tuple[View, ...] = VIEWS[:-1]
"""The views where the mesh takes every chip, as in the paper (the default)."""


class ScalingPoint(BaseModel):
    """One algorithm at one chip count (Figures 9 and 12), with the end-to-end estimate."""

    model_config = FROZEN

    algorithm: str
    chips: int
    batch: int
    reason: str | None = Field(description="Why no mesh is feasible (None: feasible).")
    mesh: str | None = None
    fc_time_s: float | None = Field(default=None, description="FC time of one step.")
    utilization: float | None = Field(default=None, description="FC FLOP utilization.")
    configs: dict[str, dict[str, int]] | None = None
    nonfc_s: float | None = Field(default=None, description="Non-FC time of one step (§4.4).")
    step_time_s: float | None = Field(default=None, description="fc_time_s + nonfc_s.")
    fc_speedup_of_reference: float | None = None
    step_speedup_of_reference: float | None = None


class AlgorithmBreakdown(BaseModel):
    """An algorithm's FC time of one step at its best mesh, split as in Figure 10."""

    model_config = FROZEN

    algorithm: str
    mesh: str | None
    reason: str | None
    breakdown: Breakdown | None


class ShapeEntry(BaseModel):
    """One mesh shape of one algorithm (Figure 13)."""

    model_config = FROZEN

    algorithm: str
    mesh: str
    reason: str | None
    fc_time_s: float | None
    utilization: float | None
    configs: dict[str, dict[str, int]] | None


class SliceEntry(BaseModel):
    """One configuration used by every layer on an algorithm's best mesh (Figure 14)."""

    model_config = FROZEN

    algorithm: str
    mesh: str
    config: dict[str, int] | None = Field(description="None: each layer's own best (tuned).")
    fc_time_s: float
    utilization: float


class DataflowEntry(BaseModel):
    """Phase 1's dataflows against Y-stationary everywhere (Table 2)."""

    model_config = FROZEN

    algorithm: str
    optimized_mesh: str | None
    optimized_utilization: float | None
    unoptimized_mesh: str | None
    unoptimized_utilization: float | None
    speedup: float | None = Field(description="time(unoptimized) / time(optimized) − 1.")
    reason: str | None


class OverlapEntry(BaseModel):
    """An algorithm on the profile as it is, and with every communication kind overlapped
    (Table 3). ``as_tuned`` runs the mesh and configurations tuned for the overlapping machine
    (what the paper ran on the real 4×4 TPUv4); ``retuned`` tunes them for the profile."""

    model_config = FROZEN

    algorithm: str
    mesh: str | None
    configs: dict[str, dict[str, int]] | None
    as_tuned_utilization: float | None
    retuned_mesh: str | None
    retuned_utilization: float | None
    overlapped_utilization: float | None
    reason: str | None


class Comparison(BaseModel):
    """Every selected algorithm on one model over chip counts; the views asked for."""

    model_config = FROZEN

    model: str
    display_name: str
    profile: str
    seq_len: int
    scaling: Literal["weak", "strong"]
    batch: int | None = Field(description="Fixed batch (strong scaling); None: chips / 2.")
    chips: list[int]
    at_chips: int = Field(description="Chip count of the single-size views.")
    mesh: str | None = Field(description="The one mesh shape searched, if restricted.")
    reference: str
    algorithms: list[str]
    views: list[View]
    overlapped: list[str] = Field(description="The profile's overlapped communication kinds.")
    nonfc_note: str | None = Field(description="Why there is no end-to-end estimate, if none.")
    scaling_points: list[ScalingPoint] = Field(default_factory=list)
    breakdown: list[AlgorithmBreakdown] = Field(default_factory=list)
    gemms: list[GemmStudy] = Field(default_factory=list)
    gemms_mean_speedup: dict[str, float] = Field(
        default_factory=dict,
        description="Per algorithm, the reference's speedup over it averaged over the GeMMs "
        "both can run (§5.1.4's 'on average').",
    )
    shapes: list[ShapeEntry] = Field(default_factory=list)
    slices: list[SliceEntry] = Field(default_factory=list)
    dataflow: list[DataflowEntry] = Field(default_factory=list)
    overlap: list[OverlapEntry] = Field(default_factory=list)
    cluster: list[ClusterEntry] = Field(default_factory=list)

    def to_json(self) -> str:
        """Pretty JSON (every number the views show)."""
        return self.model_dump_json(indent=2) + "\n"

    def nothing_feasible(self) -> str | None:
        """Why none of the algorithms compared can run the model at any chip count asked for
        (from the scaling view, else the cluster view, else the breakdown at ``at_chips``), or
        ``None`` when one can or none of those views was computed."""
        if self.scaling_points:
            return none_feasible(
                [(f"{p.algorithm} at {p.chips} chips", p.reason) for p in self.scaling_points],
                "at any chip count",
            )
        if self.cluster:
            return none_feasible(
                [(f"{e.algorithm} at {e.chips} chips", e.reason) for e in self.cluster],
                "on any cluster split",
            )
        return none_feasible(
            [(b.algorithm, b.reason) for b in self.breakdown], f"at {self.at_chips} chips"
        )
