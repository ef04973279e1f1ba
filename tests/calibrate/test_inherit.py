"""``--base`` carries every field the logs do not measure, for every shipped profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshtune.calibrate import FileLog, LogFormat, Measurement, ParsedLogs, fit_profile
from meshtune.calibrate import profile_toml as to_toml
from meshtune.calibrate.inherit import carried_fields
from meshtune.catalog import catalog_names, load_profile
from meshtune.hardware.calibration import MeasuredOp
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile

SHARDS = [8192 * 2**i for i in range(12)]
MEASURED = {"all_gather.axis0", "all_gather.axis1", "reduce_scatter.axis0", "reduce_scatter.axis1"}


def all_reduce_log() -> ParsedLogs:
    """An exact 8-rank all-reduce: 10 µs + 14·(s / 100 GB/s); it supplies AG and RS."""
    op = MeasuredOp.ALL_REDUCE
    rows = tuple(
        Measurement(op, 8, float(s), 10e-6 + 14 * s / 100e9, "ar.log", i)
        for i, s in enumerate(SHARDS)
    )
    return ParsedLogs(files=(FileLog("ar.log", LogFormat.NCCL, rows),))


@pytest.mark.parametrize("name", catalog_names("profiles"))
def test_base_keeps_every_unmeasured_field(name: str, tmp_path: Path) -> None:
    base = load_profile(name)
    result = fit_profile(all_reduce_log(), base=base)
    profile = result.profile
    assert profile is not None
    for field in HardwareProfile.model_fields:
        if field in ("name", "description", "sources", "calibration", *MEASURED_FIELDS):
            continue
        assert getattr(profile, field) == getattr(base, field), field
    assert profile.send_recv == base.send_recv  # no log measured it
    assert profile.all_gather["axis0"].bw_bytes_per_s == pytest.approx(100e9)
    origins = dict(result.origins)
    assert {f for f, o in origins.items() if o.kind == "fit"} == MEASURED
    inherited = {f for f, o in origins.items() if o.kind == "base"}
    for field in ("memory_bytes", "hbm_bytes_per_s", "tiers", "gemm_efficiency"):
        assert (field in inherited) == (getattr(base, field) is not None), field
    assert all(
        o.detail == f"from base profile '{name}'" for f, o in origins.items() if f in inherited
    )
    lines = [s for s in profile.sources if s.startswith(("measured from", "inherited from"))]
    assert lines[0] == "measured from the logs: " + ", ".join(o for o in origins if o in MEASURED)
    assert lines[1].startswith(f"inherited from base profile '{name}': ")
    assert "memory_bytes" in lines[1]  # every shipped profile states its memory
    # the written profile loads back with the same inherited values
    path = tmp_path / "calibrated.toml"
    path.write_text(to_toml(result))
    again = load_profile(path)
    assert again.memory_bytes == base.memory_bytes and again.tiers == base.tiers


MEASURED_FIELDS = ("all_gather", "reduce_scatter", "peak_flops_per_s", "effective_flops_per_s")


def test_without_base_nothing_is_invented() -> None:
    result = fit_profile(all_reduce_log(), peak_flops_per_s=1e15)
    assert result.missing  # send_recv has no log and no base
    origins = dict(result.origins)
    assert not any(o.kind == "base" for o in origins.values())


def test_overlap_defaults_to_every_kind_without_a_base() -> None:
    assert carried_fields(None, {}) == {"overlapped": list(CollectiveKind)}


def test_a_cluster_plan_needs_memory_bytes_a_mesh_plan_does_not(tmp_path: Path) -> None:
    import tomli_w
    from typer.testing import CliRunner

    from meshtune.cli import app

    data = load_profile("tpuv4").model_dump(mode="json", exclude={"name"}, exclude_none=True)
    del data["memory_bytes"]
    path = tmp_path / "nomem.toml"
    path.write_text(tomli_w.dumps(data))
    runner = CliRunner()
    cluster = runner.invoke(app, ["plan", "gpt3", "--chips", "256", "--profile", str(path)])
    assert cluster.exit_code == 2
    assert "profile 'nomem' has no memory_bytes" in cluster.output
    assert "--mesh-only" in cluster.output
    mesh = runner.invoke(
        app, ["plan", "gpt3", "--chips", "256", "--profile", str(path), "--mesh-only"]
    )
    assert mesh.exit_code == 0, mesh.output
