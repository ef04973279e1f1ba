"""Every registered algorithm on one GeMM ``C(m×n) = A(m×k)·B(k×n)`` (MeshSlice Figure 11).

:func:`gemm_study` treats the GeMM as the forward pass of one FC layer ``Y = X W`` with
tokens = m, in = k, out = n: phase 1's Table 1 rows then give its OS (Y-stationary), LS
(X-stationary) and RS (W-stationary) forms and their transposed variants with the sharding
each implies, and the registered algorithms' ``configs`` / ``cost`` / ``comms`` apply
unchanged. Only the forward pass is priced. An algorithm that forces a phase-1 row
(``dataflow_mode``) is held to it. With ``dp = D > 1`` (MeshSlice §7's "MeshSlice plus DP"),
D replicas of a mesh of ``chips / D`` chips each run the GeMM on ``m / D`` rows, and the
weight gradient that data parallelism must then reduce is added as a reduce-scatter plus an
all-gather of each chip's ``k·n / (chips / D)`` weight shard over the D replicas (axis 2,
after the GeMM, not hidden; :func:`meshtune.compare.breakdown.dp_breakdown`). Every entry
states its per-chip traffic: the bytes over the chip's busiest link of every axis, summed.
With ``rank`` the study also ranks every configuration tried, fastest first (at most
:data:`MAX_RANKED` rows). Each algorithm is judged at its own best mesh, dataflow and
configuration; one that cannot run the GeMM is listed with the reason, never raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import DEFAULT_ALGORITHM, get_algorithm
from meshtune.compare.breakdown import Breakdown, dp_breakdown, pass_breakdown, sum_breakdowns
from meshtune.compare.selection import none_feasible, selected, speedup
from meshtune.cost.config import Config
from meshtune.cost.schedule import traffic
from meshtune.dataflow import Dataflow, LayerDataflow, Stationary, layer_dataflow
from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import Mesh, check_chips
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.planner.make import check_size
from meshtune.search import flop_utilization, priced
from meshtune.units import FROZEN

MAX_RANKED = 500
"""The most rows a GeMM ranking keeps: the fastest, so that an algorithm with many thousands of
configurations (SUMMA on a chip count with many divisors) still answers and prints at once."""


class GemmEntry(BaseModel):
    """One algorithm's best way to run one GeMM, or why it cannot."""

    model_config = FROZEN

    algorithm: str
    title: str
    reason: str | None = Field(description="Why no mesh admits the GeMM (None: feasible).")
    mesh: str | None = None
    dataflow: Literal["OS", "LS", "RS"] | None = None
    transposed: bool | None = None
    config: dict[str, int] | None = None
    time_s: float | None = None
    utilization: float | None = None
    speedup_of_reference: float | None = Field(
        default=None, description="time / reference's time − 1."
    )
    breakdown: Breakdown | None = None
    traffic_bytes: int | None = Field(
        default=None,
        description="Per-chip traffic: bytes over the busiest link of each axis, summed.",
    )
    layout: str | None = Field(
        default=None,
        description="The configuration as the algorithm names it (e.g. 'fsdp c=2 S-C').",
    )


class RankedConfig(BaseModel):
    """One configuration of one algorithm on one GeMM, in a ranking fastest first."""

    model_config = FROZEN

    rank: int
    algorithm: str
    mesh: str
    dataflow: Literal["OS", "LS", "RS"]
    transposed: bool
    config: dict[str, int]
    layout: str = Field(description="The configuration as the algorithm names it.")
    time_s: float
    utilization: float
    link_bytes: list[int] = Field(description="Bytes over the busiest link, per physical axis.")


class GemmStudy(BaseModel):
    """Every selected algorithm on one GeMM ``C(m×n) = A(m×k)·B(k×n)``."""

    model_config = FROZEN

    m: int
    n: int
    k: int
    chips: int
    profile: str
    flops: int
    reference: str
    label: str = Field(default="", description="Where the GeMM comes from, e.g. 'qkv forward'.")
    dp: int = Field(default=1, description="Data-parallel replicas (M split over them, §7).")
    entries: list[GemmEntry]
    ranking: list[RankedConfig] = Field(
        default_factory=list,
        description="With rank: the configurations of the selected algorithms, fastest first "
        f"(the fastest {MAX_RANKED} when there are more).",
    )
    ranked: int = Field(
        default=0, description="With rank: how many distinct configurations were priced."
    )

    def nothing_feasible(self) -> str | None:
        """Why none of the algorithms studied can run this GeMM (their reasons), or ``None``
        when one can."""
        return none_feasible(
            [(e.algorithm, e.reason) for e in self.entries], f"on {self.chips} chips"
        )


def _stationaries(algorithm: Algorithm) -> tuple[Stationary, ...]:
    """Table 1 rows ``algorithm`` may use: all, or the one its ``dataflow_mode`` forces."""
    mode = algorithm.mode("auto")
    return tuple(Stationary) if mode == "auto" else (Stationary(mode[0].upper()),)


