"""A discrete-event replay of each pass's schedule, and its trace-event file (MeshSlice Fig. 4, 5).

A pass is a list of :class:`Task` s: a name, the resource it occupies (``"compute"``, or the
rings of mesh axis 0, 1 or 2), a duration and the tasks it waits for. Each resource is exclusive
and runs its tasks in list order (a stream, as a chip's compute unit and its per-axis links do);
:func:`replay` starts every task at ``max(resource free, dependencies done)``. A communication
the profile does not overlap with compute (``blocks``; §4.1, §5.3: AG/RdS on the real TPUv4)
also holds the compute stream while it runs.

Every registered algorithm names its task graph in its registry entry's ``timeline`` field (a
builder ``(op, mesh, profile, config) -> tasks`` of :mod:`meshtune.timeline.graphs`), so the
replay, the trace writer and the terminal view know no algorithm. The builders follow the schedules
their cost modules' docstrings describe, as a software-pipelined loop (Figure 5), iteration s = 0 …
n − 1:

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Resource = Literal["compute", "axis0", "axis1", "axis2"]
RESOURCES: tuple[Resource, ...] = ("compute", "axis0", "axis1", "axis2")
AXES: tuple[Resource, ...] = ("axis0", "axis1", "axis2")


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


# --------------------------------------------------------------------------- trace events
