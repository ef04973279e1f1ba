"""A discrete-event replay of each pass's schedule, and its trace-event file (MeshSlice Fig. 4, 5).

A pass is a list of :class:`Task` s: a name, the resource it occupies (``"compute"``, or the
rings of mesh axis 0, 1 or 2), a duration and the tasks it waits for. Each resource is exclusive
and runs its tasks in list order (a stream, as a chip's compute unit and its per-axis links do);
:func:`replay` starts every task at ``max(resource free, dependencies done)``. A communication
the profile does not overlap with compute (``blocks``; §4.1, §5.3: AG/RdS on the real TPUv4)
also holds the compute stream while it runs.

Every registered algorithm supplies its task graph through :data:`TASK_GRAPHS` (name → builder
``(op, mesh, profile, config) -> tasks``), so the replay, the trace writer and the terminal view
know no algorithm. The builders follow the schedules their cost modules' docstrings describe,
as a software-pipelined loop (Figure 5), iteration s = 0 … n − 1:

* the communications that feed GeMM s (MeshSlice's gathers, SUMMA's broadcasts, the ring shifts
  of Wang, Cannon and PrimePar) are issued when GeMM s − 1 starts: they wait for those of
  s − 1 and, double-buffered, for GeMM s − 2; GeMM s waits for them;
* the communications that drain GeMM s (reduce-scatters, reduces, the running sums of Wang's
  split reduce-scatter) wait for GeMM s; Cannon's LS / RS running sum of step s moves beside
  GeMM s + 1, as its cost model's stages say (issued when GeMM s + 1 starts);
* a second hop (PrimePar's diagonal shift) waits for the first hop of its iteration;
* what the closed form leaves outside the loop (Wang's plain collective, Cannon's skew and
  unskew, Tesseract's depth all-reduce, the one-sided GeMM's first get and last accumulate)
  runs before the first GeMM or after the last.

Durations come from the cost model's parts (``Comm.time(profile)`` of each algorithm's own
communication lists and :func:`meshtune.cost.compute.gemm_time`), never from the pass total, so
that the replayed makespan equalling ``algorithm.cost(...).total_s`` (prologue + (n − 1) ·
steady + epilogue) cross-checks each closed form against the schedule it summarises.

:func:`chrome_trace` writes the Chrome trace-event format (``ph: "X"`` complete events with
µs timestamps, one process per layer and one thread per resource), which Perfetto UI and
chrome://tracing open; :func:`validate_trace` checks a trace's required keys, phases and that
no two events of one track overlap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from meshtune.algorithm import Config
from meshtune.cost import cannon, megatron, meshslice, onesided, primepar, summa, tesseract, wang
from meshtune.cost.compute import at_precision, gemm_time
from meshtune.cost.schedule import Comm
from meshtune.cost.tiers import ring_profile
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.errors import PlanFileError, ProfileError
from meshtune.mesh import Mesh
from meshtune.plan import Plan, recorded_layer
from meshtune.specs import CollectiveKind, HardwareProfile

Resource = Literal["compute", "axis0", "axis1", "axis2"]
RESOURCES: tuple[Resource, ...] = ("compute", "axis0", "axis1", "axis2")
_AXES: tuple[Resource, ...] = ("axis0", "axis1", "axis2")


@dataclass(frozen=True)
class Task:
    """One piece of work on one exclusive resource, after its dependencies.

    ``blocks``: a communication that cannot overlap compute also holds the compute stream.
    """

    name: str
    resource: Resource
    duration_s: float
    after: tuple[str, ...] = ()
    kind: str = "gemm"  # gemm | all_gather | reduce_scatter | send_recv
    iteration: int = 0
    blocks: bool = False


@dataclass(frozen=True)
class Event:
    """A replayed task: when it ran."""

    task: Task
    start_s: float
    end_s: float


def replay(tasks: Sequence[Task]) -> list[Event]:
    """Start every task at max(its resources are free, its dependencies are done), in list order.

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
        held = (task.resource, "compute") if task.blocks else (task.resource,)
        start = max([*(free[r] for r in held), *(end[d] for d in task.after)])
        finish = start + task.duration_s
        end[task.name] = finish
        for resource in held:
            free[resource] = finish
        events.append(Event(task, start, finish))
    return events


