"""What an algorithm is to the planner: a name, a pure cost model, an executor, its timeline task
graph, the engine kernel and comparison family it belongs to, constraints.

The registry (:mod:`meshtune.algorithms.registry`) is the only place that knows which algorithms
exist; search, plan, verify, the timeline, the engines, compare and the reports go through the
:class:`Algorithm` interface and never switch on names (the way opt_einsum registers its path
finders).

An algorithm runs the three training GeMMs of an FC layer (§3.2.1, Table 1). Its cost side is
pure and cheap to import:

* ``mesh_problem(mesh)``: why a mesh shape is not allowed (Cannon: not square), or ``None``;
* ``meshes(chips)``: the mesh shapes to search for a chip count (default: every P_r × P_c);
* ``configs(layer, mesh, block)``: the legal configurations of one layer on one mesh (MeshSlice:
  one per valid slice count), or the reason there are none;
* ``comms(op, mesh, config, bytes_per_element)``: every communication of one pass, from which
  both its traffic and its time are derived (:mod:`meshtune.cost.schedule`);
* ``cost_model(op, mesh, profile, config)``: the pass's :class:`PassCost` on a mesh whose
  rings run on the profile's axes; :meth:`Algorithm.cost` calls it with the links the mesh
  is laid out on (a ring of all chips snakes over both axes,
  :func:`meshtune.hardware.tiers.ring_profile`);
* ``size_units(layer, mesh, config, block)``: per layer dimension, the unit every size must be
  a multiple of for ``config`` to stay legal (verify shrinks the layer to small multiples);
* ``comm_columns(ops, mesh, configs, bytes_per_element)`` (optional): the ``comms`` of every
  (configuration, pass) as columns, built in one call for the search's array pricing
  (:meth:`Algorithm.layer_columns`) where the algorithm knows how its lists vary with the
  configuration; a registry-wide test checks them against ``comms``;
* ``layer_times(ops, mesh, profile, configs)`` (optional, where the cost model is closed-form):
  the ``cost_model`` time of every (configuration, pass), evaluated as NumPy arrays from the
  same communications (:mod:`meshtune.cost.vector`); :meth:`Algorithm.pass_times` calls it as
  :meth:`Algorithm.cost` calls ``cost_model``, and a registry-wide test checks it against
  ``cost``;
* ``pass_floors(ops, mesh, profile)`` (optional): a lower bound of each pass's ``cost_model``
  time over every configuration, without listing them: the search checks it before pricing a
  layer (:meth:`Algorithm.layer_floor`), and a registry-wide test checks it against
  ``layer_times`` and ``cost``;
* ``family_floors(meshes, profiles)`` (optional): ``pass_floors`` on every mesh of a list at
  once, as a function of the passes (the search asks it of every TP mesh of a size before it
  prices one, :meth:`Algorithm.family_floor`); a registry-wide test checks it equals
  ``pass_floors``.

Its executor runs one pass on the NumPy virtual mesh, and its task graph (:mod:`meshtune.timeline`)
lays one pass out as the tasks the timeline replays; both are named by a dotted
``module:function`` path (the executor needs NumPy arrays; the task graphs live above this layer)
and imported only when used (:func:`resolve`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from meshtune.cost.config import (
    Candidates,
    ColumnsBuilder,
    Config,
    FamilyFloorBuilder,
    FloorBuilder,
    TimesBuilder,
)
from meshtune.cost.schedule import Comm, CommColumns, PassCost, columns, repeated
from meshtune.dataflow import DataflowMode, Dim, GemmOp, LayerDataflow
from meshtune.errors import ProfileError
from meshtune.hardware.mesh import Mesh, mesh_shapes
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import ring_profile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from meshtune.cost.vector import FloatArray
    from meshtune.executor.mesh import Array, VirtualMesh


def all_shapes(chips: int) -> tuple[Mesh, ...]:
    """Every P_r × P_c factorization of ``chips`` (the default mesh enumeration)."""
    return mesh_shapes(chips)


def no_mesh_problem(mesh: Mesh) -> str | None:
    """Any 2D mesh is allowed (depth 1)."""
    if mesh.depth != 1:
        return f"{mesh.label}: this algorithm runs on a 2D mesh (depth 1)"
    return None


def tokens_over_mesh(mesh: Mesh, config: Config) -> int:
    """The default :attr:`Algorithm.token_shards`: activations between layers are split over
    every chip of the mesh (the 2D algorithms' X and Y shards, MeshSlice §4.4)."""
    return mesh.chips


def config_label(config: Config) -> str:
    """The default description of a configuration: its knobs (``S=4``)."""
    return config.label


Executor = Callable[["GemmOp", "Array", "Array", "VirtualMesh", Config, int], "Array"]

Layouts = Callable[[str, int, str | None, int], tuple[Config, ...]]
"""``(partition, replicas, stationary, chips)`` → the configurations of one named data layout
(:attr:`Algorithm.layouts`)."""

_RESOLVED: dict[str, Callable[..., Any]] = {}
"""``module:function`` path → the function, once :func:`resolve` has imported it."""


def resolve(path: str) -> Callable[..., Any]:
    """The function a dotted ``module:function`` path names (``meshtune.executor.wang:execute``),
    its module imported on the first call and the function cached."""
    function = _RESOLVED.get(path)
    if function is None:
        module, _, name = path.partition(":")
        function = _RESOLVED[path] = getattr(importlib.import_module(module), name)
    return function


@dataclass(frozen=True)
class Algorithm:
    """One registered distributed GeMM algorithm (see the module docstring).

    ``dataflow_mode`` forces phase 1's choice for every layer (FSDP is Y-stationary on a
    P × 1 mesh, 1D TP W-stationary) or, when ``None``, follows the planner's mode. ``executor``
    is the dotted path ``module:function`` of a function ``(op, a, b, mesh, config, block) ->
    C`` taking and returning dense operands in Figure 5's canonical form. ``timeline`` is the
    dotted path of its task graph ``(op, mesh, profile, config) -> list[Task]``
    (:mod:`meshtune.timeline.graphs`), priced on the links :meth:`cost` prices with.
    ``describe`` names a configuration for reports (default: its knobs, ``S=4``). ``kernel``:
    the JAX kernel family a real engine runs it as (``make_gemm`` of
    :mod:`meshtune.engines.jax_kernels`: ``meshslice``, ``wang`` or ``cannon``), or ``None``
    where no engine runs it; with one, ``run`` and ``export`` accept its plans and
    ``--algorithm auto`` may pick it (:attr:`engine`). ``family``: the family of algorithms
    users run that a plan's alternatives table compares it in (:mod:`meshtune.compare.alternatives`;
    the family's fastest member stands for it), or ``None`` where no plan compares with it.
    ``layouts(partition, replicas, stationary, chips)``: where the configurations are data
    layouts, those of one named layout (``meshtune gemm --partition``); ``None`` otherwise.
    ``token_shards(mesh, config)``: the chips the residual
    stream between the FC layers is split over (the element-wise work and its activations
    follow it, :mod:`meshtune.step`); all of the mesh unless the algorithm replicates it
    (Megatron without sequence parallelism: 1). ``comm_columns``: see the module docstring
    (``None``: :meth:`layer_columns` lists ``comms`` configuration by configuration).
    ``layer_times``: see the module docstring (``None``: no array pricing of the cost model;
    the search bounds the configurations from their communications alone).
    """

    name: str
    title: str
    citation: str
    summary: str
    configs: Callable[[LayerDataflow, Mesh, int], Candidates]
    comms: Callable[[GemmOp, Mesh, Config, int], list[Comm]]
    cost_model: Callable[[GemmOp, Mesh, HardwareProfile, Config], PassCost]
    size_units: Callable[[LayerDataflow, Mesh, Config, int], dict[Dim, int]]
    executor: str
    timeline: str
    mesh_problem: Callable[[Mesh], str | None] = no_mesh_problem
    meshes: Callable[[int], tuple[Mesh, ...]] = all_shapes
    dataflow_mode: DataflowMode | None = None
    describe: Callable[[Config], str] = config_label
    token_shards: Callable[[Mesh, Config], int] = tokens_over_mesh
    kernel: str | None = None
    family: str | None = None
    layouts: Layouts | None = None
    comm_columns: ColumnsBuilder | None = None
    layer_times: TimesBuilder | None = None
    pass_floors: FloorBuilder | None = None
    family_floors: FamilyFloorBuilder | None = None

    @property
    def engine(self) -> bool:
        """Whether a real engine runs it (it has a :attr:`kernel`)."""
        return self.kernel is not None

    def cost(self, op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
        """``cost_model`` priced with :func:`~meshtune.hardware.tiers.ring_profile`: the links the
        rings of ``mesh`` really run on (both axes' slower one on a ring of all chips). A
        grouped pass (``op.groups`` GeMMs, a mesh's experts) is its one GeMM's cost
        ``groups`` times (:meth:`PassCost.grouped`): a weight-moving dataflow moves every
        expert's weight, an activation-moving one each expert's tokens."""
        return self.cost_model(op, mesh, ring_profile(profile, mesh), config).grouped(op.groups)

    def pass_comms(
        self, op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int
    ) -> list[Comm]:
        """Every communication of the pass ``op``: ``comms`` of its one GeMM, issued
        ``op.groups`` times (:func:`~meshtune.cost.schedule.repeated`), the traffic that
        :meth:`cost` prices."""
        return repeated(self.comms(op, mesh, config, bytes_per_element), op.groups)

    def layer_columns(
        self, ops: Sequence[GemmOp], mesh: Mesh, configs: Sequence[Config], bytes_per_element: int
    ) -> list[CommColumns]:
        """:meth:`pass_comms` of every configuration and pass as columns, configuration-major
        (:data:`ColumnsBuilder`): ``comm_columns`` when the algorithm has it, each op's
        counts multiplied by its ``groups``; else the lists, listed one by one."""
        if self.comm_columns is None:
            listed = [
                self.pass_comms(op, mesh, c, bytes_per_element) for c in configs for op in ops
            ]
            return [columns(listed)]
        found = self.comm_columns(ops, mesh, configs, bytes_per_element)
        groups = [op.groups for op in ops]
        if groups == [1] * len(ops):
            return found
        import numpy as np

        issued = np.array(groups)
        return [b._replace(issues=b.issues * issued[b.row % len(ops)]) for b in found]

    def pass_times(
        self, ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile, configs: Sequence[Config]
    ) -> npt.NDArray[np.float64] | None:
        """``cost(ops[j], mesh, profile, configs[i]).total_s`` as array ``[i, j]`` (to
        rounding), from ``layer_times`` priced as :meth:`cost` prices (the links of
        :func:`~meshtune.hardware.tiers.ring_profile`, every time ``groups`` times); ``None``
        when the algorithm has no ``layer_times``."""
        if self.layer_times is None:
            return None
        times = self.layer_times(ops, mesh, ring_profile(profile, mesh), configs)
        groups = [op.groups for op in ops]
        if groups == [1] * len(ops):
            return times
        import numpy as np

        grouped: npt.NDArray[np.float64] = times * np.array(groups, dtype=np.float64)
        return grouped

    def layer_floor(self, ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile) -> float:
        """A lower bound of ``Σ cost(op, mesh, profile, config).total_s`` over ``ops`` for every
        configuration: ``pass_floors`` priced as :meth:`cost` prices (the links of
        :func:`~meshtune.hardware.tiers.ring_profile`, every pass ``groups`` times); 0.0 when the
        algorithm has no ``pass_floors``."""
        if self.pass_floors is None:
            return 0.0
        floors = self.pass_floors(ops, mesh, ring_profile(profile, mesh))
        return sum(f * op.groups for f, op in zip(floors, ops, strict=True))

    def family_floor(
        self, meshes: Sequence[Mesh], profiles: Sequence[HardwareProfile]
    ) -> Callable[[Sequence[GemmOp]], list[float] | None] | None:
        """A function of ``ops`` giving :meth:`layer_floor` of them on each of ``meshes``
        (``profiles[i]`` the profile of ``meshes[i]``), equal to it to the bit, from one
        evaluation of ``family_floors``; ``None`` when the algorithm has none, and the function
        answers ``None`` where a profile lacks a link it needs or for sizes it cannot price
        exactly (:meth:`layer_floor` then decides, mesh by mesh)."""
        each = self.family_block_floors(meshes, profiles)
        if each is None:
            return None

        def layer(ops: Sequence[GemmOp]) -> list[float] | None:
            (found,) = each([ops])
            return None if found is None else found.tolist()

        return layer

    def family_block_floors(
        self, meshes: Sequence[Mesh], profiles: Sequence[HardwareProfile]
    ) -> Callable[[Sequence[Sequence[GemmOp]]], list[FloatArray | None]] | None:
        """:meth:`family_floor` of several lists of ops at once: a function of ``blocks`` giving,
        per list, the array of :meth:`layer_floor` of its ops on each of ``meshes`` (the same
        floats, summed in the same order), from one evaluation of ``family_floors`` over every
        list's ops (the cluster search floors every micro-batch size of a TP size together);
        ``None`` when the algorithm has none, and a list's entry ``None`` where a
        profile lacks a link or its sizes cannot be priced exactly."""
        import numpy as np

        if self.family_floors is None:
            return None
        try:
            each = self.family_floors(
                meshes, [ring_profile(p, m) for m, p in zip(meshes, profiles, strict=True)]
            )
        except ProfileError:
            return None

        def summed(blocks: Sequence[Sequence[GemmOp]]) -> list[FloatArray | None]:
            try:
                floors = each([op for ops in blocks for op in ops])
            except ProfileError:
                return [None] * len(blocks)
            except ValueError:  # some list's sizes: each list alone
                return [summed([ops])[0] for ops in blocks] if len(blocks) > 1 else [None]
            found: list[FloatArray | None] = [None] * len(blocks)
            starts = np.cumsum([0, *(len(ops) for ops in blocks)])
            sizes: dict[int, list[int]] = {}  # pass count → the lists of that many
            for b, ops in enumerate(blocks):
                sizes.setdefault(len(ops), []).append(b)
            for size, which in sizes.items():
                if size == 0:
                    for b in which:
                        found[b] = np.zeros(len(meshes))
                    continue
                if len(which) == len(blocks):  # every list: their passes one after another
                    table = floors.T.reshape(len(blocks), size, len(meshes))
                else:
                    table = floors.T[starts[which][:, None] + np.arange(size)]
                groups = [op.groups for b in which for op in blocks[b]]
                if any(g != 1 for g in groups):  # (× 1.0 leaves a float as it is)
                    table = table * np.array(groups, dtype=np.float64).reshape(-1, size, 1)
                # Σ in layer_floor's order: a running sum, pass after pass
                total = np.add.accumulate(table, axis=1)[:, -1]  # (lists, meshes)
                for row, b in enumerate(which):
                    found[b] = total[row]
            return found

        return summed

    def execute(
        self, op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int
    ) -> Array:
        """Run one pass on the virtual mesh: dense A and B in, dense C out (counters filled)."""
        run: Executor = resolve(self.executor)
        return run(op, a, b, mesh, config, block)

    def mode(self, requested: DataflowMode) -> DataflowMode:
        """The phase-1 mode this algorithm runs with when the user asked for ``requested``."""
        return self.dataflow_mode or requested
