"""The cluster-level comparison: each algorithm at its best DP × PP × mesh split.

``meshtune compare MODEL --chips 1024,4096 --cluster`` answers "MeshSlice or what I run today,
on my cluster?": at each chip count every selected algorithm gets the whole cluster search of
``meshtune plan`` (DP replicas, pipeline stages, virtual stages, micro-batches, ZeRO stage and
the tensor-parallel mesh, within the profile's memory; :mod:`meshtune.search.levels`) with the
same model, batch and sequence length, and the comparison lists each one's step time, MFU and
split, and how much faster the reference algorithm is (``speedup = other's step / reference's
step − 1``, :func:`meshtune.compare.selection.speedup`). The mesh-only views of
:mod:`meshtune.compare.views` stay for the paper's figures, where the mesh takes every chip.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from meshtune.algorithms.base import Algorithm
from meshtune.compare.selection import speedup
from meshtune.errors import InfeasibleError
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions
from meshtune.units import FROZEN


class ClusterEntry(BaseModel):
    """One algorithm at one chip count, at its best cluster split (or why it has none)."""

    model_config = FROZEN

    algorithm: str
    chips: int
    engine: bool = Field(description="Whether a real engine runs this algorithm.")
    dp: int | None = None
    pp: int | None = None
    mesh: str | None = None
    zero: int | None = None
    step_s: float | None = None
    mfu: float | None = None
    tokens_per_s: float | None = None
    memory_bytes: float | None = None
    speedup_of_reference: float | None = Field(
        default=None, description="This algorithm's step / the reference's − 1."
    )
    reason: str | None = None


def cluster_entries(
    model: ModelSpec,
    profile: HardwareProfile,
    sizes: Sequence[int],
    algorithms: Sequence[Algorithm],
    reference: str,
    batch_of: dict[int, int],
    seq_len: int,
) -> list[ClusterEntry]:
    """Every algorithm at every size of ``sizes`` (batch ``batch_of[chips]``), each at its best
    cluster split; sizes in order, algorithms in the order given. The reference's step at a
    size is what the speedups there compare with (none when it has no feasible split)."""
    out: list[ClusterEntry] = []
    for chips in sizes:
        row: list[ClusterEntry] = []
        for algorithm in algorithms:
            try:
                plan = make_plan(
                    model,
                    profile,
                    chips,
                    batch=batch_of[chips],
                    seq_len=seq_len,
                    algorithm=algorithm.name,
                    cluster=ClusterOptions(),
                )
            except InfeasibleError as exc:
                row.append(
                    ClusterEntry(
                        algorithm=algorithm.name,
                        chips=chips,
                        engine=algorithm.engine,
                        reason=str(exc),
                    )
                )
                continue
            cluster = plan.cluster
            if cluster is None:  # make_plan with cluster options always plans the cluster
                raise AssertionError("a cluster plan without its cluster section")
            row.append(
                ClusterEntry(
                    algorithm=algorithm.name,
                    chips=chips,
                    engine=algorithm.engine,
                    dp=cluster.dp,
                    pp=cluster.pp,
                    mesh=plan.mesh.to_mesh().label,
                    zero=cluster.zero,
                    step_s=cluster.step.step_s,
                    mfu=cluster.mfu,
                    tokens_per_s=cluster.tokens_per_s,
                    memory_bytes=cluster.memory.total_bytes,
                )
            )
        ref = next((e.step_s for e in row if e.algorithm == reference), None)
        out.extend(
            e.model_copy(update={"speedup_of_reference": speedup(e.step_s, ref)}) for e in row
        )
    return out