def makespan(events: Sequence[Event]) -> float:
    """When the last event ends (0 for none)."""
    return max((e.end_s for e in events), default=0.0)


# --------------------------------------------------------------------------- task graphs

_LABELS = {
    CollectiveKind.ALL_GATHER: "AG",
    CollectiveKind.REDUCE_SCATTER: "RdS",
    CollectiveKind.SEND_RECV: "shift",
}


class _Graph:
    """Tasks under construction: unique names, durations priced by the profile."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile
        self.tasks: list[Task] = []
        self._seen: Counter[str] = Counter()

    def add(
        self,
        label: str,
        resource: Resource,
        seconds: float,
        after: Sequence[str],
        kind: str,
        it: int,
        blocks: bool = False,
    ) -> str:
        base = f"{label}[{it}]"
        self._seen[base] += 1
        name = base if self._seen[base] == 1 else f"{base}#{self._seen[base]}"
        self.tasks.append(Task(name, resource, seconds, tuple(after), kind, it, blocks))
        return name

    def comm(self, comm: Comm, it: int, after: Sequence[str], priced: Comm | None = None) -> str:
        """``comm`` on its axis's rings; ``priced`` (same kind) gives its time when not itself."""
        seconds = (priced or comm).time(self.profile).total_s
        label = f"{_LABELS[comm.kind]}_ax{comm.axis}"
        blocks = not self.profile.overlaps(comm.kind)
        return self.add(label, _AXES[comm.axis], seconds, after, comm.kind.value, it, blocks)

    def gemm(self, seconds: float, it: int, after: Sequence[str]) -> str:
        return self.add("GeMM", "compute", seconds, after, "gemm", it)


Feed = Callable[[int], tuple[list[Comm], list[Comm]]]
"""Iteration s → communications (first hops, then the second hops that wait for them)."""
Drain = Callable[[int], list[Comm]]
"""Iteration s → communications that wait for GeMM s."""


def _none(_: int) -> tuple[list[Comm], list[Comm]]:
    return [], []


def _nothing(_: int) -> list[Comm]:
    return []


def _loop(
    graph: _Graph,
    n: int,
    gemm_s: float,
    feed: Feed,
    drain: Drain = _nothing,
    beside: Feed = _none,
) -> list[str]:
    """A software-pipelined loop of ``n`` GeMMs (module docstring). ``feed(s)`` feeds GeMM s;
    ``beside(s)`` is issued when GeMM s starts and GeMM s does not wait for it; ``drain(s)``
    waits for GeMM s. Returns the names of the last iteration's tasks."""

    def hops(comms: tuple[list[Comm], list[Comm]], it: int, wait: list[str]) -> list[str]:
        first = [graph.comm(c, it, wait) for c in comms[0]]
        return first + [graph.comm(c, it, [*wait, *first]) for c in comms[1]]

    gemms: list[str] = []
    issued: list[str] = []
    last: list[str] = []
    for it in range(n):
        issued = hops(feed(it), it, [*issued, *gemms[it - 2 : it - 1]])
        along = hops(beside(it), it, [*issued, *gemms[it - 1 : it]])
        gemms.append(graph.gemm(gemm_s, it, issued))
        last = [gemms[-1], *along] + [graph.comm(c, it, gemms[-1:]) for c in drain(it)]
    return last


def meshslice_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> list[Task]:
    """MeshSlice / Collective (Figure 5; :mod:`meshtune.cost.meshslice`): S iterations, each
    gathering for its GeMM (OS both gathers; LS / RS one) and, for LS / RS, reduce-scattering
    its output after it."""
    s = config["slices"]
    first, second = meshslice._moves(op, mesh, s, profile.bytes_per_element)
    graph = _Graph(profile)
    g = gemm_time(profile, *meshslice.local_gemm(op, mesh, s))
    if op.dataflow is Dataflow.OS:
        _loop(graph, s, g, lambda it: (first + second, []))
    else:
        _loop(graph, s, g, lambda it: (first, []), lambda it: second)
    return graph.tasks


