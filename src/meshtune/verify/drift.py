"""Plan drift: does a committed plan file still say what the planner says today?

A plan file is a frozen result (:mod:`meshtune.plan`); it goes stale when its model spec, its
profile or the cost model changes. :func:`plan_drift` compares the committed file's JSON with a
freshly derived plan, field by field, ignoring only ``tool_version`` (a release that changes no
number does not make a plan stale), and lists every difference as ``path: committed →
re-derived`` with JSON paths such as ``layers[3].slices``. :func:`plan_args` gives the
``meshtune plan`` options that re-derive a plan from its recorded inputs, for CI scripts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from meshtune._toml import describe_validation_error
from meshtune.errors import PlanFileError
from meshtune.plan import Plan, PlanInputs, plan_json
from meshtune.step.options import option_args

IGNORED = frozenset({"tool_version"})
_SHOWN = 72  # characters of a value shown in a diff line


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


def _show(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


@dataclass(frozen=True)
class Drift:
    """One field whose committed value differs from the re-derived one."""

    path: str
    committed: Any
    rederived: Any

    def __str__(self) -> str:
        return f"{self.path}: {_show(self.committed)} → {_show(self.rederived)}"


def diff_json(committed: Any, rederived: Any, path: str = "") -> list[Drift]:
    """Every leaf where two JSON values differ, depth first, keys in the re-derived order.

    Objects are compared key by key (a key on one side only is ``(absent)`` on the other),
    lists item by item (extra items likewise), anything else by equality (``1 != 1.0`` is not a
    difference, ``True`` and ``1`` are).
    """
    if isinstance(committed, dict) and isinstance(rederived, dict):
        out: list[Drift] = []
        keys = list(rederived) + [k for k in committed if k not in rederived]
        for key in keys:
            where = f"{path}.{key}" if path else str(key)
            out += diff_json(committed.get(key, ABSENT), rederived.get(key, ABSENT), where)
        return out
    if isinstance(committed, list) and isinstance(rederived, list):
        out = []
        for i in range(max(len(committed), len(rederived))):
            a = committed[i] if i < len(committed) else ABSENT
            b = rederived[i] if i < len(rederived) else ABSENT
            out += diff_json(a, b, f"{path}[{i}]")
        return out
    same = type(committed) is type(rederived) or (
        isinstance(committed, int | float)
        and isinstance(rederived, int | float)
        and not isinstance(committed, bool)
        and not isinstance(rederived, bool)
    )
    if same and committed == rederived:
        return []
    return [Drift(path or "(plan)", committed, rederived)]


def plan_drift(committed_text: str, source: str, fresh: Plan) -> list[Drift]:
    """Differences between the committed plan file's text and ``fresh`` (see module doc)."""
    committed = plan_json(committed_text, source)
    rederived = json.loads(fresh.to_json())
    for key in IGNORED:
        committed.pop(key, None)
        rederived.pop(key, None)
    return diff_json(committed, rederived)


def plan_args(plan: dict[str, Any]) -> list[str]:
    """``meshtune plan`` arguments that re-derive ``plan`` (a plan file's JSON) from its inputs.

    The model is named by its catalog name (``inputs.model.name``), so a changed catalog entry
    shows as drift; ``--top`` the recorded one (older files: the number of recorded
    candidates); a plan without
    ``inputs.levels`` was planned on one mesh (``--mesh-only``). The inputs are validated as a
    plan file's (strict types; model and profile are catalog names, never paths or options),
    since the arguments go to a command line. Raises :class:`PlanFileError` when they are not
    those of a plan file.
    """
    try:
        inputs = PlanInputs.model_validate_json(json.dumps(plan["inputs"]), strict=True)
        top = inputs.asked_top(len(plan["candidates"]))
    except (KeyError, TypeError) as exc:
        raise PlanFileError(f"plan inputs are incomplete: {exc}") from None
    except ValidationError as exc:
        raise PlanFileError(
            f"plan inputs are incomplete or invalid: {describe_validation_error(exc)}"
        ) from None
    args = [inputs.model.name, "--chips", str(inputs.chips)]
    args += ["--batch", str(inputs.batch), "--seq", str(inputs.seq_len)]
    args += ["--profile", inputs.profile, "--dataflow", inputs.dataflow_mode]
    if inputs.shapes is not None:
        args += ["--shapes", ",".join(inputs.shapes)]
    args += ["--algorithm", inputs.algorithm]
    moe = inputs.model.moe
    if moe is not None and moe.capacity_factor != 1.0:
        args += ["--capacity-factor", repr(moe.capacity_factor)]
    levels = inputs.levels
    args += ["--mesh-only"] if levels is None else option_args(levels.options())
    return [*args, "--top", str(top)]


def drift_report(drifts: list[Drift], source: str, *, limit: int = 40) -> str:
    """Text for a person: one line when up to date, else a heading and one line per field."""
    if not drifts:
        return f"{source}: up to date (identical to the re-derived plan, tool_version aside)\n"
    lines = [f"{source}: stale, {len(drifts)} field(s) differ (committed → re-derived):"]
    lines += [f"  {d}" for d in drifts[:limit]]
    if len(drifts) > limit:
        lines.append(f"  … and {len(drifts) - limit} more")
    return "\n".join(lines) + "\n"
