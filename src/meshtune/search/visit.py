"""The visit of the cluster search (:mod:`meshtune.search.levels`, issue 17): its unit, its
order, and what the costing already knows of the meshes a unit is costed on.

The unit is a (split, ZeRO stage, EP, CP) :class:`Group` with the TP meshes of its size;
:func:`visits` gives them in the order of every (split, mesh) sorted, so that the search decides
as it did one (split, mesh) at a time; :class:`Floors` holds the least block time each mesh of
a family can still have, which lets the search skip a group whose budget it passes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from meshtune.algorithm import Algorithm
from meshtune.dataflow import GemmOp
from meshtune.mesh import Mesh
from meshtune.search.arrays import BOUND_SLACK
from meshtune.search.costing import Costing
from meshtune.step.model import Zero

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray

# Visit order of the search (Group.lead); it changes the speed, never the result.
VISIT_TP_WEIGHT = 0.05


class Group(NamedTuple):
    """One (split, ZeRO stage, EP, CP) waiting to be costed on each TP mesh of its size, with
    its quick bound: the unit of the visit (its meshes share the bound and the budget; a named
    tuple, as a large search makes tens of thousands; the search tells them apart by id)."""

    quick: float
    split: tuple[int, int, int, int]
    zero: Zero
    tp: int
    ep: int
    cp: int
    micro_batch: int

    @property
    def family(self) -> tuple[int, int, int, int]:
        """(CP, micro-batch, EP, TP): the mesh levels of its meshes."""
        return (self.cp, self.micro_batch, self.ep, self.tp)

    def lead(self) -> tuple[float, int, int]:
        """The head of the visit order, the same for all its meshes: likely-fast first, so the
        bound prunes early: the quick bound, raised by VISIT_TP_WEIGHT per doubling of the TP
        size (bigger meshes communicate more), then DP and PP. Only the order of the visit
        depends on it; every (split, mesh) is still skipped by its true bound."""
        dp, pp, _, _ = self.split
        return (self.quick * (1 + VISIT_TP_WEIGHT * math.log2(self.tp)), dp, pp)

    def tail(self) -> tuple[int, int, int, int]:
        """The end of the visit order, after the mesh's rows: (m, v, EP, CP)."""
        _, _, m, vpp = self.split
        return (m, vpp, self.ep, self.cp)


def visits(
    groups: Sequence[Group],
    shapes: dict[int, tuple[Mesh, ...]],
    done: Callable[[Group], bool] = lambda group: False,
) -> Iterator[tuple[Group, list[Mesh]]]:
    """Runs of (group, meshes) in the visit order: every (group, mesh) sorted by (lead, mesh
    rows, tail), ties kept in the order of the groups and of each size's meshes. Groups tied
    on their lead (the same DP and PP) differ in their tail, so they are merged row by row.
    A run of a group ``done`` says is skipped when it comes (asked then). ``done``'s answers
    may change only while a run is consumed, so a group it has called done is not asked again
    until the next run is yielded (the rows of a merged block are many; issue 17)."""
    rows: dict[int, dict[int, list[Mesh]]] = {}  # TP → mesh rows → its meshes, in order
    for tp, meshes in shapes.items():
        rows[tp] = {}
        for mesh in sorted(meshes, key=lambda mesh: mesh.rows):
            rows[tp].setdefault(mesh.rows, []).append(mesh)
    every = {tp: [mesh for run in by_rows.values() for mesh in run] for tp, by_rows in rows.items()}
    ordered = {tp: sorted(by_rows) for tp, by_rows in rows.items()}  # TP → its mesh rows
    leads = [group.lead() for group in groups]
    order = sorted(range(len(groups)), key=leads.__getitem__)  # stable: ties in groups' order
    for _, tied in itertools.groupby(order, key=leads.__getitem__):
        block = [groups[i] for i in tied]
        if len(block) == 1:
            if not done(block[0]):
                yield block[0], every[block[0].tp]
            continue
        block.sort(key=Group.tail)
        gone: set[int] = set()  # indices in block done since the last run yielded
        sizes = {g.tp for g in block}  # one, unless a CP degree differs
        each = (
            ordered[block[0].tp] if len(sizes) == 1 else sorted({r for t in sizes for r in rows[t]})
        )
        for r in each:
            for i, g in enumerate(block):
                if r in rows[g.tp] and i not in gone:
                    if done(g):
                        gone.add(i)
                    else:
                        yield g, rows[g.tp][r]
                        gone.clear()
            if len(gone) == len(block):  # all done, and nothing changes until a run is yielded
                break


