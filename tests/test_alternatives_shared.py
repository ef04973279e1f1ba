"""The alternatives share one split space and search only each family's best (issue 17): the
table must be the one of searching each family's whole plan from scratch.

:func:`meshtune.compare.alternatives.alternatives` searches the families of a cluster plan on one
:class:`~meshtune.search.space.SplitSpace` with ``top = 1``;
:func:`~meshtune.compare.alternatives.replan` makes each algorithm's whole plan on its own, as
before the sharing. The suite runs a sample (a dense GPT on TPUs at a power of two, a GQA model on
GPU nodes at an awkward chip count); with ``MESHTUNE_ALL_PLANS=1`` every shipped model × profile at
256 and 1,000 chips.
"""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.compare.alternatives import FAMILIES, alternatives, describe_split, plan_time, replan
from meshtune.errors import InfeasibleError, MeshtuneError
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan
from meshtune.planner.make import make_plan
from meshtune.search.levels import search_cluster
from meshtune.search.space import SplitSpace, sharing
from meshtune.step.options import ClusterOptions
from test_identical_plans import cases as every_plan

SAMPLE = [
    ("gpt3", "tpuv4", 256),
    ("llama3-70b", "h100-8gpu-nodes", 96),
]


def cases() -> list[tuple[str, str, int]]:
    """The sample, or the identical-plans cases at 256 and 1,000 chips."""
    if os.environ.get("MESHTUNE_ALL_PLANS") != "1":
        return SAMPLE
    return [case for case in every_plan() if case[2] <= 1_000]


def _unshared(plan: Plan, profile: HardwareProfile, family: str) -> tuple[float, str, str] | None:
    """The family's best whole plan, each algorithm searched from scratch (top 5)."""
    best = None
    for name in FAMILIES[family]:
        try:
            found = replan(plan, profile, name)
        except InfeasibleError:
            continue
        candidate = (plan_time(found)[1], name, describe_split(found))
        if best is None or candidate[:2] < best[:2]:
            best = candidate
    return best


@pytest.mark.parametrize(("model", "profile", "chips"), cases())
def test_shared_alternatives_are_the_unshared_ones(model: str, profile: str, chips: int) -> None:
    hardware = load_profile(profile)
    try:
        plan = make_plan(load_model(model), hardware, chips, cluster=ClusterOptions())
    except MeshtuneError:
        pytest.skip("no cluster plan to compare")
    found = alternatives(plan, hardware)
    for entry in found.entries:
        expected = _unshared(plan, hardware, entry.family)
        if expected is None:
            assert entry.algorithm is None and entry.reason, entry
            continue
        seconds, name, split = expected
        assert (entry.algorithm, entry.split) == (name, split), entry.family
        assert entry.time_s == pytest.approx(seconds, rel=1e-9, abs=0.0), entry.family


def test_searches_on_one_space_rank_as_fresh_ones(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    options = ClusterOptions()
    space = SplitSpace.build(gpt3, tpuv4, 256, batch=128, seq_len=2048, options=options)
    for name in ("meshslice", "wang", "megatron", "meshslice"):
        kwargs = dict(batch=128, seq_len=2048, algorithms=[REGISTRY[name]], options=options)
        shared = search_cluster(gpt3, tpuv4, 256, space=space, **kwargs)  # type: ignore[arg-type]
        fresh = search_cluster(gpt3, tpuv4, 256, **kwargs)  # type: ignore[arg-type]
        assert [(c.label, c.step_s) for c in shared.ranked] == [
            (c.label, c.step_s) for c in fresh.ranked
        ]
        assert (shared.rejected, shared.searched) == (fresh.rejected, fresh.searched)


def test_a_space_of_other_inputs_is_refused(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    space = SplitSpace.build(gpt3, tpuv4, 64, batch=32, seq_len=2048)
    with pytest.raises(ValueError, match="other inputs"):
        search_cluster(gpt3, tpuv4, 64, batch=16, seq_len=2048, space=space)


def test_a_sharing_scope_reuses_the_space_of_the_same_inputs(
    gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    def build(batch: int) -> SplitSpace:
        return SplitSpace.build(gpt3, tpuv4, 256, batch=batch, seq_len=2048)

    assert build(128) is not build(128)  # outside a scope every build is fresh
    with sharing():
        first = build(128)
        assert build(128) is first
        assert build(64) is not first
    assert build(128) is not first


def test_the_plan_command_builds_one_space_for_its_plan_and_alternatives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[SplitSpace] = []
    init = SplitSpace.__init__

    def counted(self: SplitSpace, *args: object, **kwargs: object) -> None:
        built.append(self)
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SplitSpace, "__init__", counted)
    result = CliRunner().invoke(app, ["plan", "gpt3", "--chips", "256"])
    assert result.exit_code == 0, result.output
    assert "Alternatives: each family" in result.stdout
    assert len(built) == 1
