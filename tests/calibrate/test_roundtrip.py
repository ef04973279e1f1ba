"""Round trips: logs synthesised from known parameters in every format, calibrated back.

Acceptance (issue 8): seeded uniform ±5 % noise, ring sizes P = 4, 8, 16 and 32, shards from
8 KiB to 512 MiB doubling; bw within 3 %, t_launch and t_sync within 10 %, in every format
(nccl-tests old and current layouts, OSU, the artifact, canonical CSV / JSONL, rccl-tests CSV /
JSON, Markdown tables with times or only bandwidths); an all-reduce-only set recovers the same
parameters as its reduce-scatter + all-gather equivalent. send_recv is timed as one ring shift by
every benchmark, so its t_sync and t_launch cannot be separated: there the fit must say so and
recover their sum within 10 %.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from logsynth import (
    AG,
    AR,
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
    markdown_table,
    nccl_log,
    osu_log,
    rccl_csv,
    rccl_json,
)

from meshtune.calibrate import CalibrationResult, LinkFit, fit_profile, parse_logs, profile_toml
from meshtune.catalog import load_profile
from meshtune.hardware.calibration import Origin
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile

SEED = 20250601


def check_link(fit: LinkFit) -> None:
    r = fit.record
    t_launch, t_sync, bw = TRUE[r.op]
    assert close(r.bw_bytes_per_s, bw, 0.03), (r.op, r.bw_bytes_per_s, bw)
    assert r.min_shard_bytes is None, r.notes  # one line fits synthetic linear data
    assert r.loo_mape_ge_1mb is not None and r.loo_mape_ge_1mb < 0.05
    if r.op is SR:
        assert r.confounded and r.t_sync_s == 0.0
        assert close(r.t_launch_s, t_launch + t_sync, 0.10), r.t_launch_s
        assert any("confounded" in note for note in r.notes)
    else:
        assert not r.confounded
        assert set(r.ring_sizes) == set(RINGS)
        assert close(r.t_launch_s, t_launch, 0.10), (r.op, r.t_launch_s, t_launch)
        assert close(r.t_sync_s, t_sync, 0.10), (r.op, r.t_sync_s, t_sync)
        assert r.t_launch_ci95_s is not None and r.t_sync_ci95_s is not None
        assert r.t_sync_ci95_s[0] <= r.t_sync_s <= r.t_sync_ci95_s[1]
        assert r.rings_consistent is True and [p.ranks for p in r.per_ring] == list(RINGS)
    assert r.bw_ci95_bytes_per_s is not None
    assert r.bw_ci95_bytes_per_s[0] <= r.bw_bytes_per_s <= r.bw_ci95_bytes_per_s[1]
    assert r.r2 > 0.99


def check(result: CalibrationResult, fitted: Iterable[tuple[str, int]]) -> None:
    done = {(fit.record.op.value, fit.record.axis) for fit in result.links}
    assert done == set(fitted)
    for fit in result.links:
        check_link(fit)
    assert result.profile is not None
    for fit in result.links:
        for kind in fit.record.used_for:
            link = result.profile.link(kind, fit.record.axis)
            assert link.bw_bytes_per_s == fit.record.bw_bytes_per_s


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
    assert len(logs.files) == 12
    result = fit_profile(logs, axis_map={"*": (0,)}, base=tpuv4)
    check(result, [("all_gather", 0), ("reduce_scatter", 0), ("send_recv", 0)])
    # the other axis comes from the base profile, and says so
    assert dict(result.origins)["all_gather.axis1"] == Origin(
        kind="base", detail="from base profile 'tpuv4'"
    )


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
    meshes = [(4, 32), (8, 16), (16, 8), (32, 4)]  # x rings 4 .. 32 and y rings 32 .. 4
    paths = write(tmp_path, {f"bench_{r}x{c}.out": artifact_log(r, c, rng) for r, c in meshes})
    result = fit_profile(parse_logs(paths), base=tpuv4)  # the log names the axes itself
    check(result, [(op.value, axis) for op in (AG, RS, SR) for axis in (0, 1)])
    assert not any(origin.kind == "base" for field, origin in result.origins if "." in field)


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
    assert compute is not None and compute.record.dtype == "bf16"
    assert close(compute.record.effective_flops_per_s, GEMM_EFFECTIVE, 0.03)
    overhead = compute.record.overhead_s
    assert overhead is not None and close(overhead, GEMM_OVERHEAD, 0.25)
    assert compute.record.half_efficiency_flops is not None
    small = min(compute.points, key=lambda p: p.gemm.flops)
    assert small.efficiency < 0.5  # the 256³ GeMM is overhead-bound
    assert result.profile is not None
    assert close(result.profile.effective_flops_per_s, GEMM_EFFECTIVE, 0.03)
    assert result.profile.bytes_per_element == 2  # from the dtype, not the base
    assert dict(result.origins)["bytes_per_element"].detail == "GeMM dtype bf16"
    assert result.profile.gemm_efficiency is not None


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


TABLES = {
    "rccl.csv": rccl_csv,
    "rccl.json": rccl_json,
    "sweep.md": lambda op, rng: markdown_table(op, rng, bandwidth_only=False),
    "sweep-bw.md": lambda op, rng: markdown_table(op, rng, bandwidth_only=True),
}


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_result_tables(tmp_path: Path, tpuv4: HardwareProfile, kind: str) -> None:
    rng = np.random.default_rng(SEED + 6)
    names = {AG: "allgather", RS: "reducescatter", SR: "sendrecv"}
    files = {f"{names[op]}_{kind}": TABLES[kind](op, rng) for op in (AG, RS, SR)}
    logs = parse_logs(write(tmp_path, files))
    assert {f.format.value for f in logs.files} == {"table"}
    if kind == "sweep-bw.md":
        assert all("times derived from the algbw column" in f.notes[0] for f in logs.files)
    result = fit_profile(logs, axis_map={"*": (0,)}, base=tpuv4)
    check(result, [("all_gather", 0), ("reduce_scatter", 0), ("send_recv", 0)])
    derived = [n for n in result.calibration.notes if "times derived from the algbw" in n]
    assert len(derived) == (3 if kind == "sweep-bw.md" else 0)  # the report says so


ALL_REDUCE_FORMATS = {
    "nccl": lambda rng, p: nccl_log(AR, p, rng),
    "osu": lambda rng, p: osu_log(AR, p, rng, launcher=True),
    "rccl.csv": lambda rng, p: rccl_csv(AR, rng) if p == RINGS[0] else "",
}


@pytest.mark.parametrize("kind", sorted(ALL_REDUCE_FORMATS))
def test_all_reduce_only_recovers_the_reduce_scatter_all_gather_parameters(
    tmp_path: Path, tpuv4: HardwareProfile, kind: str
) -> None:
    rng = np.random.default_rng(SEED + 7)
    texts = {f"allreduce_{p}.log": ALL_REDUCE_FORMATS[kind](rng, p) for p in RINGS}
    ar_logs = parse_logs(write(tmp_path, {n: t for n, t in texts.items() if t}))
    from_ar = fit_profile(ar_logs, axis_map={"*": (1,)}, base=tpuv4)
    check(from_ar, [("all_reduce", 1)])
    (ar,) = from_ar.links
    assert ar.record.used_for == [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER]
    # the reduce-scatter + all-gather equivalent: the same ring parameters, timed separately
    equivalent = tmp_path / "rs_ag"
    equivalent.mkdir()
    rs_ag = {f"{op.value}_{p}.log": nccl_log(op, p, rng) for op in (AG, RS) for p in RINGS}
    separate = fit_profile(parse_logs(write(equivalent, rs_ag)), axis_map={"*": (1,)}, base=tpuv4)
    assert from_ar.profile is not None and separate.profile is not None
    t_launch, t_sync, bw = TRUE[AR]
    for kind_ in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        derived = from_ar.profile.link(kind_, 1)
        assert close(derived.bw_bytes_per_s, bw, 0.03)
        assert close(derived.t_launch_s, t_launch, 0.10) and close(derived.t_sync_s, t_sync, 0.10)
    ag = separate.profile.link(CollectiveKind.ALL_GATHER, 1)
    derived = from_ar.profile.link(CollectiveKind.ALL_GATHER, 1)
    assert close(derived.bw_bytes_per_s, ag.bw_bytes_per_s, 0.03)
    assert close(derived.t_launch_s, ag.t_launch_s, 0.10)
    assert close(derived.t_sync_s, ag.t_sync_s, 0.10)
