"""Array pricing of an algorithm's communications over every configuration of a layer (issue 17).

An algorithm describes each pass as the list of its communications (``algorithm.comms``, the
list the executor's traffic checks count, :mod:`meshtune.cost.schedule`). Here the lists of
the three passes of a layer under *every* legal configuration on a mesh are flattened into
arrays and priced in one NumPy evaluation with the formula of
:meth:`meshtune.cost.schedule.Comm.time`:

    time = count · (t_launch + steps · (t_sync + step_bytes / bw))

per (kind, axis) link parameters; no second description of what an algorithm moves exists.

What the search does with it (:func:`layer_bounds`): a lower bound of each configuration's layer
time, Σ over the passes of ``max(compute floor, max over axes of Σ that axis's communication
times)``. Every registered algorithm's pass is never faster than the communications of one
ring run back to back, nor than its FLOPs at the chip's rate (``2·m·n·k / (chips · F)``); a
registry-wide test checks both for every algorithm, mesh and configuration.
:func:`meshtune.search.phase2.best_layer_choice` prices configurations in the order of their
bound and stops at the first bound above the best time found: the choice is the same as
pricing every configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from meshtune.algorithm import Algorithm, Config
from meshtune.cost.schedule import AXES, Comm
from meshtune.cost.tiers import ring_profile
from meshtune.dataflow import GemmOp, LayerDataflow
from meshtune.mesh import Mesh
from meshtune.specs import HardwareProfile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

# A bound is scaled by this before it is compared, so that rounding in a different summation
# order than the scalar path's can never prune the configuration that is the best.
BOUND_SLACK = 1.0 - 1e-9


def _flatten(
    comms: Sequence[Sequence[Comm]], profile: HardwareProfile
) -> tuple[npt.NDArray[np.intp], dict[str, FloatArray], npt.NDArray[np.intp]]:
    """(row of each communication, its numbers as arrays, its axis). NumPy is imported in
    the functions, not with the module, so that the CLI starts without it."""
    import numpy as np

    rows: list[int] = []
    cols: dict[str, list[float]] = {
        k: [] for k in ("count", "steps", "step_bytes", "launch", "sync", "bw")
    }
    axes: list[int] = []
    links: dict[tuple[object, int], tuple[float, float, float]] = {}  # one look-up per link
    for row, listed in enumerate(comms):
        for comm in listed:
            key = (comm.kind, comm.axis)
            if key not in links:
                link = profile.link(comm.kind, comm.axis)
                links[key] = (link.t_launch_s, link.t_sync_s, link.bw_bytes_per_s)
            launch, sync, bw = links[key]
            rows.append(row)
            axes.append(comm.axis)
            cols["count"].append(comm.count)
            cols["steps"].append(comm.steps)
            cols["step_bytes"].append(comm.wire_bytes(profile))
            cols["launch"].append(launch)
            cols["sync"].append(sync)
            cols["bw"].append(bw)
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}
    return np.asarray(rows, dtype=np.intp), arrays, np.asarray(axes, dtype=np.intp)


def comm_parts(comms: Sequence[Sequence[Comm]], profile: HardwareProfile) -> FloatArray:
    """Launch, sync and transfer seconds of each list in ``comms``: shape ``(len(comms), 3)``,
    row ``i`` equal to ``comm_time(comms[i], profile)`` (one NumPy evaluation)."""
    import numpy as np

    rows, a, _ = _flatten(comms, profile)
    parts = np.stack(
        (
            a["count"] * a["launch"],
            a["count"] * a["steps"] * a["sync"],
            a["count"] * a["steps"] * a["step_bytes"] / a["bw"],
        ),
        axis=1,
    )
    out = np.zeros((len(comms), 3))
    np.add.at(out, rows, parts)
    return out


def axis_times(comms: Sequence[Sequence[Comm]], profile: HardwareProfile) -> FloatArray:
    """Seconds of each list's communications per physical axis, run one after another: shape
    ``(len(comms), AXES)``, entry ``[i, a]`` = Σ ``c.time(profile).total_s`` over the
    communications ``c`` of ``comms[i]`` on axis ``a``."""
    import numpy as np

    rows, a, axes = _flatten(comms, profile)
    total = a["count"] * (a["launch"] + a["steps"] * (a["sync"] + a["step_bytes"] / a["bw"]))
    out = np.zeros((len(comms), AXES))
    np.add.at(out, (rows, axes), total)
    return out


def _compute_floor(op: GemmOp, mesh: Mesh, profile: HardwareProfile) -> float:
    """``2·m·n·k·groups / (chips · F)``: no chip computes faster than F (a profile's GeMM
    efficiency is at most 1 and its overhead at least 0,
    :class:`~meshtune.specs.GemmEfficiency`)."""
    return op.flops / (mesh.chips * profile.effective_flops_per_s)


def layer_bounds(
    algorithm: Algorithm,
    choice: LayerDataflow,
    mesh: Mesh,
    profile: HardwareProfile,
    configs: Sequence[Config],
) -> FloatArray:
    """A lower bound of the layer time (three passes) of each configuration (module
    docstring), from one array evaluation of every pass's communications."""
    import numpy as np

    profile = ring_profile(profile, mesh)  # the links the cost model prices (Algorithm.cost)
    ops = choice.ops
    comms = [
        algorithm.pass_comms(op, mesh, config, profile.bytes_per_element)
        for config in configs
        for op in ops
    ]
    per_pass = axis_times(comms, profile).max(axis=1).reshape(len(configs), len(ops))
    floors = np.asarray([_compute_floor(op, mesh, profile) for op in ops])
    bounds: FloatArray = np.maximum(per_pass, floors).sum(axis=1)
    return bounds
