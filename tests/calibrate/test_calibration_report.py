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
from meshtune.catalog import load_profile
from meshtune.hardware.calibration import MeasuredOp
from meshtune.report.calibration import render_calibration

AG, AR = MeasuredOp.ALL_GATHER, MeasuredOp.ALL_REDUCE


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


def cells(text: str, label: str) -> list[str]:
    """The cells of the table row that starts with ``label``."""
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines()]
    return next(row for row in rows if row[0] == label)


def test_report_shows_fit_regime_compute_and_provenance() -> None:
    text = render()
    assert "Communication fit: time = t_launch + steps·(t_sync + shard/bw)" in text
    # exact data: 40 µs + 7·s / 200 GB/s above the 1 MiB protocol switch, so the fit is exact
    assert cells(text, "all_gather axis 0") == [
        "all_gather axis 0",
        "8",
        "9/17 points, shards ≥2 MiB (auto)",  # 2 MiB .. 512 MiB
        "40 (40–40)",
        "0 (confounded)",
        "200 (200–200)",
        "1.0000",
        "14.2% → 2.3%",
    ]
    # F is the best size's throughput: 2·4096³ / (10 µs + 2·4096³ / 100 TFLOP/s) = 99.28
    title = " ".join(text.split())  # the title wraps to the table's width
    assert "effective 99.28 TFLOP/s (best size), line fit overhead 10 µs per GeMM" in title
    assert cells(text, "256 × 256 × 256") == [
        "256 × 256 × 256",
        "0.03355",
        "10.3 µs",
        "3.247",
        "3%",
    ]
    assert cells(text, "all_gather.axis1") == [
        "all_gather.axis1",
        "base: from base profile 'tpuv4'",
    ]
    assert cells(text, "gemm_efficiency") == [
        "gemm_efficiency",
        "fit: efficiency curve of 3 GeMMs, achieved / the best of them",
    ]
    assert "Notes" in text and "bandwidth-dominated regime, shards >= 2 MiB" in text


def test_report_at_80_columns_in_a_pipe_hides_nothing() -> None:
    text = render(width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    lines = [line.strip() for line in text.splitlines()]
    start = lines.index("all_gather axis 0") + 1
    assert lines[start : start + 7] == [
        "P            8",
        "fit          9/17 points, shards ≥2 MiB (auto)",
        "t_launch µs  40 (40–40)",
        "t_sync µs    0 (confounded)",
        "bw GB/s      200 (200–200)",
        "R²           1.0000",
        "LOO MAPE     14.2% → 2.3%",
    ]


def test_report_names_what_an_all_reduce_fit_supplies() -> None:
    rings = (4, 8)
    shards = [8192 * 2**i for i in range(14)]
    points = tuple(
        Measurement(AR, p, float(s), 10e-6 + 2 * (p - 1) * (2e-6 + s / 1e9), "ar.log", i)
        for i, (p, s) in enumerate((p, s) for p in rings for s in shards)
    )
    logs = ParsedLogs(files=(FileLog("ar.log", LogFormat.NCCL, measurements=points),))
    result = fit_profile(logs, axis_map={"*": (0,)}, base=load_profile("tpuv4"))
    console = Console(width=140, record=True, color_system=None)
    console.print(render_calibration(result))
    text = console.export_text()
    assert cells(text, "all_reduce axis 0 → all_gather, reduce_scatter") == [
        "all_reduce axis 0 → all_gather, reduce_scatter",
        "4, 8",
        "28/28 points, all sizes",
        "10 (10–10)",
        "2 (2–2)",
        "1 (1–1)",
        "1.0000",
        "0.0%",
    ]


def test_per_ring_table_and_the_split_it_suggests() -> None:
    shards = [8192 * 2**i for i in range(14)]

    def time(p: int, s: int) -> float:  # 200 GB/s rings up to 8 chips, 25 GB/s beyond
        return 10e-6 + (p - 1) * (2e-6 + s / (200e9 if p <= 8 else 25e9))

    points = tuple(
        Measurement(AG, p, float(s), time(p, s), "ag.log", i)
        for i, (p, s) in enumerate((p, s) for p in (4, 8, 16, 32) for s in shards)
    )
    logs = ParsedLogs(files=(FileLog("ag.log", LogFormat.NCCL, measurements=points),))
    result = fit_profile(logs, axis_map={"*": (0,)}, base=load_profile("tpuv4"))
    console = Console(width=140, record=True, color_system=None)
    console.print(render_calibration(result))
    text = console.export_text()
    assert cells(text, "all_gather axis 0")[1] == "4, 8, 16, 32"  # the fit's row
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines()]
    per_ring = [r for r in rows if r[0] == "all_gather axis 0" and r[1].isdigit()]
    assert [(r[1], r[4], r[5]) for r in per_ring] == [
        ("4", "200", "0.0%"),
        ("8", "200", "0.0%"),
        ("16", "25", "0.0%"),
        ("32", "25", "0.0%"),
    ]
    assert "P = 4–8: bw 200 GB/s; P = 16–32: bw 25 GB/s" in " ".join(text.split())
