"""The searches one :func:`meshtune.compare.model.compare_models` call shares between its views.

:class:`Searches` runs phase 1 + phase 2 (:func:`meshtune.planner.make.search_algorithms`, the
search ``meshtune plan`` runs on one mesh of every chip) once per (algorithm, profile, chips, batch,
dataflow mode), whichever views ask for it, and keeps the reason when nothing is feasible
instead of raising. :class:`StudySetup` is what every view of one call shares: the model, the
profile, the algorithms, the reference, the batch rule (weak scaling ``chips // 2`` as in
§5.1.1, or a fixed batch) and the chip count of the single-size views.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.algorithms.base import Algorithm
from meshtune.dataflow import DataflowMode
from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import check_size, search_algorithms, weak_scaling_batch
from meshtune.search import SearchResult


class Searches:
    """Phase 1 + phase 2 per (algorithm, profile, chips, batch, mode), each run once."""

    def __init__(self, model: ModelSpec, seq_len: int, mesh: Mesh | None) -> None:
        self.model = model
        self.seq_len = seq_len
        self.mesh = mesh
        self._done: dict[tuple[str, int, int, int, str], SearchResult | str] = {}
        """Each search's result or reason, keyed by (algorithm name, ``id`` of the profile,
        chips, batch, dataflow mode); the caller keeps every profile it passes alive."""

    def __call__(
        self,
        algorithm: Algorithm,
        profile: HardwareProfile,
        chips: int,
        batch: int,
        mode: DataflowMode = "auto",
    ) -> SearchResult | str:
        """The search of ``algorithm`` over ``mesh`` (or every shape it allows), or the reason
        nothing is feasible."""
        key = (algorithm.name, id(profile), chips, batch, mode)
        if key not in self._done:
            shapes = [self.mesh] if self.mesh is not None else list(algorithm.meshes(chips))
            if not shapes:
                self._done[key] = f"{algorithm.name} has no mesh shape of {chips} chips"
            else:
                try:
                    self._done[key] = search_algorithms(
                        algorithm.name,
                        self.model,
                        profile,
                        chips,
                        batch=batch,
                        seq_len=self.seq_len,
                        mode=mode,
                        meshes=shapes,
                    )[0]
                except InfeasibleError as exc:
                    self._done[key] = str(exc)
        return self._done[key]


@dataclass(frozen=True)
class StudySetup:
    """What every view of one :func:`~meshtune.compare.model.compare_models` call shares."""

    model: ModelSpec
    profile: HardwareProfile
    algorithms: tuple[Algorithm, ...]
    reference: str
    seq_len: int
    batch: int | None
    at_chips: int
    mesh: Mesh | None
    searches: Searches
    nonfc_note: str | None

    def batch_of(self, chips: int) -> int:
        """The batch at ``chips``: fixed, or ``chips // 2`` (weak scaling, §5.1.1)."""
        size = weak_scaling_batch(chips) if self.batch is None else self.batch
        check_size("tokens per step (batch × sequence length)", size * self.seq_len)
        return size

    def at(self, algorithm: Algorithm, mode: DataflowMode = "auto") -> SearchResult | str:
        """The search of ``algorithm`` at the single-size views' chip count."""
        return self.searches(
            algorithm, self.profile, self.at_chips, self.batch_of(self.at_chips), mode
        )
