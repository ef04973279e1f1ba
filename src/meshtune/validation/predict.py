"""Predicting a published run with its split pinned: the whole row → prediction mapping.

:func:`predict_row` is the one place that turns a :class:`~meshtune.validation.data.Run` into
a call of the planner's public API, :func:`meshtune.search.levels.search_cluster`: the model built
from the row's shape, the profile of its hardware, the published DP and PP pinned, the TP
degree as a TP × 1 ring mesh run by the registry's
:data:`~meshtune.algorithms.registry.FRAMEWORK_TP_ALGORITHM`, the ZeRO stage (3 where weights
were sharded, 1 where the optimizer state was, else 0), the attention kernel, dropout, the
gradient path (overlap, fp32, accumulation, all-reduce), the micro-batch count pinned when the
source states the micro-batch size (else searched), the virtual stages per chip when stated
(else searched), and the recompute mode and sequence parallelism pinned when stated (else each
is tried and the fastest feasible combination kept), and the expert- and context-parallel
degrees (EP, CP) the row states, and the host time per block and micro-batch of the row's
engine (:mod:`meshtune.validation.engines`). A published split that meshtune's memory
model rejects is priced without the capacity check (the run did fit on the real machine) and
the prediction says so; among the unstated choices it then keeps the one needing the least
memory (the run, having fit, cannot have used a mode that needs several times the chip's
capacity; among equals, the fastest).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import (
    FRAMEWORK_TP_ALGORITHM,
    get_algorithm,
    megatron_without_sp,
)
from meshtune.catalog import load_profile
from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.search.levels import search_cluster
from meshtune.search.split import ClusterCandidate
from meshtune.step.memory import RECOMPUTE_MODES
from meshtune.step.options import ClusterOptions
from meshtune.validation.data import Run, ValidationSetError
from meshtune.validation.engines import engine_overhead_s

HARDWARE_PROFILES: dict[str, str] = {
    "a100-80gb": "a100-80gb-8gpu-nodes",
    "a100-80gb-jean-zay": "a100-80gb-jean-zay",
    "h100-80gb": "h100-8gpu-nodes",
    "h800-80gb": "h800-8gpu-nodes",
}
"""The catalog profile each validation ``hardware`` key is predicted with."""


@dataclass(frozen=True)
class Prediction:
    """One run's predicted step next to the published one (``error`` = predicted / published
    − 1), the configuration the planner chose inside the pinned split, or why it failed."""

    run: Run
    source: str
    profile: str
    predicted_s: float | None
    micro_batches: int | None = None
    recompute: str | None = None
    note: str = ""

    @property
    def published_s(self) -> float:
        """The published step time (seconds)."""
        return self.run.step_s

    @property
    def error(self) -> float | None:
        """Signed relative error, predicted / published − 1 (None when not predicted)."""
        if self.predicted_s is None:
            return None
        return self.predicted_s / self.run.step_s - 1.0


def load_profiles(overrides: Mapping[str, str] | None = None) -> dict[str, HardwareProfile]:
    """The profile of every hardware key: :data:`HARDWARE_PROFILES`, with ``overrides``
    (``{hardware key: catalog name or TOML path}``) replacing some; an unknown key raises."""
    names = dict(HARDWARE_PROFILES)
    for key, value in (overrides or {}).items():
        if key not in names:
            raise ValidationSetError(
                f"--profile '{key}={value}': unknown hardware '{key}'; known: {', '.join(names)}"
            )
        names[key] = value
    return {key: load_profile(name) for key, name in names.items()}


def _tp_algorithms(run: Run) -> tuple[Algorithm, ...]:
    """Megatron with SP, without it, or both when the source does not say."""
    with_sp, without_sp = get_algorithm(FRAMEWORK_TP_ALGORITHM), megatron_without_sp()
    if run.sp is None:
        return (with_sp, without_sp)
    return (with_sp,) if run.sp else (without_sp,)


def _best(
    run: Run, profile: HardwareProfile, overhead_s: float, *, least_memory: bool = False
) -> tuple[ClusterCandidate, str]:
    """The fastest candidate within the pinned split and its recompute mode (every mode, and
    SP on and off, when the source does not state them), or with ``least_memory`` the one
    needing the least memory per chip (then the fastest); :class:`InfeasibleError` naming each
    combination's reason."""
    micro_batches = None
    if run.micro_batch is not None:
        micro_batches = run.global_batch // (run.dp * run.micro_batch)
    modes = (run.recompute,) if run.recompute is not None else RECOMPUTE_MODES
    found: list[tuple[ClusterCandidate, str]] = []
    problems: list[str] = []
    for algorithm in _tp_algorithms(run):
        for mode in modes:
            try:
                result = search_cluster(
                    run.spec(),
                    profile,
                    run.chips,
                    batch=run.global_batch,
                    seq_len=run.seq_len,
                    algorithms=[algorithm],
                    options=ClusterOptions(
                        dp=run.dp,
                        pp=run.pp,
                        micro_batches=micro_batches,
                        zero=3 if run.zero3 else 1 if run.zero1 else 0,
                        vpp=run.vpp,
                        ep=run.ep,
                        cp=run.cp,
                        step=replace(run.step_options, recompute=mode, block_overhead_s=overhead_s),
                    ),
                    meshes=[Mesh(run.tp, 1)],
                    top=1,
                )
            except InfeasibleError as exc:
                problems.append(f"recompute {mode}: {exc}")
                continue
            found.append((result.best, mode))
    if not found:
        raise InfeasibleError("; ".join(problems))
    if least_memory:
        return min(found, key=lambda pair: (pair[0].memory.total_bytes, pair[0].step.step_s))
    return min(found, key=lambda pair: pair[0].step.step_s)


def predict_row(
    run: Run,
    profiles: Mapping[str, HardwareProfile],
    *,
    source: str = "",
    block_overhead_s: float | None = None,
) -> Prediction:
    """Predict ``run`` with its published split pinned (module docstring), its engine's host
    time per block and micro-batch priced (:mod:`meshtune.validation.engines`;
    ``block_overhead_s`` overrides it)."""
    if run.hardware not in profiles:
        raise ValidationSetError(
            f"{run.id}: no profile for hardware '{run.hardware}'; known: {', '.join(profiles)}"
        )
    if block_overhead_s is None:
        block_overhead_s = engine_overhead_s(run.engine, where=run.id)
    profile = profiles[run.hardware]
    note = ""
    try:
        best, mode = _best(run, profile, block_overhead_s)
    except InfeasibleError as exc:
        if profile.memory_bytes is None:
            return Prediction(run, source, profile.name, None, note=str(exc))
        try:
            best, mode = _best(
                run,
                profile.model_copy(update={"memory_bytes": None}),
                block_overhead_s,
                least_memory=True,
            )
        except InfeasibleError as again:
            return Prediction(run, source, profile.name, None, note=str(again))
        note = f"over capacity in meshtune's memory model, priced without the check: {exc}"
    return Prediction(
        run,
        source,
        profile.name,
        best.step.step_s,
        micro_batches=best.micro_batches,
        recompute=mode,
        note=note,
    )
