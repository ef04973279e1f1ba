"""Which network tier each level of a split lands on (issue 16, finding 3): the spans the step
model prices, by the same lookup, and the plan report's line.

Hand-worked on ``h100-8gpu-nodes`` (nvlink inside 8-GPU nodes, then the network): a 4×2 mesh
has axis 1 over 2 chips and axis 0 over 8 (one node: nvlink); PP 4 hops over 4·8 = 32 chips
and DP 32 rings over 32·4·8 = 1024 (the network); EP 2 over 2·8 = 16 chips and CP 2 over
16 (the network).
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from meshtune.catalog import load_model, load_profile
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import LevelTier, level_tiers, mesh_profile
from meshtune.planner.make import make_plan
from meshtune.report.plan import render_plan
from meshtune.step.comms import dp_profiles
from meshtune.step.moe import all_to_all_link
from meshtune.step.options import ClusterOptions


@pytest.fixture(scope="module")
def h100() -> HardwareProfile:
    return load_profile("h100-8gpu-nodes")


def test_levels_of_a_split_hand_worked(h100: HardwareProfile) -> None:
    assert level_tiers(h100, Mesh(4, 2), pp=4, dp=32) == (
        LevelTier("TP axis 1", 2, 2, "nvlink"),
        LevelTier("TP axis 0", 4, 8, "nvlink"),
        LevelTier("PP", 4, 32, "network"),
        LevelTier("DP", 32, 1024, "network"),
    )
    assert level_tiers(h100, Mesh(2, 2), cp=2, ep=2, dp=8) == (
        LevelTier("TP axis 1", 2, 2, "nvlink"),
        LevelTier("TP axis 0", 2, 4, "nvlink"),
        LevelTier("CP", 2, 8, "nvlink"),
        LevelTier("EP", 2, 8, "nvlink"),
        LevelTier("DP", 8, 64, "network"),
    )


def test_a_profile_without_tiers_names_none() -> None:
    assert level_tiers(load_profile("tpuv4"), Mesh(4, 4), pp=2, dp=2) == ()


@pytest.mark.parametrize(
    ("mesh", "cp", "ep", "pp", "dp"),
    [(Mesh(4, 2), 1, 1, 4, 32), (Mesh(1, 8), 2, 1, 2, 4), (Mesh(2, 2), 1, 2, 1, 8)],
)
def test_the_tier_named_is_the_one_the_step_model_prices(
    h100: HardwareProfile, mesh: Mesh, cp: int, ep: int, pp: int, dp: int
) -> None:
    tiers = {t.name: t for t in h100.tiers or []}
    named = {t.level: tiers[t.tier] for t in level_tiers(h100, mesh, cp=cp, ep=ep, pp=pp, dp=dp)}
    kind = CollectiveKind.ALL_GATHER
    costed = mesh_profile(h100, mesh)
    for axis, level in ((1, "TP axis 1"), (0, "TP axis 0")):
        if level in named:
            assert costed.link(kind, axis) == named[level].all_gather
    dp_profile, pp_profile = dp_profiles(h100, tp=mesh.chips * cp, dp=dp, pp=pp)
    if "DP" in named:
        assert dp_profile.link(kind, 2) == named["DP"].all_gather
    if "PP" in named:
        assert pp_profile.link(CollectiveKind.SEND_RECV, 2) == named["PP"].send_recv
    if "CP" in named:
        _, ring = dp_profiles(h100, tp=mesh.chips, dp=1, pp=cp)
        assert ring.link(CollectiveKind.SEND_RECV, 2) == named["CP"].send_recv
    if "EP" in named:
        assert all_to_all_link(h100, ep * mesh.chips) == named["EP"].all_to_all


def test_the_plan_report_names_the_tier_of_each_level(h100: HardwareProfile) -> None:
    plan = make_plan(load_model("gpt3"), h100, 64, batch=32, cluster=ClusterOptions(pp=2))
    assert plan.cluster is not None
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(render_plan(plan, None, h100))
    cluster = plan.cluster
    expected = level_tiers(
        h100, plan.mesh.to_mesh(), cp=cluster.cp, ep=cluster.ep, pp=cluster.pp, dp=cluster.dp
    )
    assert expected
    line = next(row for row in out.getvalue().splitlines() if row.startswith("tiers: "))
    assert line == "tiers: " + ", ".join(
        f"{t.level} {t.degree} → {t.tier} ({t.span} chips)" for t in expected
    )
    bare = io.StringIO()
    Console(file=bare, width=200, color_system=None).print(render_plan(plan))
    assert "tiers: " not in bare.getvalue()
