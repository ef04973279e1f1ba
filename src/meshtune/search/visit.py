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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from meshtune.algorithm import Algorithm
from meshtune.mesh import Mesh
from meshtune.search.costing import Costing
from meshtune.step.model import Zero

# Visit order of the search (Group.lead); it changes the speed, never the result.
VISIT_TP_WEIGHT = 0.05


@dataclass(frozen=True)
class Group:
    """One (split, ZeRO stage, EP, CP) waiting to be costed on each TP mesh of its size, with
    its quick bound: the unit of the visit (its meshes share the bound and the budget)."""

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
    for _, tied in itertools.groupby(sorted(groups, key=Group.lead), key=Group.lead):
        block = sorted(tied, key=Group.tail)
        if len(block) == 1:
            if not done(block[0]):
                yield block[0], every[block[0].tp]
            continue
        gone: set[int] = set()  # indices in block done since the last run yielded
        for r in sorted({r for g in block for r in rows[g.tp]}):
            for i, g in enumerate(block):
                if r in rows[g.tp] and i not in gone:
                    if done(g):
                        gone.add(i)
                    else:
                        yield g, rows[g.tp][r]
                        gone.clear()


class Floors:
    """What :meth:`Costing.floor` knows of the block time of each mesh of one family (CP,
    micro-batch, EP, TP), the least over the algorithms (a level not started is started for
    its floor), kept up to date as the search costs its meshes; ``costed`` counts those
    costings."""

    def __init__(
        self,
        costing: Costing,
        algorithms: Sequence[Algorithm],
        meshes: Sequence[Mesh],
        micro_batch: int,
        ep: int,
    ) -> None:
        self.costing, self.algorithms = costing, algorithms
        self.micro_batch, self.ep = micro_batch, ep
        each = [costing.floors(a, meshes, micro_batch, ep) for a in algorithms]
        self.each = {mesh: min(floors) for mesh, *floors in zip(meshes, *each, strict=True)}
        self.costed = 0
        self._least = min(self.each.values())  # kept up to date by cost
        self._any_infeasible = math.inf in self.each.values()

    def _floor(self, mesh: Mesh) -> float:
        return min(self.costing.floor(a, mesh, self.micro_batch, self.ep) for a in self.algorithms)

    def least(self, examples_wanted: bool) -> float:
        """The least floor: below it a mesh's costing may give a candidate, at or past it every
        one answers None or its infeasible level (inf: every algorithm infeasible); −inf while
        ``examples_wanted`` and a mesh is infeasible (its reason must be collected)."""
        return -math.inf if examples_wanted and self._any_infeasible else self._least

    def of(self, mesh: Mesh, examples_wanted: bool) -> float:
        """:meth:`least` of ``mesh`` alone."""
        floor = self.each[mesh]
        return -math.inf if examples_wanted and floor == math.inf else floor

    def cost(self, mesh: Mesh) -> None:
        """Count a costing of ``mesh`` and refresh its floor."""
        self.costed += 1
        self.each[mesh] = self._floor(mesh)
        self._least = min(self.each.values())
        self._any_infeasible = math.inf in self.each.values()
