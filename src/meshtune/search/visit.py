"""The visit of the cluster search (:mod:`meshtune.search.levels`): its unit, its
order, and what the costing already knows of the meshes a unit is costed on.

The unit is a (split, ZeRO stage, EP, CP) :class:`Group` with the TP meshes of its size;
:func:`visits` gives them in the order of every (split, mesh) sorted, so that the search decides
as a visit of one (split, mesh) at a time would; :class:`Floors` holds the least block time each
mesh of a family can still have, which lets the search skip a group whose budget it passes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from meshtune.algorithms.base import Algorithm
from meshtune.dataflow import GemmOp
from meshtune.hardware.mesh import Mesh
from meshtune.ranks import ranks
from meshtune.search.arrays import BOUND_SLACK
from meshtune.search.costing import Costing
from meshtune.step.options import Zero

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray
    from meshtune.ranks import IntArray
    from meshtune.search.space import Fittings

# Visit order of the search (Groups.order); it changes the speed, never the result.
VISIT_TP_WEIGHT = 0.05


class Group(NamedTuple):
    """One (split, ZeRO stage, EP, CP) waiting to be costed on each TP mesh of its size, with
    its quick bound: the unit of the visit (its meshes share the bound and the budget), one
    row of :class:`Groups` (``row``: its split's row of the space's
    :class:`~meshtune.search.space.Fittings`)."""

    quick: float
    split: tuple[int, int, int, int]
    zero: Zero
    tp: int
    ep: int
    cp: int
    micro_batch: int
    row: int

    @property
    def family(self) -> tuple[int, int, int, int]:
        """(CP, micro-batch, EP, TP): the mesh levels of its meshes."""
        return (self.cp, self.micro_batch, self.ep, self.tp)


class Groups:
    """Every group of a search as columns (Llama 3.1 405B at 55,440 chips: 47,472):
    each fitting split of ``rows`` (ascending rows of ``fitting``, whose rows come in the order
    :meth:`~meshtune.search.space.SplitSpace.build` makes them: CP, DP, PP, m, v) with each
    of its EP degrees, in the order of the rows, then of their EP degrees. :meth:`of` makes a
    row's :class:`Group`; ``family[i]`` numbers its family (CP, micro-batch, EP, TP) in the
    order each family first appears, and ``members[f]`` lists family ``f``'s groups in
    order."""

    def __init__(self, fitting: Fittings, rows: IntArray) -> None:
        import numpy as np  # not at module import: the CLI starts without NumPy

        lengths = np.array([len(degrees) for degrees in fitting.eps], dtype=np.int64)
        counts = lengths[fitting.eps_of[rows]]  # groups of each row
        self.row = np.repeat(rows, counts)
        # each group's place among its row's EP degrees, then in all of them one after another
        offset = np.arange(len(self.row)) - np.repeat(np.cumsum(counts) - counts, counts)
        pool = np.array([d for degrees in fitting.eps for d in degrees], dtype=np.int64)
        starts = np.cumsum(lengths) - lengths
        self.ep = pool[starts[fitting.eps_of[self.row]] + offset]
        self.fitting = fitting
        self.cp, self.micro, self.tp = (
            fitting.cp[self.row],
            fitting.micro[self.row],
            fitting.tp[self.row],
        )
        # the TP sizes, and each group's as its index among them
        self.tp_sizes, self.sized = ranks(self.tp)
        # a family's number: (CP, TP) and (micro-batch, EP) each as one integer, then the pair
        top = int(self.ep.max(initial=0)) + 1
        _, batches = ranks(self.micro * top + self.ep)
        key = (self.cp * len(self.tp_sizes) + self.sized) * len(self.row) + batches
        keys, first, which = np.unique(key, return_index=True, return_inverse=True)
        numbered = np.empty(len(keys), dtype=np.int64)
        numbered[np.argsort(first, kind="stable")] = np.arange(len(keys))
        self.family = numbered[which.reshape(-1)]
        by_family = np.argsort(self.family, kind="stable")
        ends = np.cumsum(np.bincount(self.family, minlength=len(keys)))
        self.members = np.split(by_family, ends[:-1])
        self.tps: list[int] = self.tp.tolist()
        """Each group's TP size, as Python numbers (the visit reads them one at a time)."""
        self._columns = [  # as Python numbers: the search reads a group's at a time
            column.tolist()
            for column in (
                fitting.quick[self.row],
                fitting.dp[self.row],
                fitting.pp[self.row],
                fitting.m[self.row],
                fitting.vpp[self.row],
                fitting.zero[self.row],
                self.ep,
                self.cp,
                self.micro,
                self.row,
            )
        ]

    def __len__(self) -> int:
        return len(self.row)

    def of(self, i: int) -> Group:
        """Group ``i``."""
        quick, dp, pp, m, vpp, zero, ep, cp, micro, row = self._columns
        split = (dp[i], pp[i], m[i], vpp[i])
        return Group(quick[i], split, zero[i], self.tps[i], ep[i], cp[i], micro[i], row[i])

    def sizes(self, cp: int) -> dict[int, list[tuple[int, int]]]:
        """TP size → the (micro-batch, EP) of its families of CP ``cp``, in family order."""
        found: dict[int, list[tuple[int, int]]] = {}
        for members in self.members:
            i = int(members[0])
            if int(self.cp[i]) == cp:
                found.setdefault(int(self.tp[i]), []).append((int(self.micro[i]), int(self.ep[i])))
        return found

    def order(self) -> tuple[list[int], list[int]]:
        """The visit order of the groups and where each block of it starts (then the end).

        Likely-fast first, so the bound prunes early: by the quick bound raised by
        VISIT_TP_WEIGHT per doubling of the TP size (bigger meshes communicate more), then DP
        and PP: the lead, which a group's meshes share; groups of equal lead form a block,
        ordered by their tail (m, v, EP, CP) and visited row by row (:func:`visits`). Ties
        keep the groups' order. Only the order depends on it; every (split, mesh) is still
        skipped by its true bound."""
        import numpy as np  # not at module import: the CLI starts without NumPy

        if not len(self):
            return [], [0]
        weight = np.array([1 + VISIT_TP_WEIGHT * math.log2(tp) for tp in self.tp_sizes.tolist()])
        lead = self.fitting.quick[self.row] * weight[self.sized]
        dp, pp = self.fitting.dp[self.row], self.fitting.pp[self.row]
        if (self.cp == self.cp[0]).all():  # the groups come by DP, PP, m, v, EP already
            order = np.argsort(lead, kind="stable")
        else:
            m, vpp = self.fitting.m[self.row], self.fitting.vpp[self.row]
            order = np.lexsort((self.cp, self.ep, vpp, m, pp, dp, lead))
        lead, dp, pp = lead[order], dp[order], pp[order]
        new = (lead[1:] != lead[:-1]) | (dp[1:] != dp[:-1]) | (pp[1:] != pp[:-1])
        starts = np.flatnonzero(np.concatenate(([True], new, [True])))
        return order.tolist(), starts.tolist()


