"""A discrete-event replay of each pass's schedule, and its trace-event file (MeshSlice Fig. 4, 5).

A pass is a list of :class:`Task` s: a name, the resource it occupies (``"compute"``, or the
rings of mesh axis 0 or 1), a duration and the tasks it waits for. Each resource is exclusive
and runs its tasks in list order (a stream, as a chip's compute unit and its per-direction
links do); :func:`replay` starts every task at ``max(resource free, dependencies done)``.

An algorithm supplies its task graph through :data:`TASK_GRAPHS` (name → builder), so the
replay, the trace writer and the terminal view know no algorithm. MeshSlice (and Collective,
which is MeshSlice with S = 1) follows Figure 5's software pipelining, iteration s = 0 … S − 1:

* the collectives of iteration s (the gathers of s; for LS / RS also the reduce-scatter of s)
  run on the rings of their mesh axis, while the GeMM of s − 1 computes;
* the GeMM of s waits for the gathers of s; the reduce-scatter of s waits for the GeMM of s;
* double buffering: the gathers of s reuse the buffer of s − 2, so they wait for GeMM s − 2.

Durations come from the cost model's parts, :func:`meshtune.cost.collectives.collective_time`
and :func:`meshtune.cost.compute.gemm_time` (§3.2.2), not from the pass total, so that the
replayed makespan equalling ``meshslice_pass(...).total_s`` (prologue + (S − 1)·steady +
epilogue) cross-checks the closed form against the schedule it summarises.

:func:`chrome_trace` writes the Chrome trace-event format (``ph: "X"`` complete events with
µs timestamps, one process per layer and one thread per resource), which Perfetto UI and
chrome://tracing open; :func:`validate_trace` checks a trace's required keys, phases and that
no two events of one track overlap.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from meshtune.cost.collectives import collective_time
from meshtune.cost.compute import gemm_time
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.engines.passes import plan_passes
from meshtune.errors import EngineError, PlanFileError, ProfileError
from meshtune.mesh import Mesh
from meshtune.plan import Plan
from meshtune.specs import CollectiveKind, HardwareProfile

Resource = Literal["compute", "axis0", "axis1"]
RESOURCES: tuple[Resource, ...] = ("compute", "axis0", "axis1")


@dataclass(frozen=True)
class Task:
    """One piece of work on one exclusive resource, after its dependencies."""

    name: str
    resource: Resource
    duration_s: float
    after: tuple[str, ...] = ()
    kind: str = "gemm"  # gemm | all_gather | reduce_scatter
    iteration: int = 0


@dataclass(frozen=True)
class Event:
    """A replayed task: when it ran."""

    task: Task
    start_s: float
    end_s: float


def replay(tasks: Sequence[Task]) -> list[Event]:
    """Start every task at max(its resource is free, its dependencies are done), in list order.

    Raises ``ValueError`` for a duplicate name, a negative duration, or a dependency on a task
    that is unknown or listed later (the list must be in a dependency-respecting order).
    """
    end: dict[str, float] = {}
    free: dict[str, float] = dict.fromkeys(RESOURCES, 0.0)
    events = []
    for task in tasks:
        if task.name in end:
            raise ValueError(f"task '{task.name}' is listed twice")
        if task.duration_s < 0:
            raise ValueError(f"task '{task.name}' has a negative duration {task.duration_s}")
        missing = [d for d in task.after if d not in end]
        if missing:
            raise ValueError(f"task '{task.name}' waits for {missing}, not listed before it")
        start = max([free[task.resource], *(end[d] for d in task.after)])
        finish = start + task.duration_s
        end[task.name] = finish
        free[task.resource] = finish
        events.append(Event(task, start, finish))
    return events


def makespan(events: Sequence[Event]) -> float:
    """When the last event ends (0 for none)."""
    return max((e.end_s for e in events), default=0.0)


def meshslice_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, slices: int) -> list[Task]:
    """The task graph of one MeshSlice GeMM (module docstring; sizes as in §3.2.2).

    On the logical r × c mesh (P = r·c; the transposed mesh for a transposed ``op``) with
    ``e`` bytes per element, one iteration moves: OS an AG_col of m·k/(P·S) and an AG_row of
    k·n/(P·S) elements; LS an AG_row of n·k/(P·S) and an RdS_col to m·n/(P·S); RS an AG_col of
    k·m/(P·S) and an RdS_row to m·n/(P·S); and computes the local GeMM of Figure 5. Rings of one
    chip add no task.
    """
    if slices < 1:
        raise ValueError(f"slices must be >= 1, got {slices}")
    (r, row_axis), (c, col_axis) = mesh.logical(op.transposed)
    p, e, s = r * c, profile.bytes_per_element, slices
    m, n, k = op.m, op.n, op.k
    local = {
        Dataflow.OS: (m / r, n / c, k / s),
        Dataflow.LS: (m / r, n / s, k / c),
        Dataflow.RS: (m / s, n / c, k / r),
    }[op.dataflow]
    gemm = gemm_time(profile, *local)
    ag, rds = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
    # (kind, ring size, physical axis, elements of the whole matrix whose sub-shard moves)
    gathers, scatter = {
        Dataflow.OS: ([(ag, c, col_axis, m * k), (ag, r, row_axis, k * n)], None),
        Dataflow.LS: ([(ag, r, row_axis, n * k)], (rds, c, col_axis, m * n)),
        Dataflow.RS: ([(ag, c, col_axis, k * m)], (rds, r, row_axis, m * n)),
    }[op.dataflow]

    def comm(kind: CollectiveKind, ring: int, axis: int, elements: int, it: int) -> Task | None:
        if ring == 1:
            return None
        seconds = collective_time(profile.link(kind, axis), ring, elements / (p * s) * e).total_s
        label = "AG" if kind is ag else "RdS"
        direction = "row" if axis == row_axis else "col"
        resource: Resource = "axis0" if axis == 0 else "axis1"
        return Task(f"{label}_{direction}[{it}]", resource, seconds, (), kind.value, it)

    tasks: list[Task] = []
    for it in range(s):
        buffer = (f"GeMM[{it - 2}]",) if it >= 2 else ()
        needed = []
        for spec in gathers:
            task = comm(*spec, it)
            if task is not None:
                tasks.append(Task(task.name, task.resource, task.duration_s, buffer, task.kind, it))
                needed.append(task.name)
        tasks.append(Task(f"GeMM[{it}]", "compute", gemm, tuple(needed), "gemm", it))
        if scatter is not None:
            task = comm(*scatter, it)
            if task is not None:
                done = (f"GeMM[{it}]",)
                tasks.append(Task(task.name, task.resource, task.duration_s, done, task.kind, it))
    return tasks


def collective_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, slices: int) -> list[Task]:
    """Collective 2D GeMM (Figure 2b): MeshSlice's graph with one slice, whatever ``slices``."""
    return meshslice_tasks(op, mesh, profile, 1)


