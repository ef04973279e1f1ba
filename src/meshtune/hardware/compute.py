"""A chip's GeMM rates beyond its two FLOP/s figures: the efficiency of a GeMM by its size, and
the FP8 Tensor Core rates of a chip that has them.

No ``from __future__ import annotations``: pydantic would evaluate every annotation from its
string when each model class is created, on every start-up."""

import itertools
import math

from pydantic import BaseModel, Field, model_validator

from meshtune.units import FROZEN, MIN_EFFICIENCY, MIN_POINT_FLOPS, FlopRate, Latency


class EfficiencyPoint(BaseModel):
    """The GeMM efficiency measured at one size: achieved / effective FLOP/s, overhead aside."""

    model_config = FROZEN

    flops: float = Field(
        ge=MIN_POINT_FLOPS, allow_inf_nan=False, description="2·m·n·k of the GeMM."
    )
    efficiency: float = Field(
        gt=MIN_EFFICIENCY, le=1, description="Fraction of effective_flops_per_s."
    )


class GemmEfficiency(BaseModel):
    """How a GeMM's time departs from FLOPs / F (MeshSlice §5.3.1: small GeMMs are slower).

    ``time = overhead_s + 2·m·n·k / (F · efficiency(2·m·n·k))``; ``efficiency`` interpolates
    ``curve`` linearly in log(FLOPs) and holds the end values outside it (1 with no curve).
    """

    model_config = FROZEN

    overhead_s: Latency = Field(default=0.0, description="Fixed cost of every GeMM call.")
    curve: list[EfficiencyPoint] = Field(
        default_factory=list, description="Efficiency over GeMM size, FLOPs increasing."
    )

    @model_validator(mode="after")
    def _increasing(self) -> "GemmEfficiency":
        flops = [p.flops for p in self.curve]
        if any(b <= a for a, b in itertools.pairwise(flops)):
            raise ValueError("gemm_efficiency.curve: flops must be strictly increasing")
        return self

    def efficiency(self, flops: float) -> float:
        """The curve at ``flops`` (log-linear interpolation, ends held; 1 without a curve)."""
        curve = self.curve
        if not curve:
            return 1.0
        if flops <= curve[0].flops:
            return curve[0].efficiency
        for lo, hi in itertools.pairwise(curve):
            if flops <= hi.flops:
                w = math.log(flops / lo.flops) / math.log(hi.flops / lo.flops)
                return lo.efficiency + w * (hi.efficiency - lo.efficiency)
        return curve[-1].efficiency


def check_within_peak(effective: float, peak: float) -> None:
    """ValueError when a sustained rate exceeds its peak (the error names both fields)."""
    if effective > peak:
        raise ValueError(
            f"effective_flops_per_s ({effective:g}) exceeds peak_flops_per_s ({peak:g})"
        )


class Fp8Compute(BaseModel):
    """FP8 Tensor Core GeMMs of a chip that has them, for plans with ``--precision fp8``
    (:func:`meshtune.cost.compute.at_precision`): the FC GeMMs then run at these rates, the rest
    of the step at the profile's own. ``gemm_efficiency`` absent: the profile's curve (the same
    fraction of the effective rate at the same GeMM FLOPs, a stated assumption)."""

    model_config = FROZEN

    peak_flops_per_s: FlopRate = Field(description="Dense FP8 peak FLOP/s per chip.")
    effective_flops_per_s: FlopRate = Field(description="Sustained FP8 GeMM FLOP/s per chip.")
    gemm_efficiency: GemmEfficiency | None = Field(
        default=None,
        description="FP8 GeMM efficiency over size; absent: the profile's gemm_efficiency.",
    )
    sources: list[str] = Field(min_length=1, description="Where every FP8 figure comes from.")

    @model_validator(mode="after")
    def _effective_within_peak(self) -> "Fp8Compute":
        check_within_peak(self.effective_flops_per_s, self.peak_flops_per_s)
        return self