class Floors:
    """What is known of the block time of each mesh of one family (CP, micro-batch, EP, TP),
    the least over the algorithms, kept up to date as the search costs its meshes; ``costed``
    counts those costings. Per algorithm: its :class:`BlockFloors` (every layer's floor, not
    only the largest's: most levels are decided by them alone, issue 17), raised to what
    :meth:`Costing.floor` knows once a mesh is costed; an algorithm with no family floor has
    :meth:`Costing.floors` (a level not started is started for its floor)."""

    def __init__(
        self,
        blocks: BlockFloors,
        algorithms: Sequence[Algorithm],
        meshes: Sequence[Mesh],
        micro_batch: int,
        ep: int,
    ) -> None:
        costing = self.costing = blocks.costing
        self.algorithms, self.micro_batch, self.ep = algorithms, micro_batch, ep
        self.index = blocks.index(meshes)
        self.tight = [blocks.of(a, meshes, micro_batch, ep) for a in algorithms]
        self.known = [  # per algorithm, in the order of meshes: the most it knows
            costing.floors(a, meshes, micro_batch, ep) if tight is None else list(tight)
            for a, tight in zip(algorithms, self.tight, strict=True)
        ]
        self.each = list(map(min, *self.known)) if len(self.known) > 1 else self.known[0]
        self.costed = 0
        self._least = min(self.each)  # kept up to date by cost
        self._any_infeasible = math.inf in self.each

    def least(self, examples_wanted: bool) -> float:
        """The least floor: below it a mesh's costing may give a candidate, at or past it every
        one answers None or its infeasible level (inf: every algorithm infeasible); −inf while
        ``examples_wanted`` and a mesh is infeasible (its reason must be collected)."""
        return -math.inf if examples_wanted and self._any_infeasible else self._least

    def of(self, mesh: Mesh, examples_wanted: bool) -> float:
        """:meth:`least` of ``mesh`` alone."""
        floor = self.each[self.index[mesh]]
        return -math.inf if examples_wanted and floor == math.inf else floor

    def cost(self, mesh: Mesh) -> None:
        """Count a costing of ``mesh`` and refresh its floor."""
        self.costed += 1
        i = self.index[mesh]
        for algorithm, known, tight in zip(self.algorithms, self.known, self.tight, strict=True):
            floor = self.costing.floor(algorithm, mesh, self.micro_batch, self.ep)
            known[i] = floor if tight is None else max(floor, tight[i])
        self.each[i] = min(known[i] for known in self.known)
        self._least = min(self.each)
        self._any_infeasible = math.inf in self.each


