"""Round trips: logs synthesised from known parameters in every format, calibrated back.

Acceptance (the calibrate issue): seeded uniform ±5 % noise, ring sizes 2, 4 and 8, shards from
8 KiB to 512 MiB doubling; bw within 3 %, t_launch and t_sync within 10 %. send_recv is timed
as one ring shift by every benchmark, so its t_sync and t_launch cannot be separated: there the
fit must say so and recover their sum within 10 %.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from logsynth import (
    AG,
    GEMM_EFFECTIVE,
    GEMM_OVERHEAD,
    RINGS,
    RS,
    SR,
    TRUE,
    artifact_log,
    canonical_csv,
    canonical_jsonl,
    close,
    gemm_csv,
    nccl_log,
    osu_log,
)

from meshtune.calibrate import CalibrationResult, LinkFit, fit_profile, parse_logs, profile_toml
from meshtune.specs import HardwareProfile, load_profile

SEED = 20250601


def check_link(fit: LinkFit) -> None:
    t_launch, t_sync, bw = TRUE[fit.op]
    assert close(fit.bw_bytes_per_s, bw, 0.03), (fit.op, fit.bw_bytes_per_s, bw)
    assert fit.min_shard_bytes is None, fit.notes  # one line fits synthetic linear data
    assert fit.loo_mape_ge_1mb is not None and fit.loo_mape_ge_1mb < 0.05
    if fit.op is SR:
        assert fit.confounded and fit.t_sync_s == 0.0
        assert close(fit.t_launch_s, t_launch + t_sync, 0.10), fit.t_launch_s
        assert any("confounded" in note for note in fit.notes)
    else:
        assert not fit.confounded
        assert set(fit.ring_sizes) == set(RINGS)
        assert close(fit.t_launch_s, t_launch, 0.10), (fit.op, fit.t_launch_s, t_launch)
        assert close(fit.t_sync_s, t_sync, 0.10), (fit.op, fit.t_sync_s, t_sync)
        assert fit.t_launch_ci95_s is not None and fit.t_sync_ci95_s is not None
        assert fit.t_sync_ci95_s[0] <= fit.t_sync_s <= fit.t_sync_ci95_s[1]
    assert fit.bw_ci95_bytes_per_s is not None
    assert fit.bw_ci95_bytes_per_s[0] <= fit.bw_bytes_per_s <= fit.bw_ci95_bytes_per_s[1]
    assert fit.r2 > 0.99


def check(result: CalibrationResult, fitted: Iterable[tuple[str, int]]) -> None:
    done = {(fit.op.value, fit.axis) for fit in result.links}
    assert done == set(fitted)
    for fit in result.links:
        check_link(fit)
    for fit in result.links:
        link = result.profile.link(fit.op, fit.axis)
        assert close(link.bw_bytes_per_s, fit.bw_bytes_per_s, 1e-5)


def write(folder: Path, files: dict[str, str]) -> list[Path]:
    paths = []
    for name, text in files.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def tpuv4() -> HardwareProfile:
    return load_profile("tpuv4")


@pytest.mark.parametrize("old", [False, True], ids=["current-layout", "old-layout"])
def test_nccl_tests(tmp_path: Path, tpuv4: HardwareProfile, old: bool) -> None:
    rng = np.random.default_rng(SEED)
    names = {AG: "all_gather", RS: "reduce_scatter", SR: "sendrecv"}
    files = {
        f"{names[op]}_{ranks}gpu.log": nccl_log(op, ranks, rng, old=old)
        for op in (AG, RS, SR)
        for ranks in RINGS
    }
    write(tmp_path, files)
    logs = parse_logs([tmp_path])
    assert len(logs.files) == 9
    result = fit_profile(logs, axis_map={"*": (0,)}, base=tpuv4)
    check(result, [("all_gather", 0), ("reduce_scatter", 0), ("send_recv", 0)])
    # the other axis comes from the base profile, and says so
    assert ("all_gather.axis1", "base profile 'tpuv4'") in result.origins


def test_osu(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    rng = np.random.default_rng(SEED + 1)
    files = {f"osu_allgather_np{p}.txt": osu_log(AG, p, rng, launcher=True) for p in RINGS}
    files |= {f"osu_reduce_scatter_np{p}.txt": osu_log(RS, p, rng, launcher=False) for p in RINGS}
    files["osu_latency.txt"] = osu_log(SR, 2, rng, launcher=False)
    paths = write(tmp_path, files)
    ranks = {f"osu_reduce_scatter_np{p}.txt": p for p in RINGS}
    logs = parse_logs(paths, ranks=ranks)
    result = fit_profile(logs, axis_map={"*": (1,)}, base=tpuv4)
    check(result, [("all_gather", 1), ("reduce_scatter", 1), ("send_recv", 1)])


def test_meshslice_artifact(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    rng = np.random.default_rng(SEED + 2)
    meshes = [(2, 8), (4, 4), (8, 2)]  # x rings 2, 4, 8 and y rings 8, 4, 2
    paths = write(tmp_path, {f"bench_{r}x{c}.out": artifact_log(r, c, rng) for r, c in meshes})
    result = fit_profile(parse_logs(paths), base=tpuv4)  # the log names the axes itself
    check(result, [(op.value, axis) for op in (AG, RS, SR) for axis in (0, 1)])
    assert not any(origin.startswith("base") for field, origin in result.origins if "." in field)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_canonical(tmp_path: Path, tpuv4: HardwareProfile, kind: str) -> None:
    rng = np.random.default_rng(SEED + 3)
    text = canonical_csv(rng) if kind == "csv" else canonical_jsonl(rng)
    paths = write(tmp_path, {f"measured.{kind}": text})
    result = fit_profile(parse_logs(paths), base=tpuv4)
    axis = 0 if kind == "csv" else 1
    check(result, [(op.value, axis) for op in (AG, RS, SR)])


@pytest.mark.parametrize("tflops", [False, True], ids=["seconds", "tflops"])
def test_gemm_effective_flops(tmp_path: Path, tpuv4: HardwareProfile, tflops: bool) -> None:
    rng = np.random.default_rng(SEED + 4)
    paths = write(tmp_path, {"gemm.csv": gemm_csv(rng, tflops=tflops)})
    result = fit_profile(parse_logs(paths), base=tpuv4, peak_flops_per_s=312e12)
    compute = result.compute
    assert compute is not None and compute.dtype == "bf16"
    assert close(compute.effective_flops_per_s, GEMM_EFFECTIVE, 0.03)
    assert compute.overhead_s is not None and close(compute.overhead_s, GEMM_OVERHEAD, 0.25)
    assert compute.half_efficiency_flops is not None
    small = min(compute.points, key=lambda p: p.gemm.flops)
    assert small.efficiency < 0.5  # the 256³ GeMM is overhead-bound
    assert close(result.profile.effective_flops_per_s, GEMM_EFFECTIVE, 0.03)
    assert result.profile.bytes_per_element == 2  # from the dtype, not the base
    assert dict(result.origins)["bytes_per_element"] == "GeMM dtype bf16"


def test_profile_file_round_trip(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    rng = np.random.default_rng(SEED + 5)
    paths = write(tmp_path, {"measured.csv": canonical_csv(rng)})
    result = fit_profile(parse_logs(paths), name="cluster", base=tpuv4)
    out = tmp_path / "cluster.toml"
    out.write_text(profile_toml(result), encoding="utf-8")
    loaded = load_profile(out)
    assert loaded == result.profile
    assert loaded.calibration is not None
    assert loaded.calibration.source_files == [str(paths[0])]
    assert {(f.op.value, f.axis) for f in loaded.calibration.fits} == {
        ("all_gather", 0),
        ("reduce_scatter", 0),
        ("send_recv", 0),
    }
