"""Table 3 of MeshSlice (§5.3) as the artifact ran it: one mesh, fixed slice counts, and what
overlaps with compute.

The paper's Table 3 measures Collective, Wang and MeshSlice on a real 4×4 TPUv4 slice; its
artifact (hwnam831/meshslice ``BenchTransformer.py``) runs every FC layer with the loop count
``ksplit`` = 8 at batch = rows × cols. A model reproduces such a measurement by pricing the
same run: the mesh given, each layer at the slice count the run used where the algorithm has
it (any other knob, e.g. Wang's split ring, and every layer without that slice count take the
searched best), on the profile under three assumptions about overlap:

* ``profile``: what the profile says overlaps (the real slice: send-recv only, §5.3);
* ``nothing``: no communication overlaps compute, which is how §5.3.1 explains Wang's
  measured result (the JAX compiler serialising its SendRecvs);
* ``everything``: every kind overlaps (the paper's "MeshSlice Overlap" estimate).

``utilization = FC FLOPs / (FC time · chips · peak FLOP/s)`` (§5.1.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from meshtune.algorithms.registry import get_algorithm
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.search import flop_utilization, layer_choice, search
from meshtune.search.phase2 import LayerChoice, MeshResult
from meshtune.units import FROZEN

Overlap = Literal["profile", "nothing", "everything"]
OVERLAPS: tuple[Overlap, ...] = ("profile", "nothing", "everything")


class RunCell(BaseModel):
    """One algorithm under one overlap assumption, run as the artifact ran it."""

    model_config = FROZEN

    algorithm: str
    overlap: Overlap
    mesh: str
    configs: dict[str, dict[str, int]]
    fc_time_s: float
    utilization: float


def overlap_profile(profile: HardwareProfile, overlap: Overlap) -> HardwareProfile:
    """``profile`` with its ``overlapped`` kinds as ``overlap`` assumes."""
    if overlap == "profile":
        return profile
    kinds = [] if overlap == "nothing" else list(CollectiveKind)
    return profile.model_copy(update={"overlapped": kinds})


def _as_run(best: MeshResult, profile: HardwareProfile, slices: int) -> list[LayerChoice]:
    """Every layer at ``slices`` where it has a configuration with that slice count (the
    fastest of them), else at the searched configuration."""
    out = []
    for chosen in best.layers:
        same = [c for c in chosen.candidates if c.get("slices") == slices]
        priced = [
            layer_choice(best.algorithm, chosen.dataflow, best.mesh, profile, c) for c in same
        ]
        out.append(min(priced, key=lambda c: (c.time_s, c.config.sort_key()), default=chosen))
    return out


def real_run(
    model: ModelSpec,
    profile: HardwareProfile,
    mesh: Mesh,
    *,
    batch: int,
    slices: int,
    algorithms: Sequence[str],
    seq_len: int | None = None,
) -> list[RunCell]:
    """Each of ``algorithms`` (registered names: Table 3's are Collective, Wang and MeshSlice)
    on ``mesh`` at ``batch`` sequences, its layers at ``slices`` where legal, under each of
    :data:`OVERLAPS` (see the module docstring).

    The search (dataflow and the knobs the run does not fix) is redone for each overlap
    assumption. Raises :class:`~meshtune.errors.InfeasibleError` when an algorithm cannot run
    the model on ``mesh`` and :class:`~meshtune.errors.MeshtuneError` for an unknown name.
    """
    layers = fc_layers(model, batch, model.seq_len if seq_len is None else seq_len)
    cells = []
    for overlap in OVERLAPS:
        priced = overlap_profile(profile, overlap)
        for name in algorithms:
            algorithm = get_algorithm(name)
            found = search(
                layers, priced, mesh.chips, algorithm, blocks=model.blocks, shapes=[mesh]
            )
            run = _as_run(found.best, priced, slices)
            time_s = model.blocks * sum(c.time_s for c in run)
            cells.append(
                RunCell(
                    algorithm=algorithm.name,
                    overlap=overlap,
                    mesh=mesh.label,
                    configs={c.dataflow.layer.name: dict(c.config) for c in run},
                    fc_time_s=time_s,
                    utilization=flop_utilization(
                        found.best.flops, time_s, mesh.chips, priced.peak_flops_per_s
                    ),
                )
            )
    return cells
