"""The record of how a calibrated profile's numbers were measured: each fit of a benchmarked
operation, the compute fit, and where every value came from (``meshtune calibrate``).

No ``from __future__ import annotations``: pydantic would evaluate every annotation from its
string when each model class is created, on every start-up."""

from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field, PositiveFloat, PositiveInt, model_validator

from meshtune.hardware.links import CollectiveKind
from meshtune.units import FROZEN


class MeasuredOp(str, Enum):
    """The operations a benchmark log may time: the cost model's kinds, plus all-reduce and
    all-to-all.

    A ring all-reduce is a reduce-scatter followed by an all-gather over the same ring
    (2(P − 1) steps on shards of size / P), so its fit can stand for both kinds. An all-to-all
    (P − 1 exchanges of size / P) supplies no kind of the 2D cost model: its fit supplies the
    profile's (or a tier's) ``all_to_all``, expert parallelism's token dispatch.
    """

    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"
    ALL_REDUCE = "all_reduce"
    ALL_TO_ALL = "all_to_all"

    @property
    def kinds(self) -> tuple[CollectiveKind, ...]:
        """The cost-model kinds a fit of this operation can supply."""
        if self is MeasuredOp.ALL_REDUCE:
            return (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
        if self is MeasuredOp.ALL_TO_ALL:
            return ()
        return (CollectiveKind(self.value),)


class RingFit(BaseModel):
    """One ring size P of a fit over several: its own line, and how the joint model fits it."""

    model_config = FROZEN

    ranks: PositiveInt
    points: PositiveInt = Field(description="Measurements at this P inside the fitted range.")
    intercept_s: float = Field(description="Own fit at this P: t_launch + steps·t_sync.")
    bw_bytes_per_s: float | None = Field(
        default=None, description="Own fit at this P (None: fewer than two shard sizes)."
    )
    mape_joint: float = Field(description="MAPE of the joint (all-P) model at this P.")
    mape_own: float | None = Field(default=None, description="MAPE of this P's own line.")


class FitRecord(BaseModel):
    """One fit of a benchmarked operation on one mesh axis: the values, their quality, their use.

    ``op`` is what the logs timed; ``used_for`` the profile entries it supplies
    (``<kind>.axis<axis>``, or the tier's, or ``all_to_all``): an all-reduce fit supplies
    all_gather and reduce_scatter where no dedicated log does, an all-to-all fit the
    ``all_to_all`` link. ``mirrored_from_axis`` marks a fit copied from the other axis (one ring
    for both).
    """

    model_config = FROZEN

    op: MeasuredOp
    axis: Literal[0, 1]
    tier: str | None = Field(
        default=None, description="The network tier fitted (e.g. 'network'); None: a mesh axis."
    )
    used_for: list[MeasuredOp] = Field(
        default_factory=list,
        description="Profile entries the fit supplies: all_gather, reduce_scatter, send_recv or "
        "all_to_all (never all_reduce, which is no profile entry).",
    )
    mirrored_from_axis: Literal[0, 1] | None = None
    t_launch_s: float = Field(ge=0)
    t_sync_s: float = Field(ge=0)
    bw_bytes_per_s: PositiveFloat
    points: PositiveInt = Field(description="Measurements used by the fit.")
    points_measured: PositiveInt = Field(description="Measurements the logs gave.")
    ring_sizes: list[PositiveInt] = Field(description="Distinct ring sizes P in the data.")
    r2: float = Field(description="Coefficient of determination of the fit.")
    t_launch_ci95_s: tuple[float, float] | None = None
    t_sync_ci95_s: tuple[float, float] | None = None
    bw_ci95_bytes_per_s: tuple[float, float] | None = None
    loo_mape_ge_1mb: float | None = Field(
        default=None, description="Leave-one-size-out MAPE over sizes >= 1 MiB (fraction)."
    )
    confounded: bool = Field(
        default=False,
        description="Every measurement had the same number of ring steps, so t_sync cannot be "
        "told from t_launch: t_launch holds the whole intercept and t_sync is 0.",
    )
    min_shard_bytes: PositiveFloat | None = Field(
        default=None,
        description="The fit used shards of at least this many bytes (the bandwidth-dominated "
        "regime); None: every size.",
    )
    cutoff_chosen: bool = Field(
        default=False, description="min_shard_bytes was chosen automatically (else given)."
    )
    loo_mape_ge_1mb_all_sizes: float | None = Field(
        default=None,
        description="loo_mape_ge_1mb of one fit over every size, when min_shard_bytes is set.",
    )
    per_ring: list[RingFit] = Field(
        default_factory=list, description="Per ring size P, when the data holds several."
    )
    rings_consistent: bool | None = Field(
        default=None,
        description="Whether one (t_launch, t_sync, bw) explains every P (None: one P only).",
    )
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _entries_only(self) -> "FitRecord":
        if MeasuredOp.ALL_REDUCE in self.used_for:
            raise ValueError(
                "used_for: 'all_reduce' is no profile entry; an all-reduce fit supplies "
                "all_gather and reduce_scatter"
            )
        return self


class ComputeFitRecord(BaseModel):
    """How the compute figures were fitted from GeMM timings (``meshtune.calibrate.compute_fit``): F
    is the best achieved throughput of a size, the profile's curve each size's achieved / F;
    ``overhead_s``, ``half_efficiency_flops`` and ``r2`` describe the line time = overhead +
    FLOPs / F_line fitted alongside."""

    model_config = FROZEN

    points: PositiveInt = Field(description="GeMM timings used by the fit.")
    dtype: str = Field(description="Operand type of the timed GeMMs.")
    effective_flops_per_s: PositiveFloat
    r2: float | None = Field(default=None, description="Coefficient of determination.")
    effective_flops_ci95_per_s: tuple[float, float] | None = None
    overhead_s: float | None = Field(default=None, ge=0, description="Fixed cost per GeMM.")
    half_efficiency_flops: float | None = Field(
        default=None,
        description="FLOPs of a GeMM that reaches half the effective FLOPS (overhead × F).",
    )
    notes: list[str] = Field(default_factory=list)


class Origin(BaseModel):
    """Where one value of a calibrated profile came from."""

    model_config = FROZEN

    kind: Literal["fit", "option", "base", "default"] = Field(
        description="fit: the logs; option: given by the user; base: the base profile; "
        "default: assumed (bf16, B = 8, effective FLOPS = peak)."
    )
    detail: str = Field(description="Which fit, option, base profile or assumption.")


class Calibration(BaseModel):
    """Provenance of a profile written by ``meshtune calibrate``."""

    model_config = FROZEN

    tool: str = Field(description="meshtune version that wrote the profile.")
    source_files: list[str] = Field(description="Log files the fit read.")
    origins: dict[str, Origin] = Field(
        default_factory=dict, description="Per profile value (e.g. all_gather.axis0)."
    )
    fits: list[FitRecord] = Field(default_factory=list)
    compute: ComputeFitRecord | None = None
    notes: list[str] = Field(default_factory=list)

    def largest_ring(self, axis: int) -> int | None:
        """The ring size up to which every kind the fits supply on ``axis`` was measured: per
        kind the largest ring of its fit, the smallest of those; None without fits."""
        per_kind = [
            max(f.ring_sizes)
            for f in self.fits
            if f.axis == axis and f.ring_sizes
            for used in f.used_for
            if used is not MeasuredOp.ALL_TO_ALL  # not a mesh axis's ring
        ]
        return min(per_kind) if per_kind else None