_Tried = tuple[tuple[float, tuple[int, ...], int, int], LayerDataflow, Mesh, Config]


def _best_gemm(
    algorithm: Algorithm,
    variants: Sequence[LayerDataflow],
    meshes: Sequence[Mesh],
    profile: HardwareProfile,
    dp: int = 1,
    only: Sequence[Config] | None = None,
    tried: list[_Tried] | None = None,
) -> _Tried | str:
    """The fastest (variant, mesh, config) for the forward pass, or the first reasons.

    ``only`` replaces the enumerated configurations of a feasible (variant, mesh) by those
    listed (the caller checked they are legal); every one priced is appended to ``tried``."""
    best: tuple[tuple[float, tuple[int, ...], int, int], LayerDataflow, Mesh, Config] | None = None
    reasons: list[str] = []
    allowed = _stationaries(algorithm)
    for mesh in meshes:
        problem = algorithm.mesh_problem(mesh)
        if problem is None and dp > 1 and mesh.depth > 1:
            problem = f"{mesh.label}: data parallelism is modelled over 2D meshes (depth 1) only"
        if problem is not None:
            reasons.append(problem)
            continue
        for index, variant in enumerate(variants):
            if variant.stationary not in allowed:
                continue
            configs, reason = algorithm.configs(variant, mesh, profile.slice_block)
            if reason is not None:
                reasons.append(f"{mesh.label}: {reason}")
            for config in configs if only is None or reason is not None else only:
                time_s = priced(algorithm, variant.ops[0], mesh, profile, config).total_s
                key = (time_s, config.sort_key(), index, mesh.rows)
                if tried is not None:
                    tried.append((key, variant, mesh, config))
                if best is None or key < best[0]:
                    best = (key, variant, mesh, config)
    if best is not None:
        return best
    if not meshes:
        return f"{algorithm.name} has no mesh shape of this many chips"
    if not reasons:
        return f"no {algorithm.name} configuration for the dataflows asked for"
    more = f"; and {len(reasons) - 2} more" if len(reasons) > 2 else ""
    return "; ".join(dict.fromkeys(reasons[:2])) + more


