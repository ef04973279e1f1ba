"""``meshtune check``: is every committed plan still right? One verdict per plan, for CI.

For each plan file, from nothing but the plan itself (no command line to retype):

1. the inputs it records are compared with today's (:func:`changed_inputs`): the model spec in
   the catalog against the one the plan echoes (field by field), the profile's content hash
   against the recorded one, meshtune's version against the one that wrote the plan (a new
   version may carry a new cost model);
2. the plan is re-derived from those inputs (:func:`rederive`: the same options
   :func:`meshtune.verify.drift.plan_args` gives the command line, ``--mesh-only`` included) and
   compared field by field (:func:`meshtune.verify.drift.plan_drift`);
3. ``verify --strict`` runs (:func:`meshtune.verify.run.verify_plan`): consistency, then the plan's
   GeMMs on the NumPy virtual mesh.

The verdict is ``ok``, ``stale`` (the re-derived plan differs; the changed inputs come first,
then the differing fields) or ``FAILED`` (verify found a failed check).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from meshtune._version import __version__
from meshtune.catalog import load_model, load_profile
from meshtune.errors import MeshtuneError
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan
from meshtune.planner.make import plan_again
from meshtune.verify.drift import Drift, plan_drift
from meshtune.verify.run import VerifyReport, verify_plan

DETAIL_LINES = 12
"""Field differences shown per stale plan (the count of the rest follows)."""


@dataclass(frozen=True)
class PlanCheck:
    """What :func:`check_plan` found for one plan file."""

    source: str
    changed: tuple[str, ...]
    drifts: tuple[Drift, ...]
    verify: VerifyReport | None
    problem: str | None = None

    @property
    def verdict(self) -> str:
        """``ok``, ``stale`` or ``FAILED`` (verify failed, or the plan could not be re-derived)."""
        if self.problem is not None or (self.verify is not None and not self.verify.ok):
            return "FAILED"
        return "stale" if self.drifts else "ok"

    @property
    def ok(self) -> bool:
        """The verdict is ``ok``."""
        return self.verdict == "ok"

    def line(self) -> str:
        """The one-line verdict: ``plans/x.json: ok (up to date, verified: 12 passes)``."""
        if self.problem is not None:
            return f"{self.source}: FAILED: {self.problem}"
        passes = len(self.verify.checks) if self.verify is not None else 0
        verified = f"verified: {passes} passes" if self.verify is not None else "not verified"
        if self.verify is not None and not self.verify.ok:
            failures = self.verify.failures()
            return f"{self.source}: FAILED: verify: {failures[0]} ({len(failures)} failure(s))"
        if self.verdict == "ok":
            return f"{self.source}: ok (up to date, {verified})"
        first = self.changed[0] if self.changed else "no recorded input changed"
        return f"{self.source}: stale: {first}; {len(self.drifts)} field(s) differ"

    def details(self, limit: int = DETAIL_LINES) -> list[str]:
        """The changed inputs, then up to ``limit`` differing fields (committed → re-derived)."""
        out = [f"  input: {c}" for c in self.changed]
        out += [f"  {d}" for d in self.drifts[:limit]]
        if len(self.drifts) > limit:
            out.append(f"  … and {len(self.drifts) - limit} more field(s)")
        return out


def _model_changes(recorded: ModelSpec, current: ModelSpec) -> list[str]:
    was, now = recorded.model_dump(), current.model_dump()
    fields = [f"{k} {was.get(k)!r} → {now.get(k)!r}" for k in now if was.get(k) != now.get(k)]
    if not fields:
        return []
    return [f"model {recorded.name} changed: {', '.join(fields)}"]


def changed_inputs(plan: Plan, model: ModelSpec, profile: HardwareProfile) -> list[str]:
    """What differs between the inputs ``plan`` records and today's ``model`` / ``profile`` /
    meshtune (module docstring, step 1), most telling first."""
    out = _model_changes(plan.inputs.model, model)
    recorded = plan.inputs.profile_hash
    if profile.content_hash() != recorded:
        out.append(
            f"profile {profile.name} changed (content hash {recorded[7:19]}… → "
            f"{profile.content_hash()[7:19]}…)"
        )
    if plan.tool_version != __version__:
        out.append(f"meshtune {plan.tool_version} → {__version__} (cost model may differ)")
    return out


def rederive(plan: Plan, model: ModelSpec, profile: HardwareProfile) -> Plan:
    """``plan`` made again from its recorded options with ``model`` and ``profile`` (those of
    today's catalog): chips, batch, sequence, dataflow mode, algorithm, shapes, the cluster
    levels (none: ``--mesh-only``) and ``top`` (in files that predate its record, the number of
    recorded candidates, and the re-derived plan leaves it unrecorded too)."""
    inputs = plan.inputs
    again = plan_again(inputs, model, profile, top=inputs.asked_top(len(plan.candidates)))
    if inputs.top is None:
        return again.model_copy(update={"inputs": again.inputs.model_copy(update={"top": None})})
    return again


def check_plan(plan: Plan, text: str, source: str, *, verify: bool = True) -> PlanCheck:
    """Check one plan file (``text`` as committed, ``plan`` as read): module docstring.

    A model or profile no longer in the catalog, or inputs that no longer plan (infeasible),
    is a FAILED verdict naming it; it does not raise.
    """
    try:
        model = load_model(plan.inputs.model.name)
        profile = load_profile(plan.inputs.profile)
    except MeshtuneError as exc:
        return PlanCheck(source, (), (), None, f"input not in the catalog: {exc}")
    changed = changed_inputs(plan, model, profile)
    try:
        fresh = rederive(plan, model, profile)
    except MeshtuneError as exc:
        return PlanCheck(source, tuple(changed), (), None, f"cannot re-derive: {exc}")
    drifts = plan_drift(text, source, fresh)
    if not drifts:  # nothing that matters changed (a new version with the same numbers)
        return PlanCheck(source, (), (), verify_plan(plan, strict=True) if verify else None)
    return PlanCheck(source, tuple(changed), tuple(drifts), None)


def check_json(results: list[PlanCheck]) -> str:
    """The verdicts as JSON: one object per plan (``source``, ``verdict``, ``changed``,
    ``drifts``, ``failures``)."""
    data = [
        {
            "source": r.source,
            "verdict": r.verdict,
            "changed": list(r.changed),
            "drifts": [str(d) for d in r.drifts],
            "failures": ([r.problem] if r.problem else [])
            + (r.verify.failures() if r.verify is not None else []),
        }
        for r in results
    ]
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
