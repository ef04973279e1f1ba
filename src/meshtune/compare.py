"""Every registered algorithm side by side: one GeMM, or a model over chip counts (MeshSlice §5).

Nothing here names an algorithm: every function iterates over :mod:`meshtune.algorithms`
(or the names the caller lists), so an algorithm registered later appears in every study. Each
algorithm is judged at its own best mesh shape, dataflow and configuration (§4.2). Speedups are
stated for a *reference* algorithm (by default the registry's default) over each other one:
``speedup = time(other) / time(reference) − 1`` (the paper's "x % faster"; with equal FLOPs it
is also ``utilization(reference) / utilization(other) − 1``).

* :func:`gemm_study` — one GeMM ``C(m×n) = A(m×k)·B(k×n)`` (Figure 11's view of one GeMM). The
  GeMM is treated as the forward pass of one FC layer ``Y = X W`` with tokens = m, in = k,
  out = n: phase 1's Table 1 rows then give its OS (Y-stationary), LS (X-stationary) and RS
  (W-stationary) forms and their transposed variants with the sharding each implies, and the
  registered algorithms' ``configs`` / ``cost`` / ``comms`` apply unchanged. Only the forward
  pass is priced. An algorithm that forces a phase-1 row (``dataflow_mode``) is held to it.
  With ``dp = D > 1`` (MeshSlice §7's "MeshSlice plus DP"), D replicas of a mesh of
  ``chips / D`` chips each run the GeMM on ``m / D`` rows, and the weight gradient that data
  parallelism must then reduce is added as a reduce-scatter plus an all-gather of each chip's
  ``k·n / (chips / D)`` weight shard over the D replicas (axis 2, after the GeMM, not hidden).
  Every entry states its per-chip traffic: the bytes over the chip's busiest link of every
  axis, summed.
* :func:`compare_models` — a model over chip counts, weak scaling (batch = chips / 2, §5.1.1)
  or a fixed batch (strong scaling, §5.1.3), with the views of Figures 9–14, Table 2 and
  Table 3 (see :data:`VIEWS`) and an end-to-end step estimate (FC time plus the non-FC work of
  :func:`meshtune.step.work.nonfc_block`, §4.4).

Algorithms with no feasible mesh at a size are reported with the reason, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from meshtune.algorithm import Algorithm, Config
from meshtune.algorithms import DEFAULT_ALGORITHM, REGISTRY, get_algorithm
from meshtune.compare_cluster import ClusterEntry, cluster_entries
from meshtune.cost.schedule import AXES, Comm, PassCost, comm_time, ring_collective, traffic
from meshtune.cost.tesseract import depth_priced
from meshtune.dataflow import (
    Dataflow,
    DataflowMode,
    GemmOp,
    LayerDataflow,
    Stationary,
    layer_dataflow,
    plan_dataflows,
)
from meshtune.errors import InfeasibleError, MeshtuneError
from meshtune.layers import FcLayer, fc_layers
from meshtune.mesh import Mesh, check_chips
from meshtune.plan import check_size, weak_scaling_batch
from meshtune.search import (
    MeshResult,
    SearchResult,
    flop_utilization,
    layer_choice,
    priced,
    search,
)
from meshtune.specs import CollectiveKind, HardwareProfile, ModelSpec
from meshtune.step.work import nonfc_block

View = Literal[
    "scaling", "breakdown", "gemms", "shapes", "slices", "dataflow", "overlap", "cluster"
]
VIEWS: tuple[View, ...] = (
    "scaling",
    "breakdown",
    "gemms",
    "shapes",
    "slices",
    "dataflow",
    "overlap",
    "cluster",
)
"""scaling: FC time and utilization per chip count (Figures 9 and 12) with end-to-end speedups;
breakdown: communication split at one size (Figure 10); gemms: the model's distinct GeMMs
(Figure 11); shapes: every mesh shape (Figure 13); slices: every configuration on the best shape
(Figure 14); dataflow: phase 1 on versus Y-stationary everywhere (Table 2); overlap: the
profile as it is versus every kind overlapped (Table 3); cluster: each algorithm at its best
DP × PP × mesh split, step time and MFU (:mod:`meshtune.compare_cluster`)."""
MESH_VIEWS: tuple[View, ...] = VIEWS[:-1]
"""The views where the mesh takes every chip, as in the paper (the default)."""

_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)

MAX_RANKED = 500
"""The most rows a GeMM ranking keeps: the fastest, so that an algorithm with many thousands of
configurations (SUMMA on a chip count with many divisors) still answers and prints at once."""


class Breakdown(BaseModel):
    """Where the time of one or more passes goes (seconds, and bytes per link).

    ``steady_s`` counts every steady iteration, ``(iterations − 1) · steady``; ``launch_s`` /
    ``sync_s`` / ``transfer_s`` sum all communication (Figure 10), ``exposed_s`` and
    ``hidden_s`` are :class:`~meshtune.cost.schedule.PassCost`'s. ``launches``, ``steps`` and
    ``link_bytes`` are per physical axis (rows, columns, depth): what the busiest link of each
    axis carries, from ``traffic(algorithm.comms(...))``.
    """

    model_config = _FROZEN

    total_s: float
    prologue_s: float
    steady_s: float
    epilogue_s: float
    compute_s: float
    launch_s: float
    sync_s: float
    transfer_s: float
    exposed_s: float
    hidden_s: float
    launches: list[int]
    steps: list[int]
    link_bytes: list[int]

    @property
    def comm_s(self) -> float:
        """launch + sync + transfer: all communication, overlapped or not."""
        return self.launch_s + self.sync_s + self.transfer_s


def pass_breakdown(
    algorithm: Algorithm, op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config
) -> tuple[Breakdown, PassCost]:
    """The :class:`Breakdown` of one pass, and the pass's cost."""
    cost = priced(algorithm, op, mesh, profile, config)
    moved = traffic(algorithm.comms(op, mesh, config, profile.bytes_per_element))
    return (
        Breakdown(
            total_s=cost.total_s,
            prologue_s=cost.prologue_s,
            steady_s=(cost.iterations - 1) * cost.steady_s,
            epilogue_s=cost.epilogue_s,
            compute_s=cost.compute_s,
            launch_s=cost.comm.launch_s,
            sync_s=cost.comm.sync_s,
            transfer_s=cost.comm.transfer_s,
            exposed_s=cost.exposed_s,
            hidden_s=cost.hidden_s,
            launches=[a.launches for a in moved],
            steps=[a.steps for a in moved],
            link_bytes=[a.bytes_per_link for a in moved],
        ),
        cost,
    )


