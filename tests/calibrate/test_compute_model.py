"""The compute model with a calibrated GeMM efficiency (MeshSlice §3.2.2, §5.3.1), and the plan
warnings about a profile's calibrated range."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from meshtune.calibrate import range_warnings
from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.cost.compute import gemm_time
from meshtune.hardware.calibration import Calibration, FitRecord, Origin
from meshtune.hardware.compute import EfficiencyPoint, GemmEfficiency
from meshtune.hardware.profile import HardwareProfile
from meshtune.planner.make import make_plan

F = 242 * 1024**4  # tpuv4's effective FLOP/s


def curve(*points: tuple[float, float], overhead: float = 5e-6) -> GemmEfficiency:
    return GemmEfficiency(
        overhead_s=overhead,
        curve=[EfficiencyPoint(flops=f, efficiency=e) for f, e in points],
    )


# Shaped like measured bf16 GeMMs on a current accelerator: 55 % of the sustained rate at 1024³,
# 80 % at 2048³, 92 % at 4096³, all of it from 8192³ on; 5 µs per call.
REALISTIC = curve(
    (2.0 * 1024**3, 0.55), (2.0 * 2048**3, 0.80), (2.0 * 4096**3, 0.92), (2.0 * 8192**3, 1.0)
)


@pytest.fixture(scope="module")
def tpuv4() -> HardwareProfile:
    return load_profile("tpuv4")


def test_without_efficiency_a_gemm_costs_its_flops_over_f(tpuv4: HardwareProfile) -> None:
    assert tpuv4.gemm_efficiency is None
    # 2 · 1024 · 2048 · 4096 FLOPs at 242 · 1024⁴ FLOP/s = 2^34 / (242 · 2^40) s
    assert gemm_time(tpuv4, 1024, 2048, 4096) == pytest.approx(2**34 / (242 * 2**40), rel=1e-15)


def test_efficiency_curve_by_hand(tpuv4: HardwareProfile) -> None:
    profile = tpuv4.model_copy(update={"gemm_efficiency": REALISTIC})
    f = 2.0 * 2048**3  # on a curve point: 5 µs + f / (0.8 F)
    assert gemm_time(profile, 2048, 2048, 2048) == pytest.approx(5e-6 + f / (0.8 * F))
    # halfway between 1024³ and 2048³ in log(FLOPs): efficiency halfway, (0.55 + 0.80) / 2
    m = 1024 * 2**0.5  # f = sqrt(2·1024³ · 2·2048³)
    assert REALISTIC.efficiency(2 * m**3) == pytest.approx(0.675)
    # outside the curve the end values hold
    assert REALISTIC.efficiency(1.0) == 0.55 and REALISTIC.efficiency(1e18) == 1.0
    assert gemm_time(profile, 1, 1, 1) == pytest.approx(5e-6 + 2 / (0.55 * F))
    assert GemmEfficiency(overhead_s=1e-6).efficiency(1e9) == 1.0  # no curve: overhead only


def test_curve_must_increase_in_flops() -> None:
    with pytest.raises(ValidationError, match="flops must be strictly increasing"):
        curve((1e10, 0.5), (1e9, 0.9))
    with pytest.raises(ValidationError):
        curve((1e10, 1.5))


def test_realistic_efficiency_picks_fewer_slices_for_gpt3(tpuv4: HardwareProfile) -> None:
    """GPT-3 on the paper's 16-chip point (§5.1.1, compute-bound): with every GeMM charged
    FLOPs / F the MLP layers slice 32 ways; small GeMMs being slower (§5.3.1) makes 12 best."""
    gpt3 = load_model("gpt3")
    flat = make_plan(gpt3, tpuv4, 16, shapes=["2x8"])
    real = make_plan(
        gpt3, tpuv4.model_copy(update={"gemm_efficiency": REALISTIC}), 16, shapes=["2x8"]
    )
    assert [layer.config["slices"] for layer in flat.layers] == [12, 6, 32, 32]
    assert [layer.config["slices"] for layer in real.layers] == [12, 6, 12, 12]
    assert real.fc_time_s > flat.fc_time_s


def calibrated(
    *,
    rings: dict[int, list[int]],
    effective: Origin,
    send_recv: dict[int, list[int]] | None = None,
) -> HardwareProfile:
    base = load_profile("tpuv4")
    fits = [
        FitRecord(
            op=op,
            axis=axis,
            used_for=[op],
            t_launch_s=1e-5,
            t_sync_s=1e-6,
            bw_bytes_per_s=1e11,
            points=10,
            points_measured=10,
            ring_sizes=sizes,
            r2=0.99,
        )
        for op, table in (("all_gather", rings), ("send_recv", send_recv or {}))
        for axis, sizes in table.items()
    ]
    calibration = Calibration(
        tool="meshtune test",
        source_files=["ag.log"],
        origins={"effective_flops_per_s": effective},
        fits=fits,
    )
    return base.model_copy(update={"name": "lab", "calibration": calibration})


def test_range_warnings() -> None:
    measured = Origin(kind="fit", detail="fit of 12 GeMMs")
    profile = calibrated(rings={0: [2, 4, 8], 1: [2, 4]}, effective=measured)
    assert range_warnings(profile, 8, 4) == []
    assert range_warnings(profile, 16, 4) == [
        "the 16x4 mesh has rings of 16 chips on axis 0, but profile 'lab' was fitted on rings "
        "of at most 8: the communication times there are extrapolated"
    ]
    assumed = calibrated(
        rings={0: [8], 1: [8]}, effective=Origin(kind="default", detail="ASSUMED equal to peak")
    )
    assert range_warnings(assumed, 8, 8) == [
        "profile 'lab': the compute speed was assumed, not measured (ASSUMED equal to peak); "
        "calibrate it from GeMM timings"
    ]
    assert range_warnings(load_profile("tpuv4"), 64, 64) == []  # no calibration record
    # the kind measured on the shortest rings bounds the range: send_recv up to 2 here
    mixed = calibrated(rings={0: [2, 4, 8]}, effective=measured, send_recv={0: [2]})
    assert mixed.calibration is not None and mixed.calibration.largest_ring(0) == 2


def test_plan_prints_the_range_warnings() -> None:
    result = CliRunner().invoke(
        app,
        [
            "plan",
            "gpt3",
            "--chips",
            "256",
            "--mesh-only",
            "--profile",
            "a100-sxm4-nvswitch",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    warnings = result.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("meshtune: warning: ") for w in warnings)
    assert "rings of" in warnings[0] and "fitted on rings of at most 8" in warnings[0]
    assert warnings[1].endswith(
        "the compute speed was assumed, not measured (given by the user); calibrate it from "
        "GeMM timings"
    )
    assert json.loads(result.stdout)["mesh"]
