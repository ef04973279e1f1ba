"""The compute fit: effective FLOPS and the GeMM efficiency curve from timed GeMMs.

Compute (§3.2.2, §4.5, §5.3.1), in the form the shipped GPU profiles use: F, the effective
FLOPS, is the best throughput any measured size achieves (per size the median over its GeMMs;
the "maximum achievable matmul FLOPS" convention), and the efficiency curve is each size's
achieved throughput / F (capped at 1), with ``overhead_s = 0``: the timed calls include their
launch, which the curve carries, so the profile reproduces every measured time, time =
FLOPs / (F·efficiency). With one size F is its mean achieved throughput and there is no curve.
For the report, a line time = overhead + FLOPs / F_line is also fitted (soft-L1, relative
residuals: :func:`~meshtune.calibrate.regression.robust_linear`); its overhead and
f½ = overhead·F_line, the FLOPs at which a GeMM reaches half of F_line, describe where small
GeMMs fall off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from meshtune.calibrate.formats.records import GemmMeasurement
from meshtune.calibrate.regression import (
    Array,
    interval,
    r_squared,
    robust_linear,
    sig,
    sig_opt,
    sig_pair,
)
from meshtune.calibrate.solve import t_quantile_975
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import ComputeFitRecord


@dataclass(frozen=True)
class GemmFit:
    """One timed GeMM against the fitted compute model."""

    gemm: GemmMeasurement
    achieved_flops_per_s: float
    efficiency: float


@dataclass(frozen=True)
class ComputeFit:
    """The compute fit: the record a profile stores, its efficiency curve, every GeMM, and per
    distinct size its median achieved throughput (``rates``: (FLOPs, FLOP/s), to re-base the
    curve on an effective rate given by the user)."""

    record: ComputeFitRecord
    curve: tuple[tuple[float, float], ...]
    points: tuple[GemmFit, ...]
    rates: tuple[tuple[float, float], ...] = ()

    def curve_for(self, effective: float) -> tuple[tuple[float, float], ...]:
        """The curve relative to ``effective``: achieved / effective per size, capped at 1."""
        return tuple((f, sig(min(1.0, rate / effective), 4)) for f, rate in self.rates)


def _size_rates(flops: Array, t: Array) -> tuple[tuple[float, float], ...]:
    """(FLOPs, median achieved FLOP/s) per distinct GeMM size, FLOPs increasing."""
    return tuple((float(f), float(np.median(f / t[flops == f]))) for f in np.unique(flops))


def fit_compute(gemms: Sequence[GemmMeasurement]) -> ComputeFit:
    """F, the efficiency curve and the line fit of GeMM timings of one dtype (module doc)."""
    dtypes = sorted({g.dtype for g in gemms})
    if len(dtypes) != 1:
        raise LogFormatError(
            f"GeMM logs mix operand types ({', '.join(dtypes)}); give the timings of the "
            "plan's operand type only"
        )
    flops = np.array([g.flops for g in gemms])
    t = np.array([g.seconds for g in gemms])
    w = np.array([g.repeats for g in gemms], dtype=float)
    achieved = flops / t
    notes: list[str] = []
    rates: tuple[tuple[float, float], ...] = ()
    if len(np.unique(flops)) < 2:
        effective = float(np.average(achieved, weights=w))
        ci = None
        if len(t) > 1:
            spread = float(np.std(achieved, ddof=1)) / np.sqrt(len(t))
            ci = interval(effective, spread**2, t_quantile_975(len(t) - 1))
        overhead = half = r2 = None
        notes.append(
            "one GeMM size: effective FLOPS is its mean achieved throughput; time GeMMs of "
            "several sizes for the small-GeMM efficiency curve"
        )
    else:
        fit = robust_linear(np.column_stack([np.ones_like(flops), flops]), t, w)
        overhead, inverse = (float(v) for v in fit.params)
        if inverse <= 0:
            raise LogFormatError("GeMM times do not grow with the FLOP count; cannot fit FLOPS")
        rates = _size_rates(flops, t)
        best_flops, effective = max(rates, key=lambda pair: pair[1])
        ci = None
        half = overhead / inverse
        r2 = r_squared(t, overhead + flops * inverse, w)
        notes.append(
            f"effective FLOPS = the best median throughput of a size ({effective:.4g} FLOP/s at "
            f"{best_flops:.4g} FLOPs); the efficiency curve is each size's achieved / effective "
            f"with overhead_s = 0 (the timed calls include their launch); the line time = "
            f"overhead + FLOPs / F fits overhead {overhead * 1e6:.3g} µs, F {1 / inverse:.4g}"
        )
    record = ComputeFitRecord(
        points=len(gemms),
        dtype=dtypes[0],
        effective_flops_per_s=sig(effective),
        r2=sig_opt(r2, 6),
        effective_flops_ci95_per_s=sig_pair(ci),
        overhead_s=sig_opt(overhead),
        half_efficiency_flops=sig_opt(half),
        notes=notes,
    )
    result = ComputeFit(
        record=record,
        curve=(),
        points=tuple(
            GemmFit(g, float(a), float(a) / effective) for g, a in zip(gemms, achieved, strict=True)
        ),
        rates=rates,
    )
    return replace(result, curve=result.curve_for(effective))
