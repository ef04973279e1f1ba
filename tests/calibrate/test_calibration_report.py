"""The rich report of a calibration (meshtune.report.calibration), rendered to text."""

from __future__ import annotations

from rich.console import Console

from meshtune.calibrate import (
    FileLog,
    GemmMeasurement,
    LogFormat,
    Measurement,
    ParsedLogs,
    fit_profile,
)
from meshtune.report.calibration import render_calibration
from meshtune.specs import CollectiveKind, load_profile

AG = CollectiveKind.ALL_GATHER


def gpu_like(s: int) -> float:
    """One 8-GPU ring: a slower protocol below 1 MiB shards and a 100 µs floor, then a line."""
    line = 40e-6 + 7 * s / 200e9
    return max(100e-6, line * (1.8 if s < 2**20 else 1.0))


def render(width: int = 140) -> str:
    shards = [8192 * 2**i for i in range(17)]
    ring = tuple(
        Measurement(AG, 8, float(s), gpu_like(s), "ag.log", i) for i, s in enumerate(shards)
    )
    gemms = tuple(
        GemmMeasurement(m, m, m, "bf16", 10e-6 + 2 * m**3 / 100e12, "g.csv", i)
        for i, m in enumerate((256, 1024, 4096))
    )
    logs = ParsedLogs(
        files=(
            FileLog("ag.log", LogFormat.NCCL, measurements=ring),
            FileLog("g.csv", LogFormat.GEMM, gemms=gemms),
        )
    )
    result = fit_profile(logs, name="lab", axis_map={"*": (0,)}, base=load_profile("tpuv4"))
    console = Console(width=width, record=True, color_system=None)
    console.print(render_calibration(result))
    return console.export_text()


def test_report_shows_fit_regime_compute_and_provenance() -> None:
    text = render()
    assert "Communication fit: time = t_launch + steps·(t_sync + shard/bw)" in text
    row = next(line for line in text.splitlines() if "all_gather" in line and "│" in line)
    assert "9/17" in row  # 2 MiB .. 512 MiB in the fit
    assert "≥2 MiB auto" in text and "confounded" in text
    assert "200" in row and "40" in row  # bw GB/s, t_launch µs
    assert "Compute fit (bf16): effective 100" in text
    assert "all_gather.axis1" in text and "base profile 'tpuv4'" in text
    assert "Notes" in text and "bandwidth-dominated regime, shards >= 2 MiB" in text


def test_report_fits_a_narrow_terminal() -> None:
    text = render(width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
