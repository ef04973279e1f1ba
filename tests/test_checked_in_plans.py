"""Plan files committed under plans/ stay true: they parse, the planner still produces them from
their own inputs, and they verify on the virtual mesh (the CI use the project is built for)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshtune.catalog import load_profile
from meshtune.plan import read_plan
from meshtune.verify.check import rederive
from meshtune.verify.run import verify_plan

PLANS = sorted((Path(__file__).resolve().parents[1] / "plans").glob("*.json"))


def test_there_is_a_checked_in_plan() -> None:
    assert PLANS, "plans/ should hold at least one example plan file"


@pytest.mark.parametrize("path", PLANS, ids=[p.stem for p in PLANS])
def test_checked_in_plan_is_reproduced_and_verifies(path: Path) -> None:
    plan = read_plan(path.read_text(encoding="utf-8"), str(path))
    inputs = plan.inputs
    profile = load_profile(inputs.profile)
    assert profile.content_hash() == inputs.profile_hash, "the profile changed since the plan"
    again = rederive(plan, inputs.model, profile)
    fresh = again.model_dump(exclude={"tool_version"})
    assert fresh == plan.model_dump(exclude={"tool_version"})
    assert verify_plan(plan).ok