def visits(
    groups: Groups, shapes: dict[int, tuple[Mesh, ...]], skip: bytearray
) -> Iterator[tuple[int, list[Mesh]]]:
    """Runs of (group, meshes) in the visit order: every (group, mesh) sorted by the group's
    lead (:meth:`Groups.order`), the mesh's rows, then the group's tail, ties kept in the order
    of the groups and of each size's meshes: a block of groups tied on their lead is merged
    row by row. A run of a group whose ``skip`` byte is set when it comes is skipped. The
    bytes may change only while a run is consumed, so a group found skipped is not looked at
    again until the next run is yielded (the rows of a merged block are many)."""
    rows: dict[int, dict[int, list[Mesh]]] = {}  # TP → mesh rows → its meshes, in order
    for tp, meshes in shapes.items():
        rows[tp] = {}
        for mesh in sorted(meshes, key=lambda mesh: mesh.rows):
            rows[tp].setdefault(mesh.rows, []).append(mesh)
    every = {tp: [mesh for run in by_rows.values() for mesh in run] for tp, by_rows in rows.items()}
    ordered = {tp: sorted(by_rows) for tp, by_rows in rows.items()}  # TP → its mesh rows
    order, starts = groups.order()
    tps = groups.tps
    for lo, hi in itertools.pairwise(starts):
        if hi - lo == 1:
            i = order[lo]
            if not skip[i]:
                yield i, every[tps[i]]
            continue
        block = order[lo:hi]
        gone: set[int] = set()  # groups skipped since the last run yielded
        sizes = {tps[i] for i in block}  # one, unless a CP degree differs
        each = (
            ordered[tps[block[0]]]
            if len(sizes) == 1
            else sorted({r for t in sizes for r in rows[t]})
        )
        for r in each:
            for i in block:
                if r in rows[tps[i]] and i not in gone:
                    if skip[i]:
                        gone.add(i)
                    else:
                        yield i, rows[tps[i]][r]
                        gone.clear()
            if len(gone) == len(block):  # all skipped, and nothing changes until a run is yielded
                break


class Floors:
    """What is known of the block time of each mesh of one family (CP, micro-batch, EP, TP),
    the least over the algorithms, kept up to date as the search costs its meshes; ``costed``
    counts those costings. Per algorithm: its :class:`BlockFloors` (every layer's floor, not
    only the largest's: most levels are decided by them alone), raised to what
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
    Llama 3.1 405B at 55,440 chips has 2,332 families of 104 TP sizes)."""

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
