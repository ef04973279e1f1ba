"""Assembling the profile: precedence, provenance, axis mapping, and the TOML it is written as."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.calibrate import (
    CalibrationResult,
    FileLog,
    GemmMeasurement,
    LogFormat,
    Measurement,
    ParsedLogs,
    fit_profile,
    profile_toml,
    ring_steps,
)
from meshtune.catalog import load_profile
from meshtune.errors import LogFormatError, ProfileError
from meshtune.hardware.calibration import Calibration, MeasuredOp, Origin
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile

AG, RS, SR = MeasuredOp.ALL_GATHER, MeasuredOp.REDUCE_SCATTER, MeasuredOp.SEND_RECV
AR = MeasuredOp.ALL_REDUCE
SHARDS = [8192 * 2**i for i in range(12)]


def ring_log(path: str, op: MeasuredOp, rings: tuple[int, ...], axis: int | None = None) -> FileLog:
    """Exact times of 10 µs + steps·(2 µs + s / 1 GB/s)."""
    measurements = tuple(
        Measurement(op, p, float(s), 10e-6 + ring_steps(op, p) * (2e-6 + s / 1e9), path, i, axis)
        for i, (p, s) in enumerate((p, s) for p in rings for s in SHARDS)
    )
    return FileLog(path, LogFormat.CANONICAL, measurements)


ALL_OPS = ParsedLogs(
    files=(
        ring_log("ag.csv", AG, (2, 4)),
        ring_log("rs.csv", RS, (2, 4)),
        ring_log("sr.csv", SR, (2,)),
    )
)
COMPUTE = {
    "peak_flops_per_s": 2e12,
    "effective_flops_per_s": 1e12,
    "bytes_per_element": 2,
    "slice_block": 8,
}


def test_everything_from_logs_and_options() -> None:
    result = fit_profile(ALL_OPS, name="lab", axis_map={"*": (0, 1)}, **COMPUTE)
    profile = result.profile
    assert profile is not None and profile.name == "lab"
    assert profile.all_gather["axis1"].bw_bytes_per_s == pytest.approx(1e9)
    assert profile.reduce_scatter["axis0"].t_sync_s == pytest.approx(2e-6)
    assert profile.send_recv["axis0"].t_launch_s == pytest.approx(12e-6)  # 10 + 1·2, confounded
    origins = dict(result.origins)
    assert origins["all_gather.axis0"] == Origin(
        kind="fit", detail="fit of 24 all_gather measurements"
    )
    assert origins["all_gather.axis1"].detail.endswith(", the ring of axis 0")
    assert origins["peak_flops_per_s"] == Origin(kind="option", detail="given by the user")
    assert profile.calibration is not None
    assert profile.calibration.source_files == ["ag.csv", "rs.csv", "sr.csv"]
    assert profile.calibration.origins == dict(result.origins)
    fits = {(f.op, f.axis): f for f in profile.calibration.fits}
    assert len(fits) == 6 and fits[(AG, 1)].mirrored_from_axis == 0
    assert fits[(AG, 0)].used_for == [CollectiveKind.ALL_GATHER]
    assert any("send_recv axis 0: t_sync and t_launch are confounded" in w for w in result.warnings)
    assert not any("axis 1: t_sync" in w for w in result.warnings)  # mirrored fits warn once


def test_missing_values_are_named_never_invented() -> None:
    logs = ParsedLogs(files=(ring_log("ag.csv", AG, (2, 4)),))
    result = fit_profile(logs, axis_map={"all_gather": (0,)}, peak_flops_per_s=1e15)
    assert result.profile is None and len(result.links) == 1  # the fit is still reported
    assert result.missing == (
        "all_gather.axis1 (no logs measure it; add logs or pass a base profile)",
        "reduce_scatter.axis0 (no logs measure it; add logs or pass a base profile)",
        "reduce_scatter.axis1 (no logs measure it; add logs or pass a base profile)",
        "send_recv.axis0 (no logs measure it; add logs or pass a base profile)",
        "send_recv.axis1 (no logs measure it; add logs or pass a base profile)",
    )
    origins = dict(result.origins)
    assert origins["effective_flops_per_s"].kind == "default"  # = peak, and says so
    assert origins["bytes_per_element"] == Origin(
        kind="default", detail="assumed 2 (bf16 operands)"
    )
    with pytest.raises(
        ProfileError, match=r"cannot write a profile, nothing gives: all_gather.axis1"
    ):
        profile_toml(result)
    no_peak = fit_profile(ParsedLogs(files=ALL_OPS.files))
    assert no_peak.missing == ("peak_flops_per_s (the datasheet peak or a base profile)",)


def test_one_ring_gets_both_axes_by_default_with_a_note() -> None:
    result = fit_profile(ALL_OPS, **COMPUTE)
    assert result.profile is not None
    assert {(f.record.op.value, f.record.axis) for f in result.links} == {
        (op.value, axis) for op in (AG, RS, SR) for axis in (0, 1)
    }
    assert result.warnings[0] == (
        "3 log(s) do not say which mesh axis they measured; each ring is used for both axes "
        "(the default; an axis map per file picks one): ag.csv, rs.csv, sr.csv"
    )


def test_all_reduce_supplies_what_no_dedicated_log_does() -> None:
    only_ar = ParsedLogs(files=(ring_log("ar.csv", AR, (4, 8)), ring_log("sr.csv", SR, (2,))))
    result = fit_profile(only_ar, **COMPUTE)
    profile = result.profile
    assert profile is not None
    for kind in ("all_gather", "reduce_scatter"):
        link = profile.link(CollectiveKind(kind), 1)
        assert link.bw_bytes_per_s == pytest.approx(1e9, rel=1e-5)
        assert link.t_sync_s == pytest.approx(2e-6, rel=1e-5)
        assert link.t_launch_s == pytest.approx(10e-6, rel=1e-5)
        assert dict(result.origins)[f"{kind}.axis0"].detail == (
            "fit of 24 all_reduce measurements (all-reduce = reduce-scatter + all-gather)"
        )
    (ar0,) = [f.record for f in result.links if f.record.op is AR and f.record.axis == 0]
    assert ar0.used_for == [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER]
    # a dedicated all-gather log wins over the all-reduce, which still supplies reduce-scatter
    both = ParsedLogs(files=(*only_ar.files, ring_log("ag.csv", AG, (2, 4))))
    result = fit_profile(both, **COMPUTE)
    records = {(f.record.op, f.record.axis): f.record for f in result.links}
    assert records[(AR, 0)].used_for == [CollectiveKind.REDUCE_SCATTER]
    assert records[(AG, 0)].used_for == [CollectiveKind.ALL_GATHER]


def test_base_fills_the_gaps_and_is_cited() -> None:
    logs = ParsedLogs(files=(ring_log("ag.csv", AG, (2, 4), axis=1),))
    base = load_profile("tpuv4")
    result = fit_profile(logs, base=base)
    assert result.profile is not None
    assert result.profile.all_gather["axis0"] == base.all_gather["axis0"]
    assert result.profile.all_gather["axis1"].bw_bytes_per_s == pytest.approx(1e9)
    assert result.profile.effective_flops_per_s == base.effective_flops_per_s
    sources = result.profile.sources
    assert "measured from the logs: all_gather.axis1" in sources
    inherited = next(s for s in sources if s.startswith("inherited from base profile 'tpuv4': "))
    assert "all_gather.axis0" in inherited and "memory_bytes" in inherited
    assert "all_gather.axis1" not in inherited
    assert result.profile.description.endswith("other values from base profile 'tpuv4'")


def test_effective_above_peak_is_refused() -> None:
    gemms = tuple(
        GemmMeasurement(m, m, m, "bf16", 2 * m**3 / 5e12, "g.csv", i)
        for i, m in enumerate((512, 1024, 2048))
    )
    logs = ParsedLogs(files=(*ALL_OPS.files, FileLog("g.csv", LogFormat.GEMM, gemms=gemms)))
    with pytest.raises(
        ProfileError, match=r"effective FLOPS 5e\+12 \(fit of 3 GeMMs\) exceeds peak"
    ):
        fit_profile(logs, axis_map={"*": (0, 1)}, peak_flops_per_s=2e12, slice_block=8)


def test_axis_map_errors() -> None:
    with pytest.raises(
        LogFormatError, match=re.escape("--axis-map: 'nope.log' names none of the log files")
    ):
        fit_profile(ALL_OPS, axis_map={"nope.log": (0,), "*": (0, 1)}, **COMPUTE)
    with pytest.raises(LogFormatError, match=r"--axis-map: '\*' maps to \[2\]"):
        fit_profile(ALL_OPS, axis_map={"*": (2,)}, **COMPUTE)


def test_axis_map_precedence() -> None:
    logs = ParsedLogs(files=(ring_log("a.csv", AG, (2, 4), axis=0), ring_log("b.csv", AG, (2, 4))))
    # b.csv has no axis: the op key maps it; a.csv's own axis 0 stands against the op key ...
    result = fit_profile(logs, axis_map={"all_gather": (1,)}, base=load_profile("tpuv4"))
    assert {(f.record.axis, len(f.points)) for f in result.links} == {(0, 24), (1, 24)}
    # ... but a per-file key overrides what the log says
    result = fit_profile(logs, axis_map={"a.csv": (1,), "*": (1,)}, base=load_profile("tpuv4"))
    assert [(f.record.axis, len(f.points)) for f in result.links] == [(1, 48)]


def test_profile_toml_loads_back(tmp_path: Path) -> None:
    result = fit_profile(ALL_OPS, name="lab", axis_map={"*": (0, 1)}, **COMPUTE)
    text = profile_toml(result)
    assert "name =" not in text and text.startswith("# Hardware profile written by meshtune")
    path = tmp_path / "lab.toml"
    path.write_text(text, encoding="utf-8")
    assert load_profile(path) == result.profile


finite = st.floats(min_value=1e-12, max_value=1e15, allow_nan=False, allow_infinity=False)
# Profile values within the plausible ranges of meshtune.units (issue 20).
seconds = st.floats(min_value=0.0, max_value=1.0)
bandwidth = st.floats(min_value=1e3, max_value=1e15)
rate = st.floats(min_value=1e6, max_value=1e18)
text = st.text(min_size=1, max_size=40)
link = st.fixed_dictionaries(
    {"t_launch_s": seconds, "t_sync_s": seconds, "bw_bytes_per_s": bandwidth}
)
axes = st.fixed_dictionaries({"axis0": link, "axis1": link})
fits = st.fixed_dictionaries(
    {
        "op": st.sampled_from([k.value for k in MeasuredOp]),
        "axis": st.sampled_from([0, 1]),
        "used_for": st.lists(st.sampled_from([k.value for k in CollectiveKind]), max_size=2),
        "t_launch_s": finite,
        "t_sync_s": finite,
        "bw_bytes_per_s": finite,
        "points": st.integers(1, 10**6),
        "points_measured": st.integers(1, 10**6),
        "ring_sizes": st.lists(st.integers(1, 4096), max_size=4),
        "r2": st.floats(-1e3, 1.0, allow_nan=False),
        "bw_ci95_bytes_per_s": st.one_of(st.none(), st.tuples(finite, finite)),
        "confounded": st.booleans(),
        "notes": st.lists(text, max_size=3),
    }
)
curve = st.lists(
    st.tuples(st.floats(1.0, 1e15), st.floats(1e-3, 1.0)), max_size=4, unique_by=lambda p: p[0]
).map(lambda ps: [{"flops": f, "efficiency": e} for f, e in sorted(ps)])


@settings(max_examples=60, deadline=None)
@given(
    description=text,
    sources=st.lists(text, min_size=1, max_size=4),
    flops=st.tuples(rate, rate),
    width=st.integers(1, 16),
    block=st.integers(1, 1024),
    ops=st.tuples(axes, axes, axes),
    efficiency=st.one_of(st.none(), st.fixed_dictionaries({"overhead_s": seconds, "curve": curve})),
    calibration=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {
                "tool": text,
                "source_files": st.lists(text, max_size=3),
                "origins": st.dictionaries(
                    text,
                    st.fixed_dictionaries(
                        {
                            "kind": st.sampled_from(["fit", "option", "base", "default"]),
                            "detail": text,
                        }
                    ),
                    max_size=3,
                ),
                "fits": st.lists(fits, max_size=3),
                "notes": st.lists(text, max_size=3),
            }
        ),
    ),
)
def test_toml_round_trips_any_profile(
    tmp_path_factory: pytest.TempPathFactory,
    description: str,
    sources: list[str],
    flops: tuple[float, float],
    width: int,
    block: int,
    ops: tuple[dict[str, object], ...],
    efficiency: dict[str, object] | None,
    calibration: dict[str, object] | None,
) -> None:
    profile = HardwareProfile.model_validate(
        {
            "name": "x",
            "description": description,
            "sources": sources,
            "peak_flops_per_s": max(flops),
            "effective_flops_per_s": min(flops),
            "bytes_per_element": width,
            "slice_block": block,
            "all_gather": ops[0],
            "reduce_scatter": ops[1],
            "send_recv": ops[2],
            "gemm_efficiency": efficiency,
            "calibration": calibration,
        }
    )
    result = CalibrationResult(
        profile=profile,
        calibration=profile.calibration or Calibration(tool="t", source_files=[]),
        links=(),
        compute=None,
        logs=ParsedLogs(files=()),
        warnings=(),
    )
    path = tmp_path_factory.mktemp("toml") / "x.toml"
    path.write_text(profile_toml(result), encoding="utf-8")
    assert load_profile(path) == profile


def test_gemm_logs_alone_update_the_compute_of_a_base() -> None:
    gemms = tuple(
        GemmMeasurement(m, m, m, "fp16", 5e-6 + 2 * m**3 / 150e12, "g.csv", i)
        for i, m in enumerate((512, 2048, 8192))
    )
    base = load_profile("tpuv4")
    result = fit_profile(
        ParsedLogs(files=(FileLog("g.csv", LogFormat.GEMM, gemms=gemms),)), base=base
    )
    assert result.links == () and result.profile is not None
    # the best size, 8192³: 2·8192³ / (5 µs + 2·8192³ / 150 TFLOP/s)
    assert result.profile.effective_flops_per_s == pytest.approx(
        2 * 8192**3 / (5e-6 + 2 * 8192**3 / 150e12), rel=1e-5
    )
    assert result.profile.all_gather == base.all_gather
    assert result.profile.description == (
        "Calibrated by meshtune calibrate from 1 log(s): compute from 3 GeMMs; "
        "other values from base profile 'tpuv4'"
    )
    assert result.profile.gemm_efficiency is not None
    assert result.profile.gemm_efficiency.overhead_s == 0.0  # the curve carries it
    assert result.compute is not None
    assert result.compute.record.overhead_s == pytest.approx(5e-6, rel=1e-3)  # the line fit
    assert dict(result.origins)["gemm_efficiency"].kind == "fit"
