"""The alternative every plan names: the best plan of each algorithm family, and the gain or
loss of the chosen plan against it.

A user asks "is MeshSlice worth it on my cluster?" against what they run today, so a plan is
compared with the best plan of each family of algorithms users run, each searched on its own
(its own DP × PP × mesh split for a cluster plan, its own mesh otherwise) with every other
input of the plan unchanged. The families and their members are the registry's
(``Algorithm.family``, :func:`~meshtune.algorithms.registry.comparison_families`); the fastest
member stands for its family (Megatron's: ``megatron``, Megatron-LM TP as GPU users run it,
and ``1d_tp``, the same layout with its collectives overlapped by Wang's method).

An algorithm no engine runs yet (``Algorithm.engine`` false) is still priced, but only one an
engine runs is offered as the thing to run instead. A cluster plan is compared on its step
time, a plan of one mesh on its FC time. ``gain = alternative's time / plan's time − 1``: how
much faster the plan is (negative: the alternative is faster by ``−gain / (1 + gain)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from meshtune.algorithms.registry import comparison_families, get_algorithm
from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import parse_mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.plan import Plan
from meshtune.planner.make import plan_again
from meshtune.search.levels import search_cluster
from meshtune.search.space import SplitSpace
from meshtune.step.options import ClusterOptions

FAMILIES: Mapping[str, tuple[str, ...]] = comparison_families()
"""Family → the registered algorithms it stands for, in the order the table lists them."""


@dataclass(frozen=True)
class Alternative:
    """The best plan of one family, or why the family has none (built here, never parsed: a
    plain dataclass, so that the plan command does not build a pydantic model for it)."""

    family: str
    algorithm: str | None
    engine: bool
    time_s: float | None
    utilization: float | None  # MFU of a cluster plan, FC FLOP utilization of one mesh
    split: str | None
    gain: float | None
    reason: str | None


TIE = 0.01
"""An alternative within 1 % of the plan's time ties with it: a gain that small is below what
any analytical step model resolves (validate's errors are tens of times larger), so the report
does not advise a rerun for it."""


@dataclass(frozen=True)
class Alternatives:
    """The chosen plan against the best plan of each family."""

    chosen: str
    metric: Literal["step", "fc"]
    time_s: float
    entries: list[Alternative]

    def faster(self) -> Alternative | None:
        """The fastest alternative an engine runs that beats the plan by at least
        :data:`TIE` of its time, if any (closer than that, the two tie)."""
        better = [
            e
            for e in self.entries
            if e.engine
            and e.time_s is not None
            and e.time_s < (1 - TIE) * self.time_s
            and e.algorithm != self.chosen
        ]
        return min(better, key=lambda e: e.time_s or 0.0, default=None)


def plan_time(plan: Plan) -> tuple[Literal["step", "fc"], float]:
    """What plans are compared on: the step time of a cluster plan, else the FC time."""
    if plan.cluster is not None:
        return "step", plan.cluster.step.step_s
    return "fc", plan.fc_time_s


def describe_split(plan: Plan) -> str:
    """``DP 128 × PP 2 × mesh 4x1`` for a cluster plan, ``mesh 32x8`` otherwise."""
    mesh = plan.mesh.to_mesh().label
    if plan.cluster is None:
        return f"mesh {mesh}"
    return f"DP {plan.cluster.dp} × PP {plan.cluster.pp} × mesh {mesh}"


def _options(plan: Plan) -> ClusterOptions | None:
    """The cluster options the plan was searched with (None: a plan of one mesh)."""
    levels = plan.inputs.levels
    if plan.cluster is None or levels is None:
        return None
    return levels.options()


def replan(plan: Plan, profile: HardwareProfile, algorithm: str) -> Plan:
    """``plan``'s inputs searched again with ``algorithm``: the whole plan."""
    return plan_again(plan.inputs, plan.inputs.model, profile, algorithm=algorithm)


Found = tuple[float, str, float, str]  # (time, algorithm, utilization, split)


class _Searcher:
    """The best plan of one algorithm on ``plan``'s inputs, reduced to what the table shows.

    A cluster plan's families are searched on one shared :class:`SplitSpace` (the splits, their
    memory and lower bounds depend on no algorithm) and only for their best candidate
    (``top = 1``): the same best as :func:`replan`'s whole plan, at a fraction of the work.
    """

    def __init__(self, plan: Plan, profile: HardwareProfile) -> None:
        self.plan = plan
        self.profile = profile
        self.options = _options(plan)
        self.chosen = plan.layers[0].algorithm if plan.layers else plan.inputs.algorithm
        self.space: SplitSpace | None = None

    def __call__(self, name: str) -> Found:
        plan, inputs = self.plan, self.plan.inputs
        if name == self.chosen:
            utilization = plan.cluster.mfu if plan.cluster else plan.utilization
            return plan_time(plan)[1], name, utilization, describe_split(plan)
        if self.options is None:
            found = replan(plan, self.profile, name)
            return found.fc_time_s, name, found.utilization, describe_split(found)
        if self.space is None:
            self.space = SplitSpace.build(
                inputs.model,
                self.profile,
                inputs.chips,
                batch=inputs.batch,
                seq_len=inputs.seq_len,
                mode=inputs.dataflow_mode,
                options=self.options,
            )
        best = search_cluster(
            inputs.model,
            self.profile,
            inputs.chips,
            batch=inputs.batch,
            seq_len=inputs.seq_len,
            algorithms=[get_algorithm(name)],
            mode=inputs.dataflow_mode,
            options=self.options,
            meshes=[parse_mesh(s) for s in inputs.shapes] if inputs.shapes is not None else None,
            top=1,
            space=self.space,
        ).best
        split = f"DP {best.dp} × PP {best.pp} × mesh {best.mesh.label}"
        return best.step_s, name, best.mfu(self.profile), split


def alternatives(
    plan: Plan, profile: HardwareProfile, families: Sequence[str] = tuple(FAMILIES)
) -> Alternatives:
    """The best plan of each of ``families`` beside ``plan`` (see the module docstring).

    ``profile`` is the one ``plan`` was made with. A family none of whose algorithms has a
    feasible plan is listed with the reason.
    """
    metric, time_s = plan_time(plan)
    searcher = _Searcher(plan, profile)
    entries = []
    for family in families:
        best: Found | None = None
        reasons = []
        for name in FAMILIES[family]:
            try:
                candidate = searcher(name)
            except InfeasibleError as exc:
                reasons.append(f"{name}: {exc}")
                continue
            if best is None or candidate[:2] < best[:2]:
                best = candidate
        if best is None:
            entries.append(
                Alternative(
                    family=family,
                    algorithm=None,
                    engine=False,
                    time_s=None,
                    utilization=None,
                    split=None,
                    gain=None,
                    reason="; ".join(reasons),
                )
            )
            continue
        seconds, name, utilization, split = best
        entries.append(
            Alternative(
                family=family,
                algorithm=name,
                engine=get_algorithm(name).engine,
                time_s=seconds,
                utilization=utilization,
                split=split,
                gain=seconds / time_s - 1,
                reason=None,
            )
        )
    return Alternatives(chosen=searcher.chosen, metric=metric, time_s=time_s, entries=entries)
