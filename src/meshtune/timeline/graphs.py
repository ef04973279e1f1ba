"""Each registered algorithm's task graph of one pass: the schedule its cost module's docstring
describes, as the software-pipelined loop of MeshSlice Figure 5 (:mod:`meshtune.timeline.replay`
says how the graph is replayed). Durations come from the cost model's parts, never from the
pass total. The registry names each algorithm's builder (``Algorithm.timeline``); algorithms of
one schedule share one (Collective is MeshSlice's, 1D TP and FSDP are Wang's)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from meshtune.algorithms.base import resolve
from meshtune.algorithms.registry import get_algorithm
from meshtune.cost import cannon, megatron, meshslice, onesided, primepar, summa, tesseract, wang
from meshtune.cost.compute import gemm_time
from meshtune.cost.config import Config
from meshtune.cost.schedule import Comm
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import ring_profile
from meshtune.timeline.replay import AXES, Resource, Task

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
        return self.add(label, AXES[comm.axis], seconds, after, comm.kind.value, it, blocks)

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
        start = [graph.add(f"get_ax{axis}", AXES[axis], seconds, [], kind.value, 0, blocks)]
    beside = [graph.comm(c, 1, start) for c in phases.overlapped]
    done = [graph.gemm(phases.compute_s, 1, start), *beside]
    if phases.last is not None:
        axis, seconds = phases.last_axis, phases.last.total_s
        done = [graph.add(f"acc_ax{axis}", AXES[axis], seconds, done, kind.value, 1, blocks)]
    for comm in phases.reduce:
        done = [graph.comm(comm, 2, done)]
    return graph.tasks


TaskGraph = Callable[[GemmOp, Mesh, HardwareProfile, Config], list[Task]]
"""A registered algorithm's task graph of one pass (``Algorithm.timeline`` names it)."""


def pass_tasks(
    algorithm: str, op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config
) -> list[Task]:
    """The task graph of ``op`` under ``algorithm`` and ``config`` (the registry's
    ``Algorithm.timeline``), priced on the links the mesh runs on
    (:func:`~meshtune.hardware.tiers.ring_profile`, as
    :meth:`~meshtune.algorithms.base.Algorithm.cost` does); an unknown name raises
    :class:`~meshtune.errors.MeshtuneError` naming the known ones."""
    graph: TaskGraph = resolve(get_algorithm(algorithm).timeline)
    return graph(op, mesh, ring_profile(profile, mesh), config)
