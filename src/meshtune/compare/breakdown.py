"""Where the time of a pass goes (MeshSlice Figure 10), and data parallelism's reduction (§7).

:class:`Breakdown` splits one or more passes' time into prologue / steady iterations /
epilogue, compute and communication (launch + sync + transfer, exposed or hidden) and counts
the traffic over the busiest link of each physical axis. :func:`pass_breakdown` prices one
pass of a registered algorithm (the same :func:`~meshtune.search.priced` the search uses, so
the totals agree with every plan); :func:`sum_breakdowns` adds them up (over layers, passes and
blocks); :func:`dp_breakdown` is the weight-gradient reduce-scatter plus all-gather over the
data-parallel replicas that :func:`meshtune.compare.gemm.gemm_study` adds with ``dp > 1``.
Pure functions of their arguments; traffic comes from ``traffic(algorithm.comms(...))``.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from meshtune.algorithms.base import Algorithm
from meshtune.cost.config import Config
from meshtune.cost.schedule import AXES, Comm, PassCost, comm_time, ring_collective, traffic
from meshtune.cost.tesseract import depth_priced
from meshtune.dataflow import GemmOp
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.search import priced
from meshtune.units import FROZEN


class Breakdown(BaseModel):
    """Where the time of one or more passes goes (seconds, and bytes per link).

    ``steady_s`` counts every steady iteration, ``(iterations − 1) · steady``; ``launch_s`` /
    ``sync_s`` / ``transfer_s`` sum all communication (Figure 10), ``exposed_s`` and
    ``hidden_s`` are :class:`~meshtune.cost.schedule.PassCost`'s. ``launches``, ``steps`` and
    ``link_bytes`` are per physical axis (rows, columns, depth): what the busiest link of each
    axis carries, from ``traffic(algorithm.comms(...))``.
    """

    model_config = FROZEN

    total_s: float
    prologue_s: float
    steady_s: float
    epilogue_s: float
    compute_s: float
    launch_s: float
    sync_s: float
    transfer_s: float
    exposed_s: float
    hidden_s: float
    launches: list[int]
    steps: list[int]
    link_bytes: list[int]

    @property
    def comm_s(self) -> float:
        """launch + sync + transfer: all communication, overlapped or not."""
        return self.launch_s + self.sync_s + self.transfer_s


def pass_breakdown(
    algorithm: Algorithm, op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config
) -> tuple[Breakdown, PassCost]:
    """The :class:`Breakdown` of one pass, and the pass's cost."""
    cost = priced(algorithm, op, mesh, profile, config)
    moved = traffic(algorithm.comms(op, mesh, config, profile.bytes_per_element))
    return (
        Breakdown(
            total_s=cost.total_s,
            prologue_s=cost.prologue_s,
            steady_s=(cost.iterations - 1) * cost.steady_s,
            epilogue_s=cost.epilogue_s,
            compute_s=cost.compute_s,
            launch_s=cost.comm.launch_s,
            sync_s=cost.comm.sync_s,
            transfer_s=cost.comm.transfer_s,
            exposed_s=cost.exposed_s,
            hidden_s=cost.hidden_s,
            launches=[a.launches for a in moved],
            steps=[a.steps for a in moved],
            link_bytes=[a.bytes_per_link for a in moved],
        ),
        cost,
    )


def sum_breakdowns(parts: Iterable[Breakdown], times: int = 1) -> Breakdown:
    """Field-wise sum of ``parts``, multiplied by ``times`` (e.g. the number of blocks)."""
    items = list(parts)
    floats = (
        "total_s",
        "prologue_s",
        "steady_s",
        "epilogue_s",
        "compute_s",
        "launch_s",
        "sync_s",
        "transfer_s",
        "exposed_s",
        "hidden_s",
    )
    ints = ("launches", "steps", "link_bytes")
    data: dict[str, object] = {f: times * sum(getattr(b, f) for b in items) for f in floats}
    for name in ints:
        axes = max((len(getattr(b, name)) for b in items), default=AXES)
        data[name] = [times * sum(getattr(b, name)[a] for b in items) for a in range(axes)]
    return Breakdown.model_validate(data)


def dp_comms(weight_elements: float, dp: int, bytes_per_element: int) -> list[Comm]:
    """Data parallelism's weight-gradient all-reduce over ``dp`` replicas (axis 2): a
    reduce-scatter and an all-gather of ``weight_elements / dp`` elements per chip."""
    shard = weight_elements / dp * bytes_per_element
    return [
        *ring_collective(CollectiveKind.REDUCE_SCATTER, 2, dp, shard),
        *ring_collective(CollectiveKind.ALL_GATHER, 2, dp, shard),
    ]


def dp_breakdown(weight_elements: float, dp: int, profile: HardwareProfile) -> Breakdown:
    """The :class:`Breakdown` of :func:`dp_comms`, run after the GeMM and never hidden; priced
    with the profile's axis-2 parameters or its slowest mesh axis'
    (:func:`meshtune.cost.tesseract.depth_priced`)."""
    comms = dp_comms(weight_elements, dp, profile.bytes_per_element)
    spent = comm_time(depth_priced(comms, profile), profile)
    moved = traffic(comms)
    return Breakdown(
        total_s=spent.total_s,
        prologue_s=0.0,
        steady_s=0.0,
        epilogue_s=spent.total_s,
        compute_s=0.0,
        launch_s=spent.launch_s,
        sync_s=spent.sync_s,
        transfer_s=spent.transfer_s,
        exposed_s=spent.total_s,
        hidden_s=0.0,
        launches=[a.launches for a in moved],
        steps=[a.steps for a in moved],
        link_bytes=[a.bytes_per_link for a in moved],
    )