class BlockFloors:
    """Lower bounds of a block's FC time on every mesh of a family, for one
    :class:`~meshtune.search.costing.Costing` (one CP degree), from the floors
    :meth:`Costing.evaluate` raises a level's layers to before it prices a configuration:
    their compute floors (:class:`~meshtune.search.costing.ComputeFloors`) and their
    :func:`~meshtune.search.phase2.layer_floor` (:meth:`Algorithm.family_block_floors`).
    ``families``: TP size → the (micro-batch, EP) of its families the search will ask, floored
    together when the first of them is asked (one NumPy evaluation per TP size, not per family:
    Llama 3.1 405B at 55,440 chips has 2,332 families of 104 TP sizes; issue 17)."""

    def __init__(
        self, costing: Costing, families: Mapping[int, Sequence[tuple[int, int]]] | None = None
    ) -> None:
        self.costing = costing
        self.families = families or {}
        self.layers: dict[tuple[str, int], _Size] = {}
        """(algorithm name, TP) → what is known of that size's meshes (:class:`_Size`)."""
        self.indices: dict[int, tuple[Sequence[Mesh], dict[Mesh, int]]] = {}
        """TP → the meshes last asked of that size and each one's index among them."""

    def index(self, meshes: Sequence[Mesh]) -> dict[Mesh, int]:
        """Each of ``meshes``' index in it (kept per chip count)."""
        known = self.indices.get(meshes[0].chips)
        if known is None or known[0] != meshes:  # the same tuple each time: quick
            known = self.indices[meshes[0].chips] = (meshes, {m: i for i, m in enumerate(meshes)})
        return known[1]

    def of(
        self, algorithm: Algorithm, meshes: Sequence[Mesh], micro_batch: int, ep: int
    ) -> list[float] | None:
        """A lower bound of ``algorithm``'s block FC time (one micro-batch of ``micro_batch``
        sequences, EP ``ep``) on each of ``meshes`` (one chip count), in their order: the
        larger of Σ the layers' compute floors and Σ their layer floors (one evaluation of the
        family floor on every pass of the block), each sum at most Σ of the layers' times; inf
        on a mesh the algorithm does not allow (its level is infeasible). None when the family
        floor does not answer (no family floor, a missing link, sizes past float64's exact
        integers). Cached; not to be changed by the caller."""
        key = (algorithm.name, meshes[0].chips)
        size = self.layers.get(key)
        if size is None or size.meshes != meshes:  # the same tuple each time: quick
            allowed = [algorithm.mesh_problem(mesh) is None for mesh in meshes]
            family = [mesh for mesh, ok in zip(meshes, allowed, strict=True) if ok]
            profiles = [self.costing.mesh_profile(mesh) for mesh in family]
            floors = algorithm.family_block_floors(family, profiles) if family else None
            size = self.layers[key] = _Size(meshes, allowed, floors, {})
        if (micro_batch, ep) not in size.found:
            asked = [(micro_batch, ep)] + [
                pair
                for pair in self.families.get(meshes[0].chips, ())
                if pair not in size.found and pair != (micro_batch, ep)
            ]
            size.found.update(zip(asked, self._floors(algorithm, size, asked), strict=True))
        return size.found[micro_batch, ep]

    def _floors(
        self, algorithm: Algorithm, size: _Size, asked: Sequence[tuple[int, int]]
    ) -> list[list[float] | None]:
        """:meth:`of` of each (micro-batch, EP) of ``asked`` on ``size``'s meshes."""
        import numpy as np  # not at module import: the CLI starts without NumPy

        if size.floors is None:
            return [None] * len(asked)
        costing, chips = self.costing, size.meshes[0].chips
        blocks = [costing.block(algorithm, micro, ep) for micro, ep in asked]
        found = size.floors([[op for c in block.layers for op in c.ops] for block in blocks])
        answers: list[list[float] | None] = [None] * len(asked)
        priced = [i for i, layer in enumerate(found) if layer is not None]
        if not priced:
            return answers
        layers = np.array([found[i] for i in priced])  # (priced, allowed meshes)
        compute = np.array(  # Σ the compute floors of each block, as a column
            [costing.block_compute_floor(blocks[i], chips) for i in priced]
        )[:, None]
        each = np.full((len(priced), len(size.meshes)), math.inf)
        # slack_floor of each layer floor, the larger of it and the compute floor
        slacked = np.where(np.isfinite(layers), layers * BOUND_SLACK, 0.0)
        each[:, np.array(size.allowed)] = np.maximum(compute, slacked)
        for i, row in zip(priced, each.tolist(), strict=True):
            answers[i] = row
        return answers


@dataclass
class _Size:
    """What :class:`BlockFloors` knows of one algorithm on the meshes of one TP size: the
    meshes last asked, which of them it allows, :meth:`Algorithm.family_block_floors` on
    those (None: it has none) and ``found``: (micro-batch, EP) → :meth:`BlockFloors.of`."""

    meshes: Sequence[Mesh]
    allowed: list[bool]
    floors: Callable[[Sequence[Sequence[GemmOp]]], list[FloatArray | None]] | None
    found: dict[tuple[int, int], list[float] | None]
