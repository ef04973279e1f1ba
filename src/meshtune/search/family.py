"""The floors of a family's mesh levels, found at once (issue 17).

The cluster search asks the floor of every TP mesh of a size at one (algorithm, micro-batch,
EP) before it costs any of them (:meth:`meshtune.search.costing.Costing.floors`): every layer's
:func:`~meshtune.search.phase2.layer_floor` on every mesh, from one evaluation of
:meth:`~meshtune.algorithm.Algorithm.family_layer_floors`. A :class:`Family` is the part that
depends on the meshes alone (their links are looked up once per list of meshes), a
:class:`FamilyFloors` what one block's layers found there, kept for the levels started later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meshtune.algorithm import Algorithm
from meshtune.dataflow import GemmOp
from meshtune.mesh import Mesh
from meshtune.specs import HardwareProfile

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray


@dataclass(frozen=True)
class Family:
    """The meshes of a list that an algorithm allows, when they are two or more of one chip
    count, and :meth:`Algorithm.family_layer_floors` on them (``None`` otherwise, or when the
    algorithm has none): ``positions`` pairs each one's index in the list with its row,
    ``rows`` maps each one to its row."""

    meshes: tuple[Mesh, ...]
    positions: tuple[tuple[int, int], ...]
    rows: dict[Mesh, int]
    layers: Callable[[Sequence[Sequence[GemmOp]]], FloatArray | None] | None

    @classmethod
    def of(
        cls,
        algorithm: Algorithm,
        meshes: Sequence[Mesh],
        profile: Callable[[Mesh], HardwareProfile],
    ) -> Family:
        """The family of ``meshes`` for ``algorithm``, ``profile(mesh)`` each one's profile."""
        allowed = [i for i, mesh in enumerate(meshes) if algorithm.mesh_problem(mesh) is None]
        chosen = tuple(meshes[i] for i in allowed)
        if len(chosen) < 2 or len({mesh.chips for mesh in chosen}) > 1:
            return cls(chosen, (), {}, None)
        layers = algorithm.family_layer_floors(chosen, [profile(mesh) for mesh in chosen])
        positions = tuple((i, row) for row, i in enumerate(allowed))
        return cls(chosen, positions, {mesh: row for row, mesh in enumerate(chosen)}, layers)


@dataclass(frozen=True)
class FamilyFloors:
    """What a :class:`Family` found for one block: ``floors[row, layer]``, the layer floors
    scaled as :func:`~meshtune.search.phase2.slack_floor` scales them."""

    family: Family
    floors: FloatArray

    def of(self, mesh: Mesh) -> list[float] | None:
        """The floors of ``mesh``'s layers, or ``None`` when it is not of the family."""
        row = self.family.rows.get(mesh)
        if row is None:
            return None
        floors: list[float] = self.floors[row].tolist()
        return floors
