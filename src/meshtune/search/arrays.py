"""Array pricing of an algorithm's communications over every configuration of a layer.

An algorithm describes each pass as the list of its communications (``algorithm.comms``, the
list the executor's traffic checks count, :mod:`meshtune.cost.schedule`). Here the lists of
the three passes of a layer under *every* legal configuration on a mesh, as columns
(:meth:`meshtune.algorithms.base.Algorithm.layer_columns`), are priced in one NumPy evaluation with
the formula of :meth:`meshtune.cost.schedule.Comm.time`:

    time = count · (t_launch + steps · (t_sync + step_bytes / bw))

per (kind, axis) link parameters; no second description of what an algorithm moves exists.

What the search does with it (:func:`layer_bounds`): a lower bound of each configuration's layer
time. Where the algorithm prices its passes as arrays (``Algorithm.layer_times``,
:mod:`meshtune.cost.vector`: MeshSlice, Collective, Wang, 1D TP, FSDP, Megatron) it is the layer
time itself, to rounding; otherwise Σ over the passes of ``max(compute floor, max over axes of
Σ that axis's communication times)``: every registered algorithm's pass is never faster than
the communications of one ring run back to back, nor than its FLOPs at the chip's rate
(``2·m·n·k / (chips · F)``). A registry-wide test checks both for every algorithm, mesh and
configuration. :func:`meshtune.search.phase2.best_layer_choice` prices configurations in the
order of their bound and stops at the first bound above the best time found: the choice is the
same as pricing every configuration, and with exact times it prices about one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from meshtune.algorithms.base import Algorithm
from meshtune.cost.config import Config
from meshtune.cost.schedule import AXES, Comm, CommColumns, columns
from meshtune.cost.vector import issue_times, link_table, wire_bytes
from meshtune.dataflow import LayerDataflow
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import ring_profile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

# A bound is scaled by this before it is compared, so that rounding in a different summation
# order than the scalar path's can never prune the configuration that is the best.
BOUND_SLACK = 1.0 - 1e-9


def _parts(cols: CommColumns, profile: HardwareProfile) -> FloatArray:
    """Launch, sync and transfer seconds of each entry of ``cols``: shape ``(3, entries)``."""
    import numpy as np

    launch, sync, bw = link_table(profile)[:, cols.kind * AXES + cols.axis]
    spread = cols.issues * cols.steps
    return np.stack((cols.issues * launch, spread * sync, spread * wire_bytes(cols, profile) / bw))


def comm_parts(comms: Sequence[Sequence[Comm]], profile: HardwareProfile) -> FloatArray:
    """Launch, sync and transfer seconds of each list in ``comms``: shape ``(len(comms), 3)``,
    row ``i`` equal to ``comm_time(comms[i], profile)`` (one NumPy evaluation)."""
    import numpy as np

    cols = columns(comms)
    parts = _parts(cols, profile)
    size = len(comms)
    return np.stack([np.bincount(cols.row, weights=p, minlength=size) for p in parts], axis=1)


def column_axis_times(
    blocks: Sequence[CommColumns], rows: int, profile: HardwareProfile
) -> FloatArray:
    """Seconds of each of the ``rows`` lists of ``blocks`` per physical axis, run one after
    another: shape ``(rows, AXES)``; Σ over each axis in entry order."""
    import numpy as np

    out = np.zeros(rows * AXES)
    for cols in blocks:
        total = cols.issues * issue_times(cols, profile)
        index = cols.row * AXES + cols.axis
        out += np.bincount(index.ravel(), weights=total.ravel(), minlength=rows * AXES)
    return out.reshape(rows, AXES)


def axis_times(comms: Sequence[Sequence[Comm]], profile: HardwareProfile) -> FloatArray:
    """Seconds of each list's communications per physical axis, run one after another: shape
    ``(len(comms), AXES)``, entry ``[i, a]`` = Σ ``c.time(profile).total_s`` over the
    communications ``c`` of ``comms[i]`` on axis ``a``."""
    return column_axis_times([columns(comms)], len(comms), profile)


def layer_bounds(
    algorithm: Algorithm,
    choice: LayerDataflow,
    mesh: Mesh,
    profile: HardwareProfile,
    configs: Sequence[Config],
) -> FloatArray:
    """A lower bound of the layer time (three passes) of each configuration (module
    docstring), from one array evaluation; not finite when a communication has no link
    parameters in ``profile``. Where the algorithm prices its passes as arrays
    (:meth:`~meshtune.algorithms.base.Algorithm.pass_times`), the layer time itself (to rounding).

    Otherwise Σ passes ``max(compute floor, max over axes of Σ communication)``; the compute
    floor of a pass is ``2·m·n·k·groups / (chips · F)``: no chip computes faster than F (a
    profile's GeMM efficiency is at most 1 and its overhead at least 0,
    :class:`~meshtune.hardware.compute.GemmEfficiency`)."""
    import numpy as np

    ops = choice.ops
    times = algorithm.pass_times(ops, mesh, profile, configs)
    if times is not None:
        exact: FloatArray = times.sum(axis=1)
        return exact
    profile = ring_profile(profile, mesh)  # the links the cost model prices (Algorithm.cost)
    blocks = algorithm.layer_columns(ops, mesh, configs, profile.bytes_per_element)
    per_axis = column_axis_times(blocks, len(configs) * len(ops), profile)
    per_pass = per_axis.max(axis=1).reshape(len(configs), len(ops))
    rate = mesh.chips * profile.effective_flops_per_s
    floors = np.array([op.flops / rate for op in ops])
    bounds: FloatArray = np.maximum(per_pass, floors).sum(axis=1)
    return bounds