def wang_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> list[Task]:
    """Wang / 1D TP / FSDP (:mod:`meshtune.cost.wang`): the plain all-gather before the loop and
    the plain reduce-scatter after it; S iterations of u = p / S shifts. A split all-gather
    shifts u − 1 chunks before GeMM 0 and u before each later GeMM; a split reduce-scatter passes
    u running sums on after each GeMM (u − 1 after the last)."""
    plain, one, p, kind = wang._parts(op, mesh, config, profile.bytes_per_element)
    s = config["slices"]
    u = p // s
    pre = [c for c in plain if c.kind is CollectiveKind.ALL_GATHER]
    post = [c for c in plain if c.kind is CollectiveKind.REDUCE_SCATTER]
    graph = _Graph(profile)
    g = gemm_time(profile, *meshslice.local_gemm(op, mesh, s))
    if kind is CollectiveKind.ALL_GATHER:

        def feed(it: int) -> tuple[list[Comm], list[Comm]]:
            if it == 0:
                return pre + one * (u - 1), []
            return one * u, []

        _loop(graph, s, g, feed, lambda it: post if it == s - 1 else [])
    else:
        _loop(
            graph,
            s,
            g,
            lambda it: (pre if it == 0 else [], []),
            lambda it: one * (u if it < s - 1 else u - 1),
        )
    return graph.tasks


def summa_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> list[Task]:
    """SUMMA (:mod:`meshtune.cost.summa`): S iterations of u = L / S pipelined broadcasts per
    direction feeding the GeMM (OS both; LS / RS one) and, for LS / RS, u reduces after it."""
    graph = _Graph(profile)
    _summa(graph, op, mesh, config)
    return graph.tasks


def _summa(graph: _Graph, op: GemmOp, mesh: Mesh, config: Config) -> list[str]:
    """SUMMA's loop on ``graph``; the names of its last iteration's tasks."""
    profile = graph.profile
    s = config["slices"]
    u = summa.common_multiple(mesh) // s
    first, second = summa._block(op, mesh, config, profile.bytes_per_element)
    g = gemm_time(profile, *meshslice.local_gemm(op, mesh, s))
    if op.dataflow is Dataflow.OS:
        return _loop(graph, s, g, lambda it: ((first + second) * u, []))
    return _loop(graph, s, g, lambda it: (first * u, []), lambda it: second * u)


def tesseract_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> list[Task]:
    """Tesseract (:mod:`meshtune.cost.tesseract`): SUMMA on one depth layer's band; for the
    backward-weight pass the depth all-reduce (reduce-scatter, then all-gather on the axis-2
    ring) after the last reduce, priced with the axis the cost model prices it with."""
    graph = _Graph(profile)
    last = _summa(graph, tesseract.layer_op(op, mesh.depth), tesseract.layer_mesh(mesh), config)
    depth = tesseract._depth_all_reduce(op, mesh, profile.bytes_per_element)
    for comm, priced in zip(depth, tesseract.depth_priced(depth, profile), strict=True):
        last = [graph.comm(comm, config["slices"], last, priced)]
    return graph.tasks


def cannon_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> list[Task]:
    """Cannon (:mod:`meshtune.cost.cannon`): the skew before GeMM 0, then P steps. OS shifts A
    and B into each later step; LS / RS shift the travelling input into each later step and pass
    the running sum of step s − 1 on when step s starts (the docstring's stages: a sum moves
    beside the next GeMM), then unskew the output after the last GeMM."""
    moves = cannon._Moves(op, mesh, profile.bytes_per_element)
    p = moves.p
    graph = _Graph(profile)
    g = gemm_time(profile, op.m / p, op.n / p, op.k / p)
    if p == 1:
        graph.gemm(g, 0, [])
    elif moves.os:
        _loop(graph, p, g, lambda it: (moves.skew if it == 0 else moves.both, []))
    else:
        _loop(
            graph,
            p,
            g,
            lambda it: (moves.skew if it == 0 else moves.first, []),
            lambda it: moves.unskew if it == p - 1 else [],
            lambda it: (moves.last if it > 0 else [], []),
        )
    return graph.tasks