TaskGraph = Callable[[GemmOp, Mesh, HardwareProfile, int], list[Task]]

TASK_GRAPHS: dict[str, TaskGraph] = {
    "meshslice": meshslice_tasks,
    "collective": collective_tasks,
}


def pass_tasks(
    algorithm: str, op: GemmOp, mesh: Mesh, profile: HardwareProfile, slices: int
) -> list[Task]:
    """The task graph of ``op`` under ``algorithm``; ``KeyError``-free: unknown names raise
    ``ValueError`` naming the known ones."""
    if algorithm not in TASK_GRAPHS:
        known = ", ".join(TASK_GRAPHS)
        raise ValueError(f"no timeline for algorithm '{algorithm}'; known: {known}")
    return TASK_GRAPHS[algorithm](op, mesh, profile, slices)


# --------------------------------------------------------------------------- trace events

_TIDS: dict[Resource, int] = {"compute": 0, "axis0": 1, "axis1": 2}
_TRACK_NAMES: dict[Resource, str] = {
    "compute": "compute",
    "axis0": "axis 0 ring (P_r, inter-row)",
    "axis1": "axis 1 ring (P_c, inter-column)",
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
    finite non-negative times, and overlapping X events on one (pid, tid) track."""
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
        spans.sort()
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            if start < end - 1e-6 * max(1.0, abs(end)):
                problems.append(f"pid {pid} tid {tid}: '{second}' starts before '{first}' ends")
    return problems


def plan_timelines(
    plan: Plan, profile: HardwareProfile, layer: str | None = None
) -> list[PassTimeline]:
    """Replay every pass of ``plan`` (or of its layer ``layer``) at full size, end to end.

    ``profile`` must be the plan's own (same content hash). Raises :class:`ProfileError` when
    it is not, :class:`PlanFileError` for an unknown layer name.
    """
    if profile.content_hash() != plan.inputs.profile_hash:
        raise ProfileError(
            f"profile '{profile.name}' is not the one the plan was made with (its content "
            "hash differs); re-derive the plan with this profile"
        )
    names = [item.name for item in plan.layers]
    if layer is not None and layer not in names:
        raise PlanFileError(f"layer '{layer}' is not in the plan; its layers: {', '.join(names)}")
    mesh = Mesh(plan.mesh.rows, plan.mesh.cols)
    out: list[PassTimeline] = []
    offset = 0.0
    for job in plan_passes(plan, "full", profile):
        if layer is not None and job.layer != layer:
            continue
        if job.algorithm not in TASK_GRAPHS:
            raise EngineError(
                f"layer {job.layer}: algorithm '{job.algorithm}' has no timeline; "
                f"supported: {', '.join(TASK_GRAPHS)}"
            )
        events = replay(pass_tasks(job.algorithm, job.op, mesh, profile, job.slices))
        out.append(PassTimeline(job.layer, job.op.pass_.value, offset, tuple(events)))
        offset += makespan(events)
    return out
