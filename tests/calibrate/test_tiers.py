"""Tier calibration: intra-node and inter-node rings fitted apart into ``[[tiers]]`` (issue 16).

Synthetic nccl-tests logs of a cluster of 8-GPU nodes, whose ``Rank`` lines place the ranks on
hosts: rings inside one host follow the intra-node parameters, rings over several hosts the
network's (time = t_launch + steps·(t_sync + shard/bw), ±5 % noise, as logsynth).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from logsynth import AG, RS, SR, TRUE, close, nccl_log, placed
from typer.testing import CliRunner

from meshtune.calibrate import fit_profile, parse_logs, profile_toml
from meshtune.calibrate.tiers import INTRA, NETWORK
from meshtune.catalog import load_profile
from meshtune.cli import app
from meshtune.errors import LogFormatError
from meshtune.hardware.links import CollectiveKind, LinkParams

NODE = 8
INTRA_PARAMS = (20e-6, 2e-6, 300e9)
NETWORK_PARAMS = (40e-6, 8e-6, 25e9)


def cluster_logs(
    folder: Path, monkeypatch: pytest.MonkeyPatch, *, seed: int = 16, intra: bool = True
) -> list[Path]:
    rng = np.random.default_rng(seed)
    paths: list[Path] = []

    def write(name: str, op: object, ranks: int, hosts: int, params: tuple[float, ...]) -> None:
        for key in (AG, RS, SR):
            monkeypatch.setitem(TRUE, key, params)
        path = folder / name
        path.write_text(placed(nccl_log(op, ranks, rng), ranks, hosts))  # type: ignore[arg-type]
        paths.append(path)

    if intra:
        for ranks in (2, 4, 8):
            for op, name in ((AG, "ag"), (RS, "rs")):
                write(f"{name}_{ranks}.log", op, ranks, 1, INTRA_PARAMS)
        write("sr_8.log", SR, 8, 1, INTRA_PARAMS)
    for ranks, hosts in ((2, 2), (4, 4), (16, 2), (32, 4)):
        for op, name in ((AG, "ag"), (RS, "rs")):
            write(f"{name}_{ranks}_net.log", op, ranks, hosts, NETWORK_PARAMS)
    write("sr_16_net.log", SR, 16, 2, NETWORK_PARAMS)
    return paths


def recovered(link: LinkParams, truth: tuple[float, float, float], *, one_step: bool) -> None:
    t_launch, t_sync, bw = truth
    assert close(link.bw_bytes_per_s, bw, 0.03), (link, truth)
    if one_step:  # send_recv: one shift, t_launch holds t_launch + t_sync
        assert close(link.t_launch_s + link.t_sync_s, t_launch + t_sync, 0.10), (link, truth)
    else:
        assert close(link.t_launch_s, t_launch, 0.10), (link, truth)
        assert close(link.t_sync_s, t_sync, 0.10), (link, truth)


@pytest.mark.parametrize("seed", [16, 17, 18])
def test_two_tier_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    logs = parse_logs(cluster_logs(tmp_path, monkeypatch, seed=seed))
    result = fit_profile(logs, peak_flops_per_s=989e12)
    profile = result.profile
    assert profile is not None and profile.tiers is not None
    inner, outer = profile.tiers
    assert (inner.name, inner.chips, outer.name, outer.chips) == (INTRA, NODE, NETWORK, None)
    for tier, truth in ((inner, INTRA_PARAMS), (outer, NETWORK_PARAMS)):
        for kind in CollectiveKind:
            recovered(getattr(tier, kind.value), truth, one_step=kind is CollectiveKind.SEND_RECV)
    # the mesh axes keep the intra-node fits
    assert profile.all_gather["axis0"] == inner.all_gather
    origins = dict(result.origins)
    assert origins["tiers"].kind == "fit" and "2, 4 hosts" in origins["tiers"].detail
    assert origins["tiers.network.all_gather"].kind == "fit"
    records = [f for f in profile.calibration.fits if f.tier == NETWORK]  # type: ignore[union-attr]
    assert {f.op.value for f in records} == {"all_gather", "reduce_scatter", "send_recv"}
    # and the written profile loads back with its tiers
    path = tmp_path / "cluster.toml"
    path.write_text(profile_toml(result))
    assert load_profile(path).tiers == profile.tiers


def test_network_logs_alone_fit_the_network_tier_of_a_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = load_profile("h100-8gpu-nodes")
    assert base.tiers is not None
    logs = parse_logs(cluster_logs(tmp_path, monkeypatch, intra=False))
    result = fit_profile(logs, base=base)
    profile = result.profile
    assert profile is not None and profile.tiers is not None
    inner, outer = profile.tiers
    assert inner.all_gather == base.tiers[0].all_gather  # inherited, and said so
    assert dict(result.origins)["tiers.intra-node.all_gather"].kind == "base"
    recovered(outer.all_gather, NETWORK_PARAMS, one_step=False)
    assert profile.all_gather == base.all_gather  # the axes are the base's nvlink


def test_different_systems_need_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = cluster_logs(tmp_path, monkeypatch)
    other = paths[0].read_text().replace("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X")
    paths[0].write_text(other)
    logs = parse_logs(paths)
    with pytest.raises(LogFormatError, match=r"2 different systems .*pass --pool"):
        fit_profile(logs, peak_flops_per_s=989e12)
    pooled = fit_profile(logs, peak_flops_per_s=989e12, pool=True)
    assert any("--pool: logs of 2 different systems" in w for w in pooled.warnings)
    refused = CliRunner().invoke(app, ["calibrate", str(tmp_path), "--peak-flops", "989e12"])
    assert refused.exit_code == 2 and "--pool" in refused.stderr
    report = CliRunner().invoke(
        app, ["calibrate", str(tmp_path), "--peak-flops", "989e12", "--pool"]
    )
    assert report.exit_code == 0, report.output
    assert "Network tiers" in report.stdout


def test_no_tiers_when_a_kind_has_no_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [p for p in cluster_logs(tmp_path, monkeypatch) if p.name != "sr_16_net.log"]
    result = fit_profile(parse_logs(paths), peak_flops_per_s=989e12)
    assert result.profile is not None and result.profile.tiers is None
    assert not any(key.startswith("tiers") for key in result.calibration.origins)
    assert any(
        w.startswith("no network tier: the logs do not measure every kind") for w in result.warnings
    )