def sum_breakdowns(parts: Iterable[Breakdown], times: int = 1) -> Breakdown:
    """Field-wise sum of ``parts``, multiplied by ``times`` (e.g. the number of blocks)."""
    items = list(parts)
    floats = (
        "total_s",
        "prologue_s",
        "steady_s",
        "epilogue_s",
        "compute_s",
        "launch_s",
        "sync_s",
        "transfer_s",
        "exposed_s",
        "hidden_s",
    )
    ints = ("launches", "steps", "link_bytes")
    data: dict[str, object] = {f: times * sum(getattr(b, f) for b in items) for f in floats}
    for name in ints:
        axes = max((len(getattr(b, name)) for b in items), default=AXES)
        data[name] = [times * sum(getattr(b, name)[a] for b in items) for a in range(axes)]
    return Breakdown.model_validate(data)


def selected(algorithms: Sequence[str] | None) -> tuple[Algorithm, ...]:
    """The registered algorithms named (all, in registration order, for ``None``)."""
    if algorithms is None:
        return tuple(REGISTRY.values())
    if not algorithms:
        raise MeshtuneError("no algorithm selected; known algorithms: " + ", ".join(REGISTRY))
    return tuple(dict.fromkeys(get_algorithm(name) for name in algorithms))


def _none_feasible(reasons: Sequence[tuple[str, str | None]], where: str) -> str | None:
    """``no algorithm asked for is feasible <where>: <who>: <reason>; …`` (two reasons, then how
    many more) when every ``(who, reason)`` has a reason; ``None`` when one has none or there
    are none."""
    if not reasons or any(reason is None for _, reason in reasons):
        return None
    shown = "; ".join(f"{who}: {reason}" for who, reason in reasons[:2])
    more = f"; and {len(reasons) - 2} more" if len(reasons) > 2 else ""
    return f"no algorithm asked for is feasible {where}: {shown}{more}"