def gemm_study(
    m: int,
    n: int,
    k: int,
    chips: int,
    profile: HardwareProfile,
    algorithms: Sequence[str] | None = None,
    mesh: Mesh | None = None,
    dataflows: Sequence[Dataflow] = tuple(Dataflow),
    *,
    reference: str = DEFAULT_ALGORITHM,
    label: str = "",
    dp: int = 1,
    rank: bool = False,
    only: Sequence[Config] | None = None,
) -> GemmStudy:
    """Each algorithm at its best mesh (or ``mesh``), dataflow among ``dataflows``, and
    configuration for ``C(m×n) = A(m×k)·B(k×n)`` on ``chips`` chips (see the module docstring),
    optionally as ``dp`` data-parallel replicas of a ``chips / dp``-chip mesh.

    ``rank`` also lists every configuration tried, fastest first (one row per distinct mesh,
    configuration and time: the one-sided GeMM's Table 1 rows are the same multiply);
    ``only`` prices the configurations listed instead of the enumerated ones (e.g. one named
    one-sided layout from :func:`meshtune.cost.onesided.layout_configs`).

    ``utilization = 2·m·n·k / (time · chips · peak FLOP/s)`` (§5.1.1). Ties go to the smaller
    configuration, then OS / LS / RS in that order (untransposed first), then fewer mesh rows.
    Raises :class:`InfeasibleError` for sizes out of range, a ``dp`` that does not divide
    ``chips`` and ``m``, or a ``mesh`` of another chip count than ``chips / dp``.
    """
    _check_study(m, n, k, chips, dp, mesh, dataflows)
    replica = chips // dp
    ref = get_algorithm(reference).name
    variants = _variants(m // dp, n, k, dataflows)
    flops = 2 * m * n * k
    found: list[tuple[Algorithm, GemmEntry]] = []
    tried: list[tuple[Algorithm, _Tried]] = []
    for algorithm in selected(algorithms):
        meshes = (mesh,) if mesh is not None else algorithm.meshes(replica)
        priced: list[_Tried] = []
        best = _best_gemm(algorithm, variants, meshes, profile, dp, only, priced if rank else None)
        tried += [(algorithm, t) for t in priced]
        found.append((algorithm, _entry(algorithm, best, profile, dp, k * n, flops, chips)))
    ref_time = next((e.time_s for a, e in found if a.name == ref), None)
    entries = [
        e.model_copy(update={"speedup_of_reference": speedup(e.time_s, ref_time)}) for _, e in found
    ]
    ranking, ranked = _ranking(tried, profile, chips, flops)
    return GemmStudy(
        m=m,
        n=n,
        k=k,
        chips=chips,
        profile=profile.name,
        flops=flops,
        reference=ref,
        label=label,
        dp=dp,
        entries=entries,
        ranking=ranking,
        ranked=ranked,
    )


def _check_study(
    m: int,
    n: int,
    k: int,
    chips: int,
    dp: int,
    mesh: Mesh | None,
    dataflows: Sequence[Dataflow],
) -> None:
    """:class:`InfeasibleError` for sizes out of range, a ``dp`` that does not divide ``chips``
    and ``m``, a ``mesh`` of another chip count than ``chips / dp``, or no dataflow."""
    for name, value in (("m", m), ("n", n), ("k", k)):
        check_size(name, value)
    check_chips(chips)
    if dp < 1 or chips % dp or m % dp:
        raise InfeasibleError(
            f"data-parallel replicas dp={dp} must be a positive divisor of both chips={chips} "
            f"and m={m}"
        )
    replica = chips // dp
    if mesh is not None and mesh.chips != replica:
        per = f"chips / dp = {chips} / {dp} = {replica}" if dp > 1 else str(chips)
        raise InfeasibleError(f"mesh shape {mesh.label} has {mesh.chips} chips, not {per}")
    if not dataflows:
        raise InfeasibleError("no dataflow to study; choose among OS, LS, RS")


def _variants(tokens: int, n: int, k: int, dataflows: Sequence[Dataflow]) -> list[LayerDataflow]:
    """The Table 1 rows of the FC layer ``Y(tokens×n) = X(tokens×k)·W(k×n)`` whose forward
    pass runs one of ``dataflows``, untransposed and transposed, in OS / LS / RS order."""
    layer = FcLayer("gemm", tokens=tokens, in_features=k, out_features=n, fed_by=None)
    variants = [
        variant
        for stationary in Stationary
        for transposed in (False, True)
        if (variant := layer_dataflow(layer, stationary, transposed)).ops[0].dataflow in dataflows
    ]
    variants.sort(key=lambda v: (list(Dataflow).index(v.ops[0].dataflow), v.transposed))
    return variants


def _entry(
    algorithm: Algorithm,
    best: _Tried | str,
    profile: HardwareProfile,
    dp: int,
    weight_elements: int,
    flops: int,
    chips: int,
) -> GemmEntry:
    """``algorithm``'s entry: its best (variant, mesh, config) with the forward pass's
    breakdown, plus with ``dp`` > 1 the weight gradient's reduction over the replicas (each
    chip's shard of the ``weight_elements``); or the reason it cannot run (``best`` a text)."""
    if isinstance(best, str):
        return GemmEntry(algorithm=algorithm.name, title=algorithm.title, reason=best)
    _, variant, where, config = best
    parts, _ = pass_breakdown(algorithm, variant.ops[0], where, profile, config)
    if dp > 1:
        parts = sum_breakdowns([parts, dp_breakdown(weight_elements / where.chips, dp, profile)])
    return GemmEntry(
        algorithm=algorithm.name,
        title=algorithm.title,
        reason=None,
        mesh=where.label,
        dataflow=variant.ops[0].dataflow.value,
        transposed=variant.transposed,
        config=dict(config),
        time_s=parts.total_s,
        utilization=flop_utilization(flops, parts.total_s, chips, profile.peak_flops_per_s),
        breakdown=parts,
        traffic_bytes=sum(parts.link_bytes),
        layout=algorithm.describe(config),
    )


def _ranking(
    tried: Sequence[tuple[Algorithm, _Tried]], profile: HardwareProfile, chips: int, flops: int
) -> tuple[list[RankedConfig], int]:
    """The :data:`MAX_RANKED` fastest configurations tried (ties as in :func:`gemm_study`), one
    row per distinct (algorithm, mesh, configuration, time), and how many distinct ones there
    were in all."""
    rows: list[RankedConfig] = []
    seen: set[tuple[str, str, Config, float]] = set()
    for algorithm, (key, variant, where, config) in sorted(tried, key=lambda t: t[1][0]):
        mark = (algorithm.name, where.label, config, key[0])
        if mark in seen:
            continue
        seen.add(mark)
        if len(rows) == MAX_RANKED:
            continue
        op = variant.ops[0]
        moved = traffic(algorithm.comms(op, where, config, profile.bytes_per_element))
        rows.append(
            RankedConfig(
                rank=len(rows) + 1,
                algorithm=algorithm.name,
                mesh=where.label,
                dataflow=op.dataflow.value,
                transposed=variant.transposed,
                config=dict(config),
                layout=algorithm.describe(config),
                time_s=key[0],
                utilization=flop_utilization(flops, key[0], chips, profile.peak_flops_per_s),
                link_bytes=[a.bytes_per_link for a in moved],
            )
        )
    return rows, len(seen)
