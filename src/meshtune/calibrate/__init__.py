"""Calibration: benchmark logs in, a hardware profile for the MeshSlice cost model out.

The paper fits its communication model from measurements (§3.2.2, §4.5): t_sync from runs on
different numbers of chips, bw and t_launch by regression over shard sizes (8 KB to 512 MB), the
effective FLOPS from a few GeMMs. This package reads the logs users already have and fits the
same model::

    from meshtune.calibrate import parse_logs, fit_profile, profile_toml
    logs = parse_logs(["all_gather.log", "reduce_scatter.log"])
    result = fit_profile(logs, axis_map={"*": (0, 1)}, base=load_profile("tpuv4"))
    text = profile_toml(result)  # loads back with meshtune.load_profile

The log formats (:mod:`meshtune.calibrate.formats`): one parser module per format, registered
by format in :data:`~meshtune.calibrate.formats.detect.PARSERS`, which picks one per file.
:func:`~meshtune.calibrate.warnings.range_warnings` says where a plan leaves what a profile
was calibrated on.

The fits (NumPy only): :mod:`~meshtune.calibrate.link_fit` per op and axis (the model and its
regime cutoff in :mod:`~meshtune.calibrate.link_model`, ring sizes in
:mod:`~meshtune.calibrate.rings`), :mod:`~meshtune.calibrate.compute_fit` for GeMMs, both on
:mod:`~meshtune.calibrate.regression` and its solver :mod:`~meshtune.calibrate.solve`.
:mod:`~meshtune.calibrate.profile` assembles the profile (:mod:`~meshtune.calibrate.groups`:
measurements into fits per op and axis; :mod:`~meshtune.calibrate.assemble`: each value and its
provenance; :mod:`~meshtune.calibrate.result`: what a calibration returns),
:mod:`~meshtune.calibrate.tiers` the network tiers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from meshtune._lazy import lazy_attributes

if TYPE_CHECKING:
    from meshtune.calibrate.compute_fit import ComputeFit, GemmFit, fit_compute
    from meshtune.calibrate.formats.canonical import TEMPLATE
    from meshtune.calibrate.formats.detect import PARSERS, ParsedLogs, detect_format, parse_logs
    from meshtune.calibrate.formats.ops import busbw_factor, ring_steps
    from meshtune.calibrate.formats.records import (
        FileLog,
        GemmMeasurement,
        LineIssue,
        LogFormat,
        Measurement,
        ParseOptions,
        Parser,
        UnusableFileError,
    )
    from meshtune.calibrate.link_fit import LinkFit, PointFit, fit_link
    from meshtune.calibrate.link_model import LOO_MIN_SHARD_BYTES, TARGET_MAPE
    from meshtune.calibrate.profile import fit_profile, profile_toml
    from meshtune.calibrate.result import CalibrationResult
    from meshtune.calibrate.warnings import range_warnings

# Public names resolve on first use, so that `meshtune plan` (which imports the CLI, and through
# it this package) does not pay for NumPy and the parsers at start-up.
_LAZY: dict[str, str] = {
    "FileLog": "meshtune.calibrate.formats.records",
    "GemmMeasurement": "meshtune.calibrate.formats.records",
    "LineIssue": "meshtune.calibrate.formats.records",
    "LogFormat": "meshtune.calibrate.formats.records",
    "Measurement": "meshtune.calibrate.formats.records",
    "UnusableFileError": "meshtune.calibrate.formats.records",
    "ParseOptions": "meshtune.calibrate.formats.records",
    "Parser": "meshtune.calibrate.formats.records",
    "ring_steps": "meshtune.calibrate.formats.ops",
    "busbw_factor": "meshtune.calibrate.formats.ops",
    "PARSERS": "meshtune.calibrate.formats.detect",
    "range_warnings": "meshtune.calibrate.warnings",
    "TEMPLATE": "meshtune.calibrate.formats.canonical",
    "ParsedLogs": "meshtune.calibrate.formats.detect",
    "detect_format": "meshtune.calibrate.formats.detect",
    "parse_logs": "meshtune.calibrate.formats.detect",
    "LOO_MIN_SHARD_BYTES": "meshtune.calibrate.link_model",
    "TARGET_MAPE": "meshtune.calibrate.link_model",
    "ComputeFit": "meshtune.calibrate.compute_fit",
    "GemmFit": "meshtune.calibrate.compute_fit",
    "LinkFit": "meshtune.calibrate.link_fit",
    "PointFit": "meshtune.calibrate.link_fit",
    "fit_compute": "meshtune.calibrate.compute_fit",
    "fit_link": "meshtune.calibrate.link_fit",
    "CalibrationResult": "meshtune.calibrate.result",
    "fit_profile": "meshtune.calibrate.profile",
    "profile_toml": "meshtune.calibrate.profile",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "LOO_MIN_SHARD_BYTES",
    "PARSERS",
    "TARGET_MAPE",
    "TEMPLATE",
    "CalibrationResult",
    "ComputeFit",
    "FileLog",
    "GemmFit",
    "GemmMeasurement",
    "LineIssue",
    "LinkFit",
    "LogFormat",
    "Measurement",
    "ParseOptions",
    "ParsedLogs",
    "Parser",
    "PointFit",
    "UnusableFileError",
    "busbw_factor",
    "detect_format",
    "fit_compute",
    "fit_link",
    "fit_profile",
    "parse_logs",
    "profile_toml",
    "range_warnings",
    "ring_steps",
]
