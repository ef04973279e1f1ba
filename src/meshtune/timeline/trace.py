"""A plan's passes replayed, and written as a trace-event file (Perfetto / chrome://tracing):
one track per resource (compute and each mesh axis's ring)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from meshtune.cost.compute import at_precision
from meshtune.cost.config import Config
from meshtune.dataflow import GemmOp
from meshtune.errors import PlanFileError, ProfileError
from meshtune.hardware.profile import HardwareProfile
from meshtune.plan import Plan, recorded_layer
from meshtune.timeline.graphs import pass_tasks
from meshtune.timeline.replay import Event, Resource, makespan, replay

_TIDS: dict[Resource, int] = {"compute": 0, "axis0": 1, "axis1": 2, "axis2": 3}


_TRACK_NAMES: dict[Resource, str] = {
    "compute": "compute",
    "axis0": "axis 0 ring (P_r, inter-row)",
    "axis1": "axis 1 ring (P_c, inter-column)",
    "axis2": "axis 2 ring (depth)",
}


@dataclass(frozen=True)
class PassTimeline:
    """One replayed pass, placed at ``offset_s`` on a layer's process."""

    layer: str
    pass_name: str
    offset_s: float
    events: tuple[Event, ...]

    @property
    def total_s(self) -> float:
        """The pass's makespan."""
        return makespan(self.events)


def chrome_trace(passes: Sequence[PassTimeline]) -> dict[str, Any]:
    """Trace-event JSON (``{"traceEvents": [...]}``) of ``passes``: pid per layer, tid per track.

    Timestamps and durations are in µs; each pass's events are shifted by its offset.
    """
    pids: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for timeline in passes:
        if timeline.layer not in pids:
            pid = pids[timeline.layer] = len(pids) + 1
            events.append(_meta("process_name", pid, 0, timeline.layer))
            events.append(_meta("process_sort_index", pid, 0, pid, key="sort_index"))
            for resource, tid in _TIDS.items():
                events.append(_meta("thread_name", pid, tid, _TRACK_NAMES[resource]))
        pid = pids[timeline.layer]
        for event in timeline.events:
            events.append(
                {
                    "name": event.task.name,
                    "cat": f"{timeline.pass_name},{event.task.kind}",
                    "ph": "X",
                    "ts": (timeline.offset_s + event.start_s) * 1e6,
                    "dur": (event.end_s - event.start_s) * 1e6,
                    "pid": pid,
                    "tid": _TIDS[event.task.resource],
                    "args": {"pass": timeline.pass_name, "iteration": event.task.iteration},
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _meta(name: str, pid: int, tid: int, value: object, key: str = "name") -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": {key: value}}


_REQUIRED = {"X": ("name", "ph", "ts", "dur", "pid", "tid"), "M": ("name", "ph", "pid", "args")}


def validate_trace(trace: object) -> list[str]:
    """Problems of a trace-event JSON object: required keys per phase, known phases (X, M),
    finite non-negative times, and X events on one (pid, tid) track that overlap without one
    holding the other (Perfetto draws an event inside another as nested)."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["a trace is an object with a 'traceEvents' list"]
    problems: list[str] = []
    tracks: dict[tuple[Any, Any], list[tuple[float, float, str]]] = {}
    for i, event in enumerate(trace["traceEvents"]):
        if not isinstance(event, dict):
            problems.append(f"event {i}: not an object")
            continue
        phase = event.get("ph")
        if phase not in _REQUIRED:
            problems.append(f"event {i}: phase {phase!r} is not one of {sorted(_REQUIRED)}")
            continue
        missing = [key for key in _REQUIRED[phase] if key not in event]
        if missing:
            problems.append(f"event {i}: missing {', '.join(missing)}")
            continue
        if phase == "X":
            ts, dur = event["ts"], event["dur"]
            numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (ts, dur))
            if not numbers or not (0 <= ts < float("inf")) or not (0 <= dur < float("inf")):
                problems.append(f"event {i}: ts {ts!r} / dur {dur!r} are not finite and >= 0")
                continue
            tracks.setdefault((event["pid"], event["tid"]), []).append(
                (ts, ts + dur, event["name"])
            )
    for (pid, tid), spans in tracks.items():
        spans.sort(key=lambda span: (span[0], -span[1]))
        open_spans: list[tuple[float, float, str]] = []  # enclosing events (nesting is allowed)
        for start, end, name in spans:
            while open_spans and start >= open_spans[-1][1] - _slack(open_spans[-1][1]):
                open_spans.pop()
            if open_spans and end > open_spans[-1][1] + _slack(open_spans[-1][1]):
                problems.append(
                    f"pid {pid} tid {tid}: '{name}' starts before '{open_spans[-1][2]}' ends"
                )
                continue
            open_spans.append((start, end, name))
    return problems


def _slack(t: float) -> float:
    """Rounding allowed between two event edges at time ``t`` (µs)."""
    return 1e-6 * max(1.0, abs(t))


MAX_TIMELINE_CHIPS = 16384
"""Largest mesh :func:`plan_timelines` replays (a ring of P chips has up to P events a step)."""


def plan_timelines(
    plan: Plan, profile: HardwareProfile, layer: str | None = None
) -> list[PassTimeline]:
    """Replay every pass of ``plan`` (or of its layer ``layer``) at full size, end to end (a
    grouped layer's pass once per GeMM of its group, :class:`~meshtune.model.layers.FcLayer`).

    ``profile`` must be the plan's own (same content hash). Raises :class:`ProfileError` when
    it is not, :class:`PlanFileError` for an unknown layer name or a mesh of more than
    :data:`MAX_TIMELINE_CHIPS` chips. Read plan files with :func:`meshtune.verify.run.load_plan`.
    """
    if profile.content_hash() != plan.inputs.profile_hash:
        raise ProfileError(
            f"profile '{profile.name}' is not the one the plan was made with (its content "
            "hash differs); re-derive the plan with this profile"
        )
    profile = at_precision(profile, plan.inputs.precision)  # the FC GeMMs' rates
    mesh = plan.mesh.to_mesh()
    if mesh.chips > MAX_TIMELINE_CHIPS:
        raise PlanFileError(
            f"mesh {mesh.label} has {mesh.chips:,} chips, more than the timeline replays "
            f"({MAX_TIMELINE_CHIPS:,}): its events grow with the ring sizes"
        )
    names = [item.name for item in plan.layers]
    if layer is not None and layer not in names:
        raise PlanFileError(f"layer '{layer}' is not in the plan; its layers: {', '.join(names)}")
    out: list[PassTimeline] = []
    offset = 0.0
    for name, algorithm, config, op in plan_ops(plan):
        if layer is not None and name != layer:
            continue
        events = replay(pass_tasks(algorithm, op, mesh, profile, config))
        for _ in range(op.groups):  # a grouped layer's GeMMs, one after another
            out.append(PassTimeline(name, op.pass_.value, offset, tuple(events)))
            offset += makespan(events)
    return out


def plan_ops(plan: Plan) -> list[tuple[str, str, Config, GemmOp]]:
    """(layer, algorithm, configuration, pass) of every pass of ``plan`` at full size, for any
    registered algorithm (unlike :func:`meshtune.engines.passes.plan_passes`, which only lists
    the algorithms an engine implements).

    Raises :class:`PlanFileError` for an unregistered algorithm or a configuration that is not
    legal on the plan's mesh.
    """
    out: list[tuple[str, str, Config, GemmOp]] = []
    for layer in plan.layers:
        algorithm, config, full = recorded_layer(plan, layer)
        out.extend((layer.name, algorithm.name, config, op) for op in full.ops)
    return out
