"""The whole training step of a cluster plan as a timeline: ``meshtune timeline PLAN --step``.

The step model (:mod:`meshtune.step`) prices one step as ``(m + (pp − 1)/v) · slot + DP tail
+ optimizer``, ``slot`` being one micro-batch's forward and backward on the chip that sets the
pace plus its ``2v`` stage-to-stage sends (SC'21 §2.2.2). This module lays that step out in time
from the plan's own record (``cluster.step``, nothing re-priced):

* every pipeline stage runs the same chunks: one micro-batch's forward ``F`` and backward ``B``
  on the pace chip are ``(fc + recompute + attention + other) / m`` of the recorded split,
  divided between forward and backward as the plan's FC passes are (recompute goes to the
  backward), each of the ``v`` chunks being ``F / v`` or ``B / v`` followed by its send
  (``send_recv / (2 v m)``);
* the chunks run in 1F1B order, interleaved for ``v > 1`` (Megatron-LM's order: groups of
  ``pp`` micro-batches per chunk, warm-up of ``2 (pp − i − 1) + (v − 1) pp`` forwards on stage
  ``i``), each waiting for the chunk it depends on (the previous stage's, or the last stage's
  previous chunk); with uniform chunks this replays to ``m · slot + bubble`` exactly;
* then every stage's exposed DP / ZeRO traffic and its optimizer step.

So the timeline ends at the plan's ``step_s`` (a test checks it). The first micro-batch's
forward and backward chunks hold one event per block and, in the blocks, one per FC layer pass
(their recorded times; the rest of the block is attention and memory-bound work). On their own
track, each block ends with its exposed expert-parallel all-to-all (``ep_exposed_s``, half in
the forward as :func:`meshtune.step.moe.moe_block` prices it) and context-parallel K/V ring
(``cp_exposed_s``, divided between forward and backward as the compute is): the chunk's share
of the recorded time over the stage's blocks, as the blocks themselves are drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshtune.errors import MeshtuneError
from meshtune.plan import Plan

MAX_STEP_EVENTS = 2_000_000
"""Most pipeline chunk events a step timeline lays out (``2 · pp · v · m``)."""


@dataclass(frozen=True)
class StepEvent:
    """One interval on one stage: ``kind`` is forward, backward, send, dp, optimizer, block,
    layer, ep or cp; ``micro_batch`` and ``chunk`` are -1 where they do not apply."""

    stage: int
    kind: str
    name: str
    start_s: float
    end_s: float
    micro_batch: int = -1
    chunk: int = -1


def _order(stage: int, pp: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Stage ``stage``'s chunk order: (``F``/``B``, micro-batch, chunk), 1F1B (interleaved)."""
    total = m * v

    def forward(k: int) -> tuple[str, int, int]:
        return "F", (k // (pp * v)) * pp + k % pp, (k // pp) % v

    def backward(k: int) -> tuple[str, int, int]:
        return "B", (k // (pp * v)) * pp + k % pp, v - 1 - (k // pp) % v

    ahead = pp - stage - 1
    warmup = min(ahead if v == 1 else 2 * ahead + (v - 1) * pp, total)
    order = [forward(k) for k in range(warmup)]
    f, b = warmup, 0
    while b < total:
        if f < total:
            order.append(forward(f))
            f += 1
        order.append(backward(b))
        b += 1
    return order


def _schedule(
    pp: int, m: int, v: int, fwd: float, bwd: float, send: float
) -> dict[tuple[str, int, int, int], tuple[float, float]]:
    """(kind, stage, micro-batch, chunk) → (start, end of its compute); each chunk is followed
    by its send, which the next chunk in the dependency chain waits for."""
    orders = [_order(i, pp, m, v) for i in range(pp)]
    done: dict[tuple[str, int, int, int], tuple[float, float]] = {}
    position, free = [0] * pp, [0.0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for i in range(pp):
            while position[i] < len(orders[i]):
                kind, mb, chunk = orders[i][position[i]]
                ready = _ready(done, (kind, i, mb, chunk), pp, v, send)
                if ready is None:
                    break
                start = max(free[i], ready)
                end = start + (fwd if kind == "F" else bwd)
                done[(kind, i, mb, chunk)] = (start, end)
                free[i] = end + send
                position[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise MeshtuneError("the pipeline schedule deadlocked")
    return done


def _ready(
    done: dict[tuple[str, int, int, int], tuple[float, float]],
    op: tuple[str, int, int, int],
    pp: int,
    v: int,
    send: float,
) -> float | None:
    """When the chunk's input has arrived (its predecessor's end + the send), or None if the
    predecessor has not run yet."""
    kind, stage, mb, chunk = op
    if kind == "F":
        before = (
            ("F", stage - 1, mb, chunk)
            if stage > 0
            else (("F", pp - 1, mb, chunk - 1) if chunk > 0 else None)
        )
    elif stage < pp - 1:
        before = ("B", stage + 1, mb, chunk)
    elif chunk < v - 1:
        before = ("B", 0, mb, chunk + 1)
    else:
        before = ("F", stage, mb, chunk)  # the loss: the last forward chunk of this micro-batch
        return done[before][1] if before in done else None
    if before is None:
        return 0.0
    return done[before][1] + send if before in done else None


def step_events(plan: Plan) -> list[StepEvent]:
    """The step of a cluster plan as events (module docstring); :class:`MeshtuneError` for a
    plan made with ``--mesh-only`` (no step), one of another schedule than 1F1B, or one too
    large to lay out."""
    cluster = plan.cluster
    if cluster is None:
        raise MeshtuneError(
            "the plan has no step (made with --mesh-only): --step needs a plan of the cluster"
        )
    schedule = cluster.step_options.schedule
    if schedule != "1f1b":
        raise MeshtuneError(
            f"the plan runs the {schedule} schedule: --step lays out 1F1B (interleaved) "
            "schedules only; the plan's step split holds its times"
        )
    pp, m, v = cluster.pp, cluster.micro_batches, cluster.vpp
    if 2 * pp * v * m > MAX_STEP_EVENTS:
        raise MeshtuneError(
            f"{2 * pp * v * m:,} pipeline chunks (2 · PP {pp} · v {v} · m {m}) are more than "
            f"the {MAX_STEP_EVENTS:,} a step timeline lays out"
        )
    split = cluster.step
    compute = (split.fc_s + split.recompute_s + split.attention_s + split.other_s) / m
    passes = [p for layer in plan.layers for p in layer.passes]
    fc_forward = sum(p.total_s for p in passes if p.name.value == "forward")
    fc_all = sum(p.total_s for p in passes) or 1.0
    recompute = split.recompute_s / m
    fwd = (compute - recompute) * fc_forward / fc_all
    bwd = compute - fwd
    send = split.send_recv_s / (2 * v * m)
    done = _schedule(pp, m, v, fwd / v, bwd / v, send)
    events = []
    for (kind, stage, mb, chunk), (start, end) in sorted(done.items(), key=lambda x: x[1]):
        word = "forward" if kind == "F" else "backward"
        events.append(StepEvent(stage, word, f"{kind} {mb}.{chunk}", start, end, mb, chunk))
        if send > 0 and pp > 1:
            events.append(StepEvent(stage, "send", f"send {kind} {mb}.{chunk}", end, end + send))
    pipeline_end = max(e.end_s for e in events)
    for stage in range(pp):
        t = pipeline_end
        for kind, name, seconds in (
            ("dp", "DP / ZeRO traffic (exposed)", split.dp_exposed_s),
            ("optimizer", "optimizer step", split.optimizer_s),
        ):
            if seconds > 0:
                events.append(StepEvent(stage, kind, name, t, t + seconds))
                t += seconds
    chunk_comm = {
        "F": (split.ep_exposed_s / 2, split.cp_exposed_s * fwd / compute if compute else 0.0),
        "B": (split.ep_exposed_s / 2, split.cp_exposed_s * bwd / compute if compute else 0.0),
    }
    per_chunk = {k: (ep / (m * v), cp / (m * v)) for k, (ep, cp) in chunk_comm.items()}
    layout = cluster.stage_layout or [plan.inputs.model.blocks]
    events += _nested(plan, done, layout, v, per_chunk)
    return events


def _nested(
    plan: Plan,
    done: dict[tuple[str, int, int, int], tuple[float, float]],
    layout: list[int],
    v: int,
    comm: dict[str, tuple[float, float]],
) -> list[StepEvent]:
    """Blocks and FC layer passes inside micro-batch 0's chunks on every stage; ``comm``: per
    chunk kind (``F``, ``B``), the exposed EP and CP seconds of one chunk, drawn at the end of
    each of its blocks (module docstring)."""
    out = []
    for (kind, stage, mb, chunk), (start, end) in done.items():
        if mb != 0:
            continue
        blocks = max(1, layout[stage] // v)
        each = (end - start) / blocks
        names = ["forward"] if kind == "F" else ["backward_data", "backward_weight"]
        ep, cp = (seconds / blocks for seconds in comm[kind])
        for b in range(blocks):
            t0 = start + b * each
            out.append(StepEvent(stage, "block", f"block {b}", t0, t0 + each, mb, chunk))
            t = t0
            for layer in plan.layers:
                for p in layer.passes:
                    if p.name.value in names and t < t0 + each:
                        stop = min(t + p.total_s, t0 + each)
                        label = f"{layer.name} {p.name.value.replace('_', ' ')}"
                        out.append(StepEvent(stage, "layer", label, t, stop, mb, chunk))
                        t = stop
            t = t0 + each
            for what, name, seconds in (
                ("cp", "CP K/V ring (exposed)", cp),
                ("ep", "EP all-to-all (exposed)", ep),
            ):
                if seconds > 0:
                    begin = max(t0, t - seconds)
                    out.append(StepEvent(stage, what, name, begin, t, mb, chunk))
                    t = begin
    return out


def step_total(events: list[StepEvent]) -> float:
    """The timeline's end: the step time."""
    return max(e.end_s for e in events)


_TIDS = {
    "forward": 1,
    "backward": 1,
    "block": 1,
    "layer": 1,
    "send": 2,
    "dp": 3,
    "optimizer": 3,
    "ep": 4,
    "cp": 4,
}
_TRACKS = {
    1: "compute",
    2: "stage-to-stage sends",
    3: "DP tail and optimizer",
    4: "exposed EP / CP communication",
}


def step_trace(plan: Plan, events: list[StepEvent]) -> dict[str, Any]:
    """Trace-event JSON of the step: one process per pipeline stage, tracks compute (blocks and
    layer passes nested in micro-batch 0), sends, DP tail, exposed EP / CP communication; µs."""
    out: list[dict[str, Any]] = []
    pp = plan.cluster.pp if plan.cluster is not None else 1
    for stage in range(pp):
        pid = stage + 1
        out.append(_meta("process_name", pid, 0, f"stage {stage}", "name"))
        out.append(_meta("process_sort_index", pid, 0, pid, "sort_index"))
        for tid, name in _TRACKS.items():
            out.append(_meta("thread_name", pid, tid, name, "name"))
    for e in events:
        out.append(
            {
                "name": e.name,
                "cat": e.kind,
                "ph": "X",
                "ts": e.start_s * 1e6,
                "dur": (e.end_s - e.start_s) * 1e6,
                "pid": e.stage + 1,
                "tid": _TIDS[e.kind],
                "args": {"micro_batch": e.micro_batch, "chunk": e.chunk},
            }
        )
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def _meta(name: str, pid: int, tid: int, value: object, key: str) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": {key: value}}


_GLYPH = {"dp": "=", "optimizer": "o", "send": ">"}


def draw_step(events: list[StepEvent], pp: int, width: int) -> list[str]:
    """One text line per stage (at most 32, evenly picked), ``width`` cells for the step:
    forward chunks as the digit of their micro-batch (mod 10), backward as a letter (``a`` =
    0 …), ``>`` a send, ``=`` the DP tail, ``o`` the optimizer, ``·`` idle (the bubble)."""
    total = step_total(events)
    shown = sorted({round(i * (pp - 1) / 31) for i in range(32)}) if pp > 32 else range(pp)
    by_stage: dict[int, list[StepEvent]] = {}
    for e in events:
        if e.kind not in ("block", "layer", "ep", "cp"):
            by_stage.setdefault(e.stage, []).append(e)
    lines = []
    for stage in shown:
        cells = []
        for cell in range(width):
            middle = (cell + 0.5) / width * total
            hit = next((e for e in by_stage[stage] if e.start_s <= middle < e.end_s), None)
            if hit is None:
                cells.append("·")
            elif hit.kind == "forward":
                cells.append(str(hit.micro_batch % 10))
            elif hit.kind == "backward":
                cells.append("abcdefghij"[hit.micro_batch % 10])
            else:
                cells.append(_GLYPH[hit.kind])
        lines.append(f"stage {stage:>3} {''.join(cells)}")
    return lines
