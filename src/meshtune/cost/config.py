"""An algorithm's knobs for one layer (:class:`Config`) and the shapes of the functions an
algorithm's cost module provides (candidates, vectorised columns, times and floors); the
interface built on them is :class:`meshtune.algorithms.base.Algorithm`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meshtune.cost.schedule import CommColumns
from meshtune.dataflow import GemmOp
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


@dataclass(frozen=True, order=True)
class Config(Mapping[str, int]):
    """An algorithm's knobs for one layer, e.g. ``{"slices": 4}``; ordered for tie-breaks.

    Ties between equally fast configurations go to the smaller values, compared in the order of
    the knob names.
    """

    items_: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, **knobs: int) -> Config:
        """``Config.of(slices=4)``."""
        return cls(tuple(sorted(knobs.items())))

    def __getitem__(self, key: str) -> int:
        for name, value in self.items_:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self.items_)

    def __len__(self) -> int:
        return len(self.items_)

    def sort_key(self) -> tuple[int, ...]:
        """Values in knob-name order (smaller first wins a tie)."""
        return tuple(value for _, value in self.items_)

    @property
    def label(self) -> str:
        """``S=4`` style text for reports (``-`` when there are no knobs)."""
        short = {"slices": "S"}
        return ", ".join(f"{short.get(k, k)}={v}" for k, v in self.items_) or "-"


Candidates = tuple[tuple[Config, ...], str | None]
"""Legal configurations, or ``((), reason)`` when there are none."""


ColumnsBuilder = Callable[[Sequence[GemmOp], Mesh, Sequence[Config], int], list[CommColumns]]
"""``(ops, mesh, configs, bytes_per_element) ->`` the columns of ``comms(op, mesh, config,
bytes_per_element)`` for every config and op, in blocks, configuration-major (row
``i · len(ops) + j``: ``configs[i]``, ``ops[j]``), each op counted as one GeMM (``groups`` left
to :meth:`Algorithm.layer_columns`)."""


TimesBuilder = Callable[
    [Sequence[GemmOp], Mesh, HardwareProfile, Sequence[Config]], "npt.NDArray[np.float64]"
]
"""``(ops, mesh, profile, configs) ->`` array ``[i, j]`` = ``cost_model(ops[j], mesh, profile,
configs[i]).total_s`` (each op as one GeMM: ``groups`` left to :meth:`Algorithm.pass_times`),
to rounding."""


FloorBuilder = Callable[[Sequence[GemmOp], Mesh, HardwareProfile], list[float]]
"""``(ops, mesh, profile) ->`` for each op a lower bound of ``cost_model(op, mesh, profile,
config).total_s`` over every configuration (each op as one GeMM), cheap enough to check before
any configuration is listed or priced."""


FamilyFloorBuilder = Callable[
    [Sequence[Mesh], Sequence[HardwareProfile]],
    Callable[[Sequence[GemmOp]], "npt.NDArray[np.float64]"],
]
"""``(meshes, profiles) ->`` a function of ``ops`` giving the array ``[i, j]`` =
``pass_floors(ops, meshes[i], profiles[i])[j]`` (equal to the bit): what does not depend on
the passes (rings, links) is looked up once for all the meshes."""
