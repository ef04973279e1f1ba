"""The sped-up search gives the plans of the exhaustive one (issue 17).

For every shipped model × profile × chip count in {256, 1,000, 6,144, 65,536} (weak scaling,
the default cluster plan) the plan file must be byte for byte the one recorded in
``data/identical_plans.json`` (its SHA-256; the split and step are kept to read a failure), or
fail with the recorded message. The records were made by the search before memoisation and
array-priced pruning (commit bb5e5f1).

When the step model or a cost formula changes on purpose, re-record with the configuration
pruning switched off (every configuration priced, as before issue 17)::

    python tests/test_identical_plans.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from meshtune.cluster import ClusterOptions
from meshtune.errors import MeshtuneError
from meshtune.plan import make_plan
from meshtune.search import phase2
from meshtune.specs import catalog_names, load_model, load_profile

RECORDS = Path(__file__).resolve().parent / "data" / "identical_plans.json"
CHIPS = (256, 1_000, 6_144, 65_536)


def cases() -> list[tuple[str, str, int]]:
    """Every (model, profile, chips) of the module docstring."""
    return [
        (model, profile, chips)
        for model in catalog_names("models")
        for profile in catalog_names("profiles")
        for chips in CHIPS
    ]


def record(model: str, profile: str, chips: int) -> dict[str, Any]:
    """What the test compares for one case: the plan's digest, split and step, or the error."""
    try:
        plan = make_plan(load_model(model), load_profile(profile), chips, cluster=ClusterOptions())
    except MeshtuneError as exc:
        return {"error": str(exc)}
    text = plan.to_json()
    cluster = plan.cluster
    assert cluster is not None
    return {
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "split": (
            f"DP {cluster.dp} x PP {cluster.pp} (v {cluster.vpp}) x {plan.mesh.rows}x"
            f"{plan.mesh.cols}, {cluster.micro_batches} micro-batches, ZeRO-{cluster.zero}"
        ),
        "step_s": cluster.step.step_s,
    }


RECORDED: dict[str, dict[str, Any]] = json.loads(RECORDS.read_text())


@pytest.mark.parametrize(("model", "profile", "chips"), cases())
def test_plan_is_the_recorded_one(model: str, profile: str, chips: int) -> None:
    assert record(model, profile, chips) == RECORDED[f"{model}/{profile}/{chips}"]


def test_every_case_is_recorded() -> None:
    assert sorted(RECORDED) == sorted(f"{m}/{p}/{n}" for m, p, n in cases())


def _write() -> None:
    """Re-record every case with every configuration priced (no pruning)."""
    phase2.layer_bounds = lambda *a: np.full(len(a[-1]), -np.inf)  # type: ignore[assignment]
    out = {f"{m}/{p}/{n}": record(m, p, n) for m, p, n in cases()}
    RECORDS.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: python {sys.argv[0]} --write")
    _write()