def speedup(time_s: float | None, reference_s: float | None) -> float | None:
    """``time_s / reference_s − 1`` (how much faster the reference is), ``None`` if unknown."""
    if time_s is None or reference_s is None:
        return None
    return time_s / reference_s - 1


# --------------------------------------------------------------------------- one GeMM


class GemmEntry(BaseModel):
    """One algorithm's best way to run one GeMM, or why it cannot."""

    model_config = _FROZEN

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

    model_config = _FROZEN

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

    model_config = _FROZEN

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
        return _none_feasible(
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
    ref = get_algorithm(reference).name
    layer = FcLayer("gemm", tokens=m // dp, in_features=k, out_features=n, fed_by=None)
    variants = [
        variant
        for stationary in Stationary
        for transposed in (False, True)
        if (variant := layer_dataflow(layer, stationary, transposed)).ops[0].dataflow in dataflows
    ]
    variants.sort(key=lambda v: (list(Dataflow).index(v.ops[0].dataflow), v.transposed))
    flops = 2 * m * n * k
    found: list[tuple[Algorithm, GemmEntry]] = []
    tried: list[tuple[Algorithm, _Tried]] = []
    for algorithm in selected(algorithms):
        meshes = (mesh,) if mesh is not None else algorithm.meshes(replica)
        priced: list[_Tried] = []
        best = _best_gemm(algorithm, variants, meshes, profile, dp, only, priced if rank else None)
        tried += [(algorithm, t) for t in priced]
        if isinstance(best, str):
            entry = GemmEntry(algorithm=algorithm.name, title=algorithm.title, reason=best)
            found.append((algorithm, entry))
            continue
        _, variant, where, config = best
        parts, _ = pass_breakdown(algorithm, variant.ops[0], where, profile, config)
        if dp > 1:
            parts = sum_breakdowns([parts, _dp_breakdown(k * n / where.chips, dp, profile)])
        entry = GemmEntry(
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
        found.append((algorithm, entry))
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


def dp_comms(weight_elements: float, dp: int, bytes_per_element: int) -> list[Comm]:
    """Data parallelism's weight-gradient all-reduce over ``dp`` replicas (axis 2): a
    reduce-scatter and an all-gather of ``weight_elements / dp`` elements per chip."""
    shard = weight_elements / dp * bytes_per_element
    return [
        *ring_collective(CollectiveKind.REDUCE_SCATTER, 2, dp, shard),
        *ring_collective(CollectiveKind.ALL_GATHER, 2, dp, shard),
    ]


def _dp_breakdown(weight_elements: float, dp: int, profile: HardwareProfile) -> Breakdown:
    """The :class:`Breakdown` of :func:`dp_comms`, run after the GeMM and never hidden; priced
    with the profile's axis-2 parameters or its slowest mesh axis'
    (:func:`meshtune.cost.tesseract.depth_priced`)."""
    comms = dp_comms(weight_elements, dp, profile.bytes_per_element)
    spent = comm_time(depth_priced(comms, profile), profile)
    moved = traffic(comms)
    return Breakdown(
        total_s=spent.total_s,
        prologue_s=0.0,
        steady_s=0.0,
        epilogue_s=spent.total_s,
        compute_s=0.0,
        launch_s=spent.launch_s,
        sync_s=spent.sync_s,
        transfer_s=spent.transfer_s,
        exposed_s=spent.total_s,
        hidden_s=0.0,
        launches=[a.launches for a in moved],
        steps=[a.steps for a in moved],
        link_bytes=[a.bytes_per_link for a in moved],
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


# --------------------------------------------------------------------------- a model


class ScalingPoint(BaseModel):
    """One algorithm at one chip count (Figures 9 and 12), with the end-to-end estimate."""

    model_config = _FROZEN

    algorithm: str
    chips: int
    batch: int
    reason: str | None = Field(description="Why no mesh is feasible (None: feasible).")
    mesh: str | None = None
    fc_time_s: float | None = Field(default=None, description="FC time of one step.")
    utilization: float | None = Field(default=None, description="FC FLOP utilization.")
    configs: dict[str, dict[str, int]] | None = None
    nonfc_s: float | None = Field(default=None, description="Non-FC time of one step (§4.4).")
    step_time_s: float | None = Field(default=None, description="fc_time_s + nonfc_s.")
    fc_speedup_of_reference: float | None = None
    step_speedup_of_reference: float | None = None


class AlgorithmBreakdown(BaseModel):
    """An algorithm's FC time of one step at its best mesh, split as in Figure 10."""

    model_config = _FROZEN

    algorithm: str
    mesh: str | None
    reason: str | None
    breakdown: Breakdown | None


class ShapeEntry(BaseModel):
    """One mesh shape of one algorithm (Figure 13)."""

    model_config = _FROZEN

    algorithm: str
    mesh: str
    reason: str | None
    fc_time_s: float | None
    utilization: float | None
    configs: dict[str, dict[str, int]] | None


class SliceEntry(BaseModel):
    """One configuration used by every layer on an algorithm's best mesh (Figure 14)."""

    model_config = _FROZEN

    algorithm: str
    mesh: str
    config: dict[str, int] | None = Field(description="None: each layer's own best (tuned).")
    fc_time_s: float
    utilization: float


class DataflowEntry(BaseModel):
    """Phase 1's dataflows against Y-stationary everywhere (Table 2)."""

    model_config = _FROZEN

    algorithm: str
    optimized_mesh: str | None
    optimized_utilization: float | None
    unoptimized_mesh: str | None
    unoptimized_utilization: float | None
    speedup: float | None = Field(description="time(unoptimized) / time(optimized) − 1.")
    reason: str | None


class OverlapEntry(BaseModel):
    """An algorithm on the profile as it is, and with every communication kind overlapped
    (Table 3). ``as_tuned`` runs the mesh and configurations tuned for the overlapping machine
    (what the paper ran on the real 4×4 TPUv4); ``retuned`` tunes them for the profile."""

    model_config = _FROZEN

    algorithm: str
    mesh: str | None
    configs: dict[str, dict[str, int]] | None
    as_tuned_utilization: float | None
    retuned_mesh: str | None
    retuned_utilization: float | None
    overlapped_utilization: float | None
    reason: str | None


class Comparison(BaseModel):
    """Every selected algorithm on one model over chip counts; the views asked for."""

    model_config = _FROZEN

    model: str
    display_name: str
    profile: str
    seq_len: int
    scaling: Literal["weak", "strong"]
    batch: int | None = Field(description="Fixed batch (strong scaling); None: chips / 2.")
    chips: list[int]
    at_chips: int = Field(description="Chip count of the single-size views.")
    mesh: str | None = Field(description="The one mesh shape searched, if restricted.")
    reference: str
    algorithms: list[str]
    views: list[View]
    overlapped: list[str] = Field(description="The profile's overlapped communication kinds.")
    nonfc_note: str | None = Field(description="Why there is no end-to-end estimate, if none.")
    scaling_points: list[ScalingPoint] = Field(default_factory=list)
    breakdown: list[AlgorithmBreakdown] = Field(default_factory=list)
    gemms: list[GemmStudy] = Field(default_factory=list)
    gemms_mean_speedup: dict[str, float] = Field(
        default_factory=dict,
        description="Per algorithm, the reference's speedup over it averaged over the GeMMs "
        "both can run (§5.1.4's 'on average').",
    )
    shapes: list[ShapeEntry] = Field(default_factory=list)
    slices: list[SliceEntry] = Field(default_factory=list)
    dataflow: list[DataflowEntry] = Field(default_factory=list)
    overlap: list[OverlapEntry] = Field(default_factory=list)
    cluster: list[ClusterEntry] = Field(default_factory=list)

    def to_json(self) -> str:
        """Pretty JSON (every number the views show)."""
        return self.model_dump_json(indent=2) + "\n"

    def nothing_feasible(self) -> str | None:
        """Why none of the algorithms compared can run the model at any chip count asked for
        (from the scaling view, else the cluster view, else the breakdown at ``at_chips``), or
        ``None`` when one can or none of those views was computed."""
        if self.scaling_points:
            return _none_feasible(
                [(f"{p.algorithm} at {p.chips} chips", p.reason) for p in self.scaling_points],
                "at any chip count",
            )
        if self.cluster:
            return _none_feasible(
                [(f"{e.algorithm} at {e.chips} chips", e.reason) for e in self.cluster],
                "on any cluster split",
            )
        return _none_feasible(
            [(b.algorithm, b.reason) for b in self.breakdown], f"at {self.at_chips} chips"
        )


def _configs(result: MeshResult) -> dict[str, dict[str, int]]:
    return {c.dataflow.layer.name: dict(c.config) for c in result.layers}


class _Searches:
    """Phase 1 + phase 2 per (algorithm, profile, chips, batch, mode), each run once."""

    def __init__(self, model: ModelSpec, seq_len: int, mesh: Mesh | None) -> None:
        self.model = model
        self.seq_len = seq_len
        self.mesh = mesh
        self._done: dict[tuple[str, int, int, int, str], SearchResult | str] = {}
        self._layers: dict[int, tuple[FcLayer, ...]] = {}

    def layers(self, batch: int) -> tuple[FcLayer, ...]:
        if batch not in self._layers:
            self._layers[batch] = fc_layers(self.model, batch, self.seq_len)
        return self._layers[batch]

    def __call__(
        self,
        algorithm: Algorithm,
        profile: HardwareProfile,
        chips: int,
        batch: int,
        mode: DataflowMode = "auto",
    ) -> SearchResult | str:
        """The search, or the reason nothing is feasible."""
        key = (algorithm.name, id(profile), chips, batch, mode)
        if key not in self._done:
            shapes = [self.mesh] if self.mesh is not None else list(algorithm.meshes(chips))
            if not shapes:
                self._done[key] = f"{algorithm.name} has no mesh shape of {chips} chips"
            else:
                try:
                    self._done[key] = search(
                        self.layers(batch),
                        profile,
                        chips,
                        algorithm,
                        blocks=self.model.blocks,
                        mode=mode,
                        shapes=shapes,
                    )
                except InfeasibleError as exc:
                    self._done[key] = str(exc)
        return self._done[key]


def _repriced(result: MeshResult, profile: HardwareProfile) -> float:
    """FC time of one step with ``result``'s mesh and configurations priced on ``profile``."""
    return result.blocks * sum(
        layer_choice(result.algorithm, c.dataflow, result.mesh, profile, c.config).time_s
        for c in result.layers
    )


def _utilization(result: MeshResult, time_s: float, profile: HardwareProfile) -> float:
    return flop_utilization(result.flops, time_s, result.mesh.chips, profile.peak_flops_per_s)


def distinct_gemms(layers: Sequence[FcLayer]) -> list[tuple[tuple[int, int, int], str]]:
    """The distinct (m, n, k) of a block's training GeMMs after phase 1 (§5.1.4), each with the
    layers and passes it comes from (GPT-3 and MT-NLG: eight)."""
    found: dict[tuple[int, int, int], list[str]] = {}
    for choice in plan_dataflows(layers, "auto").layers:
        for op in choice.ops:
            found.setdefault((op.m, op.n, op.k), []).append(
                f"{choice.layer.name} {op.pass_.value.replace('_', '-')}"
            )
    return [(mnk, ", ".join(where)) for mnk, where in found.items()]


def _common_configs(result: MeshResult) -> list[Config]:
    """Configurations legal for every layer of ``result``, smallest first."""
    common = set(result.layers[0].candidates)
    for choice in result.layers[1:]:
        common &= set(choice.candidates)
    return sorted(common, key=Config.sort_key)


@dataclass(frozen=True)
class _Setup:
    """What every view of one :func:`compare_models` call shares."""

    model: ModelSpec
    profile: HardwareProfile
    algorithms: tuple[Algorithm, ...]
    reference: str
    seq_len: int
    batch: int | None
    at_chips: int
    mesh: Mesh | None
    searches: _Searches
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


def _scaling_view(setup: _Setup, sizes: Sequence[int]) -> list[ScalingPoint]:
    """Figures 9 and 12, with the end-to-end step (FC + blocks · non-FC) and speedups."""
    points: list[ScalingPoint] = []
    for chips in sizes:
        b = setup.batch_of(chips)
        nonfc = (
            None
            if setup.nonfc_note
            else setup.model.blocks
            * nonfc_block(setup.model, b, setup.seq_len, chips, setup.profile).total_s(
                setup.profile
            )
        )
        row = []
        for algorithm in setup.algorithms:
            found = setup.searches(algorithm, setup.profile, chips, b)
            if isinstance(found, str):
                row.append(
                    ScalingPoint(algorithm=algorithm.name, chips=chips, batch=b, reason=found)
                )
                continue
            best = found.best
            row.append(
                ScalingPoint(
                    algorithm=algorithm.name,
                    chips=chips,
                    batch=b,
                    reason=None,
                    mesh=best.mesh.label,
                    fc_time_s=best.time_s,
                    utilization=best.utilization(setup.profile),
                    configs=_configs(best),
                    nonfc_s=nonfc,
                    step_time_s=None if nonfc is None else best.time_s + nonfc,
                )
            )
        ref = next((p for p in row if p.algorithm == setup.reference), None)
        points.extend(
            p.model_copy(
                update={
                    "fc_speedup_of_reference": speedup(p.fc_time_s, ref.fc_time_s if ref else None),
                    "step_speedup_of_reference": speedup(
                        p.step_time_s, ref.step_time_s if ref else None
                    ),
                }
            )
            for p in row
        )
    return points


def _breakdown_view(setup: _Setup) -> list[AlgorithmBreakdown]:
    """Figure 10: every pass of every layer at the best mesh, summed over the blocks."""
    out = []
    for algorithm in setup.algorithms:
        found = setup.at(algorithm)
        if isinstance(found, str):
            out.append(
                AlgorithmBreakdown(
                    algorithm=algorithm.name, mesh=None, reason=found, breakdown=None
                )
            )
            continue
        best = found.best
        parts = [
            pass_breakdown(algorithm, op, best.mesh, setup.profile, c.config)[0]
            for c in best.layers
            for op in c.dataflow.ops
        ]
        out.append(
            AlgorithmBreakdown(
                algorithm=algorithm.name,
                mesh=best.mesh.label,
                reason=None,
                breakdown=sum_breakdowns(parts, best.blocks),
            )
        )
    return out


def _gemms_view(setup: _Setup) -> tuple[list[GemmStudy], dict[str, float]]:
    """Figure 11: :func:`gemm_study` of each distinct GeMM, and the mean speedups."""
    names = [a.name for a in setup.algorithms]
    layers = setup.searches.layers(setup.batch_of(setup.at_chips))
    studies = [
        gemm_study(
            *mnk,
            setup.at_chips,
            setup.profile,
            names,
            setup.mesh,
            reference=setup.reference,
            label=where,
        )
        for mnk, where in distinct_gemms(layers)
    ]
    mean: dict[str, float] = {}
    for name in (n for n in names if n != setup.reference):
        ups = [
            e.speedup_of_reference
            for study in studies
            for e in study.entries
            if e.algorithm == name and e.speedup_of_reference is not None
        ]
        if ups:
            mean[name] = sum(ups) / len(ups)
    return studies, mean


def _shapes_view(setup: _Setup) -> list[ShapeEntry]:
    """Figure 13: every mesh shape searched, feasible (fastest first) or with its reason."""
    out = []
    for algorithm in setup.algorithms:
        found = setup.at(algorithm)
        if isinstance(found, str):
            continue
        for result in (*found.ranked, *found.infeasible):
            feasible = result.feasible
            out.append(
                ShapeEntry(
                    algorithm=algorithm.name,
                    mesh=result.mesh.label,
                    reason=result.infeasible,
                    fc_time_s=result.time_s if feasible else None,
                    utilization=result.utilization(setup.profile) if feasible else None,
                    configs=_configs(result) if feasible else None,
                )
            )
    return out


def _slices_view(setup: _Setup) -> list[SliceEntry]:
    """Figure 14: on the best mesh, each layer's own configuration, then every configuration
    legal for all layers applied to all of them."""
    out: list[SliceEntry] = []
    for algorithm in setup.algorithms:
        found = setup.at(algorithm)
        if isinstance(found, str):
            continue
        best = found.best
        rows: list[tuple[dict[str, int] | None, float]] = [(None, best.time_s)]
        for config in _common_configs(best):
            forced = [
                layer_choice(algorithm, c.dataflow, best.mesh, setup.profile, config)
                for c in best.layers
            ]
            rows.append((dict(config), best.blocks * sum(c.time_s for c in forced)))
        out.extend(
            SliceEntry(
                algorithm=algorithm.name,
                mesh=best.mesh.label,
                config=config,
                fc_time_s=time_s,
                utilization=_utilization(best, time_s, setup.profile),
            )
            for config, time_s in rows
        )
    return out


def _dataflow_view(setup: _Setup) -> list[DataflowEntry]:
    """Table 2: phase 1's dataflows (auto) against Y-stationary everywhere."""
    out = []
    for algorithm in setup.algorithms:
        on, off = setup.at(algorithm, "auto"), setup.at(algorithm, "ystn")
        on_best = None if isinstance(on, str) else on.best
        off_best = None if isinstance(off, str) else off.best
        reasons = [r for r in (on, off) if isinstance(r, str)]
        out.append(
            DataflowEntry(
                algorithm=algorithm.name,
                optimized_mesh=on_best.mesh.label if on_best else None,
                optimized_utilization=on_best.utilization(setup.profile) if on_best else None,
                unoptimized_mesh=off_best.mesh.label if off_best else None,
                unoptimized_utilization=(off_best.utilization(setup.profile) if off_best else None),
                speedup=speedup(
                    off_best.time_s if off_best else None, on_best.time_s if on_best else None
                ),
                reason="; ".join(reasons) or None,
            )
        )
    return out


def _overlap_view(setup: _Setup) -> list[OverlapEntry]:
    """Table 3: tuned with every kind overlapped and run on the profile, retuned for the
    profile, and with every kind overlapped."""
    profile = setup.profile
    overlapping = profile.model_copy(update={"overlapped": list(CollectiveKind)})
    chips, batch = setup.at_chips, setup.batch_of(setup.at_chips)
    out = []
    for algorithm in setup.algorithms:
        tuned = setup.searches(algorithm, overlapping, chips, batch)
        retuned = setup.searches(algorithm, profile, chips, batch)
        if isinstance(tuned, str) or isinstance(retuned, str):
            out.append(
                OverlapEntry(
                    algorithm=algorithm.name,
                    mesh=None,
                    configs=None,
                    as_tuned_utilization=None,
                    retuned_mesh=None,
                    retuned_utilization=None,
                    overlapped_utilization=None,
                    reason=tuned if isinstance(tuned, str) else str(retuned),
                )
            )
            continue
        best = tuned.best
        out.append(
            OverlapEntry(
                algorithm=algorithm.name,
                mesh=best.mesh.label,
                configs=_configs(best),
                as_tuned_utilization=_utilization(best, _repriced(best, profile), profile),
                retuned_mesh=retuned.best.mesh.label,
                retuned_utilization=retuned.best.utilization(profile),
                overlapped_utilization=best.utilization(overlapping),
                reason=None,
            )
        )
    return out


def compare_models(
    model: ModelSpec,
    profile: HardwareProfile,
    chips_list: Sequence[int],
    batch: int | None = None,
    algorithms: Sequence[str] | None = None,
    *,
    seq_len: int | None = None,
    views: Sequence[View] = MESH_VIEWS,
    reference: str = DEFAULT_ALGORITHM,
    at_chips: int | None = None,
    mesh: Mesh | None = None,
) -> Comparison:
    """Every selected algorithm on ``model`` at each of ``chips_list`` (see the module docstring).

    ``batch=None`` is weak scaling (``chips // 2`` sequences, §5.1.1); a number fixes the batch
    at every size (strong scaling, §5.1.3). The single-size views (breakdown, gemms, shapes,
    slices, dataflow, overlap) use ``at_chips`` (default: the largest of ``chips_list``).
    ``mesh`` restricts every search to that one shape. The end-to-end step adds ``blocks ·``
    :func:`~meshtune.step.work.nonfc_block` to the FC time when the profile has an HBM bandwidth.
    Each search (algorithm, profile, chips, batch, dataflow mode) runs once, whichever views use
    it. Raises :class:`InfeasibleError` / :class:`MeshtuneError` for bad sizes, names or views
    only; an algorithm with no feasible mesh at a size is reported with the reason.
    """
    if not chips_list:
        raise InfeasibleError("no chip count to compare")
    sizes = sorted(dict.fromkeys(check_chips(c) for c in chips_list))
    at = max(sizes) if at_chips is None else check_chips(at_chips)
    if mesh is not None:
        for chips in sorted({*sizes, at}):
            if mesh.chips != chips:
                raise InfeasibleError(
                    f"mesh shape {mesh.label} has {mesh.chips} chips, not {chips}"
                )
    unknown = [v for v in views if v not in VIEWS]
    if unknown or not views:
        raise MeshtuneError(
            f"unknown view {unknown[0]!r}; known views: {', '.join(VIEWS)}"
            if unknown
            else "no view selected; known views: " + ", ".join(VIEWS)
        )
    seq = model.seq_len if seq_len is None else check_size("sequence length", seq_len)
    setup = _Setup(
        model=model,
        profile=profile,
        algorithms=selected(algorithms),
        reference=get_algorithm(reference).name,
        seq_len=seq,
        batch=None if batch is None else check_size("batch", batch),
        at_chips=at,
        mesh=mesh,
        searches=_Searches(model, seq, mesh),
        nonfc_note=None
        if profile.hbm_bytes_per_s is not None
        else f"profile '{profile.name}' has no hbm_bytes_per_s: no end-to-end estimate (§4.4)",
    )
    gemms, mean = _gemms_view(setup) if "gemms" in views else ([], {})
    return Comparison(
        model=model.name,
        display_name=model.display_name,
        profile=profile.name,
        seq_len=seq,
        scaling="weak" if setup.batch is None else "strong",
        batch=setup.batch,
        chips=sizes,
        at_chips=at,
        mesh=None if mesh is None else mesh.label,
        reference=setup.reference,
        algorithms=[a.name for a in setup.algorithms],
        views=[v for v in VIEWS if v in views],
        overlapped=[k.value for k in profile.overlapped],
        nonfc_note=setup.nonfc_note,
        scaling_points=_scaling_view(setup, sizes) if "scaling" in views else [],
        breakdown=_breakdown_view(setup) if "breakdown" in views else [],
        gemms=gemms,
        gemms_mean_speedup=mean,
        shapes=_shapes_view(setup) if "shapes" in views else [],
        slices=_slices_view(setup) if "slices" in views else [],
        dataflow=_dataflow_view(setup) if "dataflow" in views else [],
        overlap=_overlap_view(setup) if "overlap" in views else [],
        cluster=cluster_entries(
            model,
            profile,
            sizes,
            setup.algorithms,
            setup.reference,
            {chips: setup.batch_of(chips) for chips in sizes},
            seq,
        )
        if "cluster" in views
        else [],
    )