def megatron_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> list[Task]:
    """Megatron TP (:mod:`meshtune.cost.megatron`): the collectives before the one GeMM, the
    GeMM, then those after it (an all-reduce's reduce-scatter and all-gather in turn)."""
    before, after = megatron.phases(op, mesh, config, profile.bytes_per_element)
    graph = _Graph(profile)
    g = gemm_time(profile, *megatron.local_gemm(op, mesh, config))
    _loop(graph, 1, g, lambda it: (before, []), lambda it: after)
    return graph.tasks


def primepar_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> list[Task]:
    """PrimePar (:mod:`meshtune.cost.primepar`): the skew before GeMM 0; into each later step the
    stage's shifts (a diagonal shift's second hop after its first); the shifts of the tail's last
    stage beside the last GeMM; the unskew after it."""
    plan = primepar._schedule(op, mesh, profile.bytes_per_element)
    p = plan.p
    graph = _Graph(profile)
    g = gemm_time(profile, op.m / p, op.n / p, op.k / p)
    stages = [plan.steady] * plan.repeats + plan.tail  # stage i runs beside GeMM i

    _loop(
        graph,
        p,
        g,
        lambda it: stages[it - 1] if it else (plan.before, []),
        lambda it: plan.after if it == p - 1 else [],
        lambda it: stages[-1] if it == p - 1 else ([], []),
    )
    return graph.tasks


def onesided_tasks(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> list[Task]:
    """The one-sided GeMM's busiest process (:func:`meshtune.cost.onesided.onesided_phases`):
    its first get, then its multiplies beside the other gets and accumulates, then its last
    accumulate (once every other transfer is done) and the replica-reduction accumulates one
    after another."""
    phases = onesided.onesided_phases(op, mesh, profile, config)
    graph = _Graph(profile)
    kind = onesided.ONE_SIDED
    blocks = not profile.overlaps(kind)
    start: list[str] = []
    if phases.first is not None:
        axis, seconds = phases.first_axis, phases.first.total_s
        start = [graph.add(f"get_ax{axis}", _AXES[axis], seconds, [], kind.value, 0, blocks)]
    beside = [graph.comm(c, 1, start) for c in phases.overlapped]
    done = [graph.gemm(phases.compute_s, 1, start), *beside]
    if phases.last is not None:
        axis, seconds = phases.last_axis, phases.last.total_s
        done = [graph.add(f"acc_ax{axis}", _AXES[axis], seconds, done, kind.value, 1, blocks)]
    for comm in phases.reduce:
        done = [graph.comm(comm, 2, done)]
    return graph.tasks


TaskGraph = Callable[[GemmOp, Mesh, HardwareProfile, Config], list[Task]]

TASK_GRAPHS: dict[str, TaskGraph] = {
    "meshslice": meshslice_tasks,
    "collective": meshslice_tasks,
    "wang": wang_tasks,
    "1d_tp": wang_tasks,
    "fsdp": wang_tasks,
    "megatron": megatron_tasks,
    "summa": summa_tasks,
    "cannon": cannon_tasks,
    "primepar": primepar_tasks,
    "tesseract": tesseract_tasks,
    "onesided": onesided_tasks,
}


def pass_tasks(
    algorithm: str, op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config
) -> list[Task]:
    """The task graph of ``op`` under ``algorithm`` and ``config``, priced on the links the
    mesh runs on (:func:`~meshtune.cost.tiers.ring_profile`, as
    :meth:`~meshtune.algorithm.Algorithm.cost` does); an unknown name raises ``ValueError``
    naming the known ones."""
    if algorithm not in TASK_GRAPHS:
        known = ", ".join(TASK_GRAPHS)
        raise ValueError(f"no timeline for algorithm '{algorithm}'; known: {known}")
    return TASK_GRAPHS[algorithm](op, mesh, ring_profile(profile, mesh), config)


# --------------------------------------------------------------------------- trace events

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
    grouped layer's pass once per GeMM of its group, :class:`~meshtune.layers.FcLayer`).

    ``profile`` must be the plan's own (same content hash). Raises :class:`ProfileError` when
    it is not, :class:`PlanFileError` for an unknown layer name or a mesh of more than
    :data:`MAX_TIMELINE_CHIPS` chips. Read plan files with :func:`meshtune.verify.load_plan`.
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
