"""``calibrate`` fits the all-to-all link expert parallelism prices (``meshtune.step.moe``).

nccl-tests ``alltoall_perf`` times one all-to-all of a buffer holding one shard per rank:
``t_launch + (P − 1)·(t_sync + shard / bw)``, the form of
:func:`meshtune.step.moe.all_to_all_s`. Synthetic logs (:mod:`logsynth`, ±5 % noise) written
from known parameters must come back as the profile's ``all_to_all`` (no tiers) or a tier's
(intra-node and network rings fitted apart); a base profile's tier all-to-alls survive a
recalibration of the tiers that measured none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from logsynth import A2A, AG, RS, SR, TRUE, close, nccl_log, placed
from pydantic import ValidationError
from rich.console import Console

from meshtune.calibrate import fit_profile, parse_logs, profile_toml
from meshtune.calibrate.tiers import INTRA, NETWORK
from meshtune.catalog import load_profile
from meshtune.hardware.calibration import FitRecord
from meshtune.hardware.links import LinkParams
from meshtune.report.calibration import tiers_table
from meshtune.step.moe import all_to_all_link

INTRA_A2A = (30e-6, 4e-6, 150e9)
NETWORK_A2A = (60e-6, 10e-6, 20e9)
NETWORK_LINKS = (40e-6, 8e-6, 25e9)


def _write(
    folder: Path,
    name: str,
    op: object,
    ranks: int,
    hosts: int,
    params: tuple[float, float, float],
    monkeypatch: pytest.MonkeyPatch,
    rng: np.random.Generator,
) -> Path:
    monkeypatch.setitem(TRUE, op, params)
    path = folder / name
    path.write_text(placed(nccl_log(op, ranks, rng), ranks, hosts))  # type: ignore[arg-type]
    return path


def _recovered(link: LinkParams | None, truth: tuple[float, float, float]) -> None:
    assert link is not None
    t_launch, t_sync, bw = truth
    assert close(link.bw_bytes_per_s, bw, 0.03), (link, truth)
    assert close(link.t_launch_s, t_launch, 0.15), (link, truth)
    assert close(link.t_sync_s, t_sync, 0.15), (link, truth)


def _intra_a2a(
    folder: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> list[Path]:
    return [
        _write(folder, f"a2a_{p}.log", A2A, p, 1, INTRA_A2A, monkeypatch, rng) for p in (2, 4, 8)
    ]


def test_an_all_to_all_log_gives_the_profiles_all_to_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A profile without tiers (tpuv4): the fit is its all_to_all, priced at every span.
    logs = parse_logs(_intra_a2a(tmp_path, monkeypatch, np.random.default_rng(3)))
    result = fit_profile(logs, base=load_profile("tpuv4"))
    profile = result.profile
    assert profile is not None and profile.tiers is None
    _recovered(profile.all_to_all, INTRA_A2A)
    assert all_to_all_link(profile, 64) == profile.all_to_all
    assert result.calibration.origins["all_to_all"].kind == "fit"
    assert [f.record.used_for for f in result.links] == [[A2A], [A2A]]  # axis 0 and its mirror
    assert not any("not used" in n for n in result.calibration.notes)
    assert "all_to_all" in profile_toml(result)


def test_the_slower_axis_stands_for_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(4)
    fast = (30e-6, 4e-6, 200e9)
    paths = [_write(tmp_path, f"x{p}.log", A2A, p, 1, fast, monkeypatch, rng) for p in (2, 4)]
    paths += [_write(tmp_path, f"y{p}.log", A2A, p, 1, INTRA_A2A, monkeypatch, rng) for p in (2, 4)]
    axis_map = {str(p): (0,) if p.name.startswith("x") else (1,) for p in paths}
    result = fit_profile(parse_logs(paths), base=load_profile("tpuv4"), axis_map=axis_map)
    assert result.profile is not None and result.profile.all_to_all is not None
    assert close(result.profile.all_to_all.bw_bytes_per_s, INTRA_A2A[2], 0.03)
    used = {f.record.axis: f.record.used_for for f in result.links}
    assert used == {0: [], 1: [A2A]}
    assert any(
        "all_to_all axis 0: not used in the profile (the slower axis's" in n
        for n in result.calibration.notes
    )


def test_a_base_profiles_tiers_keep_pricing_all_to_alls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One node's log cannot stand for the network: the base's per-tier all-to-alls stay, and
    # the report says why the fit is not used.
    base = load_profile("h100-8gpu-nodes")
    logs = parse_logs(_intra_a2a(tmp_path, monkeypatch, np.random.default_rng(5)))
    result = fit_profile(logs, base=base)
    assert result.profile is not None
    assert result.profile.tiers == base.tiers and result.profile.all_to_all == base.all_to_all
    assert all(f.record.used_for == [] for f in result.links)
    assert any(
        "not used in the profile (base profile 'h100-8gpu-nodes' prices all-to-alls per "
        "network tier" in n
        for n in result.calibration.notes
    )


def _cluster(folder: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> list[Path]:
    """Network rings of every kind over 2 and 4 hosts (the intra-node tier from the base)."""
    return [
        _write(folder, f"{op.value}_{p}_net.log", op, p, hosts, NETWORK_LINKS, monkeypatch, rng)
        for op in (AG, RS, SR)
        for p, hosts in ((16, 2), (32, 4))
    ]


def test_recalibrated_tiers_keep_the_base_tiers_all_to_alls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: fitting the network tier from logs that time no all-to-all used to drop the
    # base tiers' all_to_all, and with it every EP split of the profile.
    base = load_profile("h100-8gpu-nodes")
    assert base.tiers is not None
    logs = parse_logs(_cluster(tmp_path, monkeypatch, np.random.default_rng(6)))
    result = fit_profile(logs, base=base)
    profile = result.profile
    assert profile is not None and profile.tiers is not None
    assert [t.name for t in profile.tiers] == [INTRA, NETWORK]
    assert [t.all_to_all for t in profile.tiers] == [t.all_to_all for t in base.tiers]
    origins = result.calibration.origins
    assert origins[f"tiers.{NETWORK}.all_to_all"].kind == "base"
    assert origins[f"tiers.{NETWORK}.all_gather"].kind == "fit"


def test_intra_and_network_all_to_alls_fit_their_tiers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(7)
    paths = _cluster(tmp_path, monkeypatch, rng) + _intra_a2a(tmp_path, monkeypatch, rng)
    paths += [
        _write(tmp_path, f"a2a_{p}_net.log", A2A, p, hosts, NETWORK_A2A, monkeypatch, rng)
        for p, hosts in ((16, 2), (32, 4))
    ]
    result = fit_profile(parse_logs(paths), base=load_profile("h100-8gpu-nodes"))
    profile = result.profile
    assert profile is not None and profile.tiers is not None
    intra, network = profile.tiers
    _recovered(intra.all_to_all, INTRA_A2A)
    _recovered(network.all_to_all, NETWORK_A2A)
    assert profile.all_to_all is None  # the tiers price every span
    assert all_to_all_link(profile, 8) == intra.all_to_all
    assert all_to_all_link(profile, 64) == network.all_to_all
    a2a = [
        f.record for f in result.links if f.record.op is A2A and f.record.mirrored_from_axis is None
    ]
    assert sorted(str(r.tier) for r in a2a) == ["None", NETWORK]
    assert all(r.used_for == [A2A] for r in a2a)
    table = tiers_table(result)
    assert table is not None
    console = Console(width=120, record=True)
    console.print(table)
    rows = [line for line in console.export_text().splitlines() if "all_to_all" in line]
    assert len(rows) == 2 and all(row.rstrip("│ ").endswith("fit") for row in rows)


def test_a_fit_record_never_supplies_an_all_reduce() -> None:
    record = {
        "op": "all_reduce",
        "axis": 0,
        "used_for": ["all_reduce"],
        "t_launch_s": 1e-5,
        "t_sync_s": 0.0,
        "bw_bytes_per_s": 1e9,
        "points": 2,
        "points_measured": 2,
        "ring_sizes": [8],
        "r2": 1.0,
    }
    with pytest.raises(ValidationError, match="no profile entry"):
        FitRecord.model_validate(record)
    FitRecord.model_validate({**record, "used_for": ["all_gather", "reduce_scatter"]})
