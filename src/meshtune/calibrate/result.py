"""The result of :func:`~meshtune.calibrate.profile.fit_profile`: the fits, the profile and
everything that explains them, and its JSON form (``meshtune calibrate --json``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshtune.calibrate.compute_fit import ComputeFit
from meshtune.calibrate.formats.detect import ParsedLogs
from meshtune.calibrate.link_fit import LinkFit
from meshtune.hardware.calibration import Calibration, Origin
from meshtune.hardware.profile import HardwareProfile


@dataclass(frozen=True)
class CalibrationResult:
    """The fits, the calibrated profile (``None`` when something it needs is ``missing``) and
    everything that explains them."""

    profile: HardwareProfile | None
    calibration: Calibration
    links: tuple[LinkFit, ...]
    compute: ComputeFit | None
    logs: ParsedLogs
    warnings: tuple[str, ...]
    missing: tuple[str, ...] = ()

    @property
    def origins(self) -> tuple[tuple[str, Origin], ...]:
        """``(profile value, where it came from)`` in profile order."""
        return tuple(self.calibration.origins.items())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the profile, every fit with its per-point residuals, provenance."""
        compute = None
        if self.compute is not None:
            compute = self.compute.record.model_dump(mode="json") | {
                "efficiency_curve": [list(p) for p in self.compute.curve],
                "points": [
                    {
                        "source": p.gemm.source,
                        "line": p.gemm.line,
                        "m": p.gemm.m,
                        "n": p.gemm.n,
                        "k": p.gemm.k,
                        "seconds": p.gemm.seconds,
                        "achieved_flops_per_s": p.achieved_flops_per_s,
                        "efficiency": p.efficiency,
                    }
                    for p in self.compute.points
                ],
            }
        return {
            "profile": None if self.profile is None else self.profile.model_dump(mode="json"),
            "missing": list(self.missing),
            "fits": [
                fit.record.model_dump(mode="json")
                | {
                    "point_residuals": [
                        {
                            "source": p.measurement.source,
                            "line": p.measurement.line,
                            "ranks": p.measurement.ranks,
                            "shard_bytes": p.measurement.shard_bytes,
                            "seconds": p.measurement.seconds,
                            "predicted_s": p.predicted_s,
                            "rel_error": p.rel_error,
                            "in_fit": p.in_fit,
                        }
                        for p in fit.points
                    ]
                }
                for fit in self.links
            ],
            "compute": compute,
            "origins": {k: v.model_dump(mode="json") for k, v in self.origins},
            "files": [
                {
                    "path": f.path,
                    "format": f.format.value,
                    "measurements": len(f.measurements),
                    "gemms": len(f.gemms),
                    "skipped_lines": len(f.skipped),
                    "notes": list(f.notes),
                }
                for f in self.logs.files
            ],
            "skipped_lines": [str(issue) for issue in self.logs.skipped],
            "left_out": list(self.logs.left_out),
            "warnings": list(self.warnings),
        }
