"""The hardware profile: a chip's compute, memory and the links of its network tiers, with the
record of how each number was measured (calibration).

The communication parameters are those of the MeshSlice cost model (ISCA 2025, §3.2.2):
``cost_op = t_launch + (P - 1) * (t_sync + shard_bytes / bw)``, one triple per collective kind
and per mesh axis. Axis 0 is the ring of the P_r chips that share a mesh column (inter-row
traffic: the paper's AG_row / RdS_row); axis 1 is the ring of the P_c chips that share a mesh
row (inter-column traffic: AG_col / RdS_col).

No ``from __future__ import annotations``: pydantic would evaluate every annotation from its
string when each model class is created, on every start-up."""

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Hashable
from enum import Enum
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from meshtune.errors import ProfileError
from meshtune.units import (
    FROZEN,
    MIN_EFFICIENCY,
    MIN_POINT_FLOPS,
    Bandwidth,
    FlopRate,
    Latency,
    MemoryBytes,
    without_none,
)


class LinkParams(BaseModel):
    """Cost-model parameters of one collective kind on one mesh axis (§3.2.2)."""

    model_config = FROZEN

    t_launch_s: Latency = Field(description="Fixed cost of launching the operation.")
    t_sync_s: Latency = Field(description="Synchronisation latency of each ring step.")
    bw_bytes_per_s: Bandwidth = Field(description="Bandwidth of one ring step's transfer.")


AXIS_KEY_PATTERN = re.compile(r"axis[0-9]")


class AxisTable(BaseModel):
    """One link kind's parameters per mesh axis: ``axis0`` and ``axis1`` (the two axes of the
    2D mesh) always, ``axis2`` … (depth, network tiers) when a profile describes them."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)
    __pydantic_extra__: dict[str, LinkParams]

    axis0: LinkParams = Field(description="Ring of the P_r chips of a mesh column (inter-row).")
    axis1: LinkParams = Field(description="Ring of the P_c chips of a mesh row (inter-column).")

    @model_validator(mode="after")
    def _axis_keys(self) -> "AxisTable":
        for key in self.__pydantic_extra__:
            if not AXIS_KEY_PATTERN.fullmatch(key):
                raise ValueError(f"unknown key '{key}': axes are named axis0, axis1, axis2, …")
        return self

    def __getitem__(self, key: str) -> LinkParams:
        value = getattr(self, key, None) if key in ("axis0", "axis1") else None
        if value is None:
            value = self.__pydantic_extra__.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def axis_keys(self) -> list[str]:
        """The axis keys present, ascending."""
        return sorted(["axis0", "axis1", *self.__pydantic_extra__])


class CollectiveKind(str, Enum):
    """The collective operations the cost model knows."""

    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"


class MeasuredOp(str, Enum):
    """The operations a benchmark log may time: the cost model's kinds, plus all-reduce and
    all-to-all.

    A ring all-reduce is a reduce-scatter followed by an all-gather over the same ring
    (2(P − 1) steps on shards of size / P), so its fit can stand for both kinds. An all-to-all
    (P − 1 exchanges of size / P) supplies no kind of the 2D cost model: its fit supplies the
    profile's (or a tier's) ``all_to_all``, expert parallelism's token dispatch.
    """

    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"
    ALL_REDUCE = "all_reduce"
    ALL_TO_ALL = "all_to_all"

    @property
    def kinds(self) -> tuple[CollectiveKind, ...]:
        """The cost-model kinds a fit of this operation can supply."""
        if self is MeasuredOp.ALL_REDUCE:
            return (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
        if self is MeasuredOp.ALL_TO_ALL:
            return ()
        return (CollectiveKind(self.value),)


class RingFit(BaseModel):
    """One ring size P of a fit over several: its own line, and how the joint model fits it."""

    model_config = FROZEN

    ranks: PositiveInt
    points: PositiveInt = Field(description="Measurements at this P inside the fitted range.")
    intercept_s: float = Field(description="Own fit at this P: t_launch + steps·t_sync.")
    bw_bytes_per_s: float | None = Field(
        default=None, description="Own fit at this P (None: fewer than two shard sizes)."
    )
    mape_joint: float = Field(description="MAPE of the joint (all-P) model at this P.")
    mape_own: float | None = Field(default=None, description="MAPE of this P's own line.")


class FitRecord(BaseModel):
    """One fit of a benchmarked operation on one mesh axis: the values, their quality, their use.

    ``op`` is what the logs timed; ``used_for`` the profile entries it supplies
    (``<kind>.axis<axis>``, or the tier's, or ``all_to_all``): an all-reduce fit supplies
    all_gather and reduce_scatter where no dedicated log does, an all-to-all fit the
    ``all_to_all`` link. ``mirrored_from_axis`` marks a fit copied from the other axis (one ring
    for both).
    """

    model_config = FROZEN

    op: MeasuredOp
    axis: Literal[0, 1]
    tier: str | None = Field(
        default=None, description="The network tier fitted (e.g. 'network'); None: a mesh axis."
    )
    used_for: list[MeasuredOp] = Field(
        default_factory=list,
        description="Profile entries the fit supplies: all_gather, reduce_scatter, send_recv or "
        "all_to_all (never all_reduce, which is no profile entry).",
    )
    mirrored_from_axis: Literal[0, 1] | None = None
    t_launch_s: float = Field(ge=0)
    t_sync_s: float = Field(ge=0)
    bw_bytes_per_s: PositiveFloat
    points: PositiveInt = Field(description="Measurements used by the fit.")
    points_measured: PositiveInt = Field(description="Measurements the logs gave.")
    ring_sizes: list[PositiveInt] = Field(description="Distinct ring sizes P in the data.")
    r2: float = Field(description="Coefficient of determination of the fit.")
    t_launch_ci95_s: tuple[float, float] | None = None
    t_sync_ci95_s: tuple[float, float] | None = None
    bw_ci95_bytes_per_s: tuple[float, float] | None = None
    loo_mape_ge_1mb: float | None = Field(
        default=None, description="Leave-one-size-out MAPE over sizes >= 1 MiB (fraction)."
    )
    confounded: bool = Field(
        default=False,
        description="Every measurement had the same number of ring steps, so t_sync cannot be "
        "told from t_launch: t_launch holds the whole intercept and t_sync is 0.",
    )
    min_shard_bytes: PositiveFloat | None = Field(
        default=None,
        description="The fit used shards of at least this many bytes (the bandwidth-dominated "
        "regime); None: every size.",
    )
    cutoff_chosen: bool = Field(
        default=False, description="min_shard_bytes was chosen automatically (else given)."
    )
    loo_mape_ge_1mb_all_sizes: float | None = Field(
        default=None,
        description="loo_mape_ge_1mb of one fit over every size, when min_shard_bytes is set.",
    )
    per_ring: list[RingFit] = Field(
        default_factory=list, description="Per ring size P, when the data holds several."
    )
    rings_consistent: bool | None = Field(
        default=None,
        description="Whether one (t_launch, t_sync, bw) explains every P (None: one P only).",
    )
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _entries_only(self) -> "FitRecord":
        if MeasuredOp.ALL_REDUCE in self.used_for:
            raise ValueError(
                "used_for: 'all_reduce' is no profile entry; an all-reduce fit supplies "
                "all_gather and reduce_scatter"
            )
        return self


class ComputeFitRecord(BaseModel):
    """How the compute figures were fitted from GeMM timings (``meshtune.calibrate.fit``): F
    is the best achieved throughput of a size, the profile's curve each size's achieved / F;
    ``overhead_s``, ``half_efficiency_flops`` and ``r2`` describe the line time = overhead +
    FLOPs / F_line fitted alongside."""

    model_config = FROZEN

    points: PositiveInt = Field(description="GeMM timings used by the fit.")
    dtype: str = Field(description="Operand type of the timed GeMMs.")
    effective_flops_per_s: PositiveFloat
    r2: float | None = Field(default=None, description="Coefficient of determination.")
    effective_flops_ci95_per_s: tuple[float, float] | None = None
    overhead_s: float | None = Field(default=None, ge=0, description="Fixed cost per GeMM.")
    half_efficiency_flops: float | None = Field(
        default=None,
        description="FLOPs of a GeMM that reaches half the effective FLOPS (overhead × F).",
    )
    notes: list[str] = Field(default_factory=list)


class Origin(BaseModel):
    """Where one value of a calibrated profile came from."""

    model_config = FROZEN

    kind: Literal["fit", "option", "base", "default"] = Field(
        description="fit: the logs; option: given by the user; base: the base profile; "
        "default: assumed (bf16, B = 8, effective FLOPS = peak)."
    )
    detail: str = Field(description="Which fit, option, base profile or assumption.")


class Calibration(BaseModel):
    """Provenance of a profile written by ``meshtune calibrate``."""

    model_config = FROZEN

    tool: str = Field(description="meshtune version that wrote the profile.")
    source_files: list[str] = Field(description="Log files the fit read.")
    origins: dict[str, Origin] = Field(
        default_factory=dict, description="Per profile value (e.g. all_gather.axis0)."
    )
    fits: list[FitRecord] = Field(default_factory=list)
    compute: ComputeFitRecord | None = None
    notes: list[str] = Field(default_factory=list)

    def largest_ring(self, axis: int) -> int | None:
        """The ring size up to which every kind the fits supply on ``axis`` was measured: per
        kind the largest ring of its fit, the smallest of those; None without fits."""
        per_kind = [
            max(f.ring_sizes)
            for f in self.fits
            if f.axis == axis and f.ring_sizes
            for used in f.used_for
            if used is not MeasuredOp.ALL_TO_ALL  # not a mesh axis's ring
        ]
        return min(per_kind) if per_kind else None


class EfficiencyPoint(BaseModel):
    """The GeMM efficiency measured at one size: achieved / effective FLOP/s, overhead aside."""

    model_config = FROZEN

    flops: float = Field(
        ge=MIN_POINT_FLOPS, allow_inf_nan=False, description="2·m·n·k of the GeMM."
    )
    efficiency: float = Field(
        gt=MIN_EFFICIENCY, le=1, description="Fraction of effective_flops_per_s."
    )


class GemmEfficiency(BaseModel):
    """How a GeMM's time departs from FLOPs / F (MeshSlice §5.3.1: small GeMMs are slower).

    ``time = overhead_s + 2·m·n·k / (F · efficiency(2·m·n·k))``; ``efficiency`` interpolates
    ``curve`` linearly in log(FLOPs) and holds the end values outside it (1 with no curve).
    """

    model_config = FROZEN

    overhead_s: Latency = Field(default=0.0, description="Fixed cost of every GeMM call.")
    curve: list[EfficiencyPoint] = Field(
        default_factory=list, description="Efficiency over GeMM size, FLOPs increasing."
    )

    @model_validator(mode="after")
    def _increasing(self) -> "GemmEfficiency":
        flops = [p.flops for p in self.curve]
        if any(b <= a for a, b in itertools.pairwise(flops)):
            raise ValueError("gemm_efficiency.curve: flops must be strictly increasing")
        return self

    def efficiency(self, flops: float) -> float:
        """The curve at ``flops`` (log-linear interpolation, ends held; 1 without a curve)."""
        curve = self.curve
        if not curve:
            return 1.0
        if flops <= curve[0].flops:
            return curve[0].efficiency
        for lo, hi in itertools.pairwise(curve):
            if flops <= hi.flops:
                w = math.log(flops / lo.flops) / math.log(hi.flops / lo.flops)
                return lo.efficiency + w * (hi.efficiency - lo.efficiency)
        return curve[-1].efficiency


def _check_within_peak(effective: float, peak: float) -> None:
    """ValueError when a sustained rate exceeds its peak (the error names both fields)."""
    if effective > peak:
        raise ValueError(
            f"effective_flops_per_s ({effective:g}) exceeds peak_flops_per_s ({peak:g})"
        )


class Fp8Compute(BaseModel):
    """FP8 Tensor Core GeMMs of a chip that has them, for plans with ``--precision fp8``
    (:func:`meshtune.cost.compute.at_precision`): the FC GeMMs then run at these rates, the rest
    of the step at the profile's own. ``gemm_efficiency`` absent: the profile's curve (the same
    fraction of the effective rate at the same GeMM FLOPs, a stated assumption)."""

    model_config = FROZEN

    peak_flops_per_s: FlopRate = Field(description="Dense FP8 peak FLOP/s per chip.")
    effective_flops_per_s: FlopRate = Field(description="Sustained FP8 GeMM FLOP/s per chip.")
    gemm_efficiency: GemmEfficiency | None = Field(
        default=None,
        description="FP8 GeMM efficiency over size; absent: the profile's gemm_efficiency.",
    )
    sources: list[str] = Field(min_length=1, description="Where every FP8 figure comes from.")

    @model_validator(mode="after")
    def _effective_within_peak(self) -> "Fp8Compute":
        _check_within_peak(self.effective_flops_per_s, self.peak_flops_per_s)
        return self


class Tier(BaseModel):
    """One level of a tiered network (e.g. the NVLink inside an 8-GPU node, then the network
    between nodes): a ring whose chips all lie within one unit of ``chips`` consecutive chips
    uses this tier's parameters (``meshtune.cluster``)."""

    model_config = FROZEN

    name: str = Field(min_length=1, description="e.g. 'nvlink' or 'network'.")
    chips: PositiveInt | None = Field(
        default=None, description="Chips per unit of this tier; None: every chip (the last)."
    )
    all_gather: LinkParams
    reduce_scatter: LinkParams
    send_recv: LinkParams
    all_to_all: LinkParams | None = Field(
        default=None, description="All-to-all over chips of this tier (expert parallelism)."
    )

    @model_serializer(mode="wrap")
    def _drop_unset_all_to_all(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        return without_none(handler(self), ("all_to_all",))


K = TypeVar("K", bound=Hashable)


V = TypeVar("V")


class ProfileMemo(Generic[K, V]):
    """Answers of a pure function of one profile object and a key, ``(id(profile), key) →
    (profile, answer)``: the profile is held so that its id is not reused while its entries
    live, and the oldest entry is dropped past ``size`` (the cluster search asks the same few
    hundred questions thousands of times; issue 17)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.store: dict[tuple[int, K], tuple[HardwareProfile, V]] = {}

    def get(self, profile: "HardwareProfile", key: K, make: Callable[[], V]) -> V:
        """The answer for (``profile``, ``key``), ``make()`` the first time."""
        entry = self.store.get((id(profile), key))
        if entry is None or entry[0] is not profile:
            if len(self.store) >= self.size:
                del self.store[next(iter(self.store))]
            entry = self.store[(id(profile), key)] = (profile, make())
        return entry[1]


# Memo of HardwareProfile.link and .axes: per profile object, its (kind, axis) -> parameters and
# kind -> axes. Profiles are frozen, so an entry never goes stale.
_LINK_TABLES: ProfileMemo[None, dict[Any, Any]] = ProfileMemo(4096)


def _link_memo(profile: "HardwareProfile") -> dict[Any, Any]:
    return _LINK_TABLES.get(profile, None, dict)


class HardwareProfile(BaseModel):
    """Measured constants of one accelerator and its 2D mesh network."""

    model_config = FROZEN

    name: str = Field(description="Catalog name; the file stem.")
    description: str = Field(min_length=1)
    sources: list[str] = Field(min_length=1, description="Where every constant comes from.")
    peak_flops_per_s: FlopRate = Field(description="Peak FLOP/s per chip (utilization).")
    effective_flops_per_s: FlopRate = Field(description="Sustained GeMM FLOP/s per chip.")
    bytes_per_element: Annotated[int, Field(strict=True, gt=0, le=64)] = Field(
        description="Operand width, e.g. 2 for bf16 (at most 64)."
    )
    slice_block: Annotated[int, Field(strict=True, gt=0, le=2**20)] = Field(
        description="Algorithm 2's block size B (elements, at most 2**20)."
    )
    all_gather: AxisTable = Field(description="Ring all-gather, per mesh axis.")
    reduce_scatter: AxisTable = Field(description="Ring reduce-scatter, per mesh axis.")
    send_recv: AxisTable = Field(description="One ring shift (send to the next chip), per axis.")
    all_to_all: LinkParams | None = Field(
        default=None,
        description="All-to-all (expert parallelism's token dispatch), where no tier gives "
        "it: t_launch + (P − 1)·(t_sync + bytes / P / bw); None: no expert parallelism.",
    )
    hbm_bytes_per_s: Bandwidth | None = Field(
        default=None,
        description="Memory (HBM) bandwidth per chip; optional, prices the memory-bound "
        "non-FC work of an end-to-end step estimate (Sec. 4.4).",
    )
    overlapped: list[CollectiveKind] = Field(
        default_factory=lambda: list(CollectiveKind),
        description="Communication kinds that run concurrently with compute (default: all). "
        "The paper's real 4x4 TPUv4 (Sec. 5.3) overlapped send_recv only.",
    )
    overlap_slowdown: Annotated[float, Field(ge=0.0, lt=1.0, allow_inf_nan=False)] = Field(
        default=0.0,
        description="Fraction by which compute slows while a collective runs beside it on the "
        "same chip (NCCL kernels take SMs and HBM bandwidth from the GeMMs they overlap), for "
        "the 2D GeMM algorithms' overlapped stages and the step's overlapped DP / ZeRO-3 / CP "
        "/ DualPipe traffic; 0: overlap is free (TPU ICI runs on its own DMA engines, as the "
        "paper's model assumes).",
    )
    full_duplex: bool = Field(
        default=True,
        description="Whether a link carries its full bandwidth both ways at once (TPU ICI, "
        "NVLink, InfiniBand are full duplex): ring shifts then send half of a shard to each "
        "neighbour in one step. False: the two halves share the link, one after the other.",
    )
    gemm_efficiency: GemmEfficiency | None = Field(
        default=None,
        description="Per-GeMM overhead and efficiency over GeMM size (from GeMM logs); "
        "absent: every GeMM runs at effective_flops_per_s.",
    )
    fp8: Fp8Compute | None = Field(
        default=None,
        description="FP8 GeMM rates (--precision fp8); None: the chip has no FP8 GeMMs.",
    )
    calibration: Calibration | None = None
    memory_bytes: MemoryBytes | None = Field(
        default=None,
        description="Memory capacity of one chip (HBM), bytes; None: unknown, not checked.",
    )
    tiers: list[Tier] | None = Field(
        default=None,
        description="Network tiers, innermost first, for cluster plans; None: the axis tables "
        "serve every level.",
    )

    @model_validator(mode="after")
    def _effective_within_peak(self) -> "HardwareProfile":
        _check_within_peak(self.effective_flops_per_s, self.peak_flops_per_s)
        if self.tiers is not None:
            sizes = [t.chips for t in self.tiers]
            if not sizes or sizes[-1] is not None or None in sizes[:-1]:
                raise ValueError("tiers: every tier but the last gives chips; the last has none")
            inner = [n for n in sizes if n is not None]
            if inner != sorted(set(inner)):
                raise ValueError(f"tiers: chips must grow from tier to tier, got {inner}")
        return self

    def link(self, op: CollectiveKind, axis: int) -> LinkParams:
        """Parameters of collective ``op`` on mesh ``axis`` (memoised per profile object: the
        search looks them up for every priced communication, issue 17).

        Raises :class:`ProfileError` when the profile has no parameters for that axis.
        """
        memo = _link_memo(self)
        found: LinkParams | None = memo.get((op, axis))
        if found is None:
            found = memo[(op, axis)] = self._find_link(op, axis)
        return found

    def _find_link(self, op: CollectiveKind, axis: int) -> LinkParams:
        table: AxisTable = getattr(self, op.value)
        try:
            return table[f"axis{axis}"]
        except KeyError:
            known = ", ".join(table.axis_keys())
            raise ProfileError(
                f"profile '{self.name}' has no {op.value} parameters for axis {axis} "
                f"(it has {known})"
            ) from None

    def axes(self, op: CollectiveKind) -> tuple[int, ...]:
        """The mesh axes ``op`` has parameters for, ascending (memoised per profile object
        like :meth:`link`: the search asks it for every DP and PP ring, issue 17)."""
        memo = _link_memo(self)
        found: tuple[int, ...] | None = memo.get(op)
        if found is None:
            table: AxisTable = getattr(self, op.value)
            found = memo[op] = tuple(int(key.removeprefix("axis")) for key in table.axis_keys())
        return found

    def overlaps(self, op: CollectiveKind) -> bool:
        """Whether ``op`` can run while the chip computes (``overlapped``)."""
        return op in self.overlapped

    def content_hash(self) -> str:
        """SHA-256 of the profile's canonical JSON (the name excluded), as ``sha256:<hex>``.

        ``memory_bytes`` is left out: no time depends on it, and a plan that was checked against
        it records the capacity it used (``cluster.memory.capacity_bytes``), which verify
        compares with the profile's. Optional fields (``tiers``, ``gemm_efficiency``,
        ``hbm_bytes_per_s``) count only when set, ``full_duplex`` only when false and
        ``overlap_slowdown`` only when not 0, so profiles without them keep their hash.
        """
        unset = {f for f in _HASHED_IF_SET if getattr(self, f) is None}
        if self.full_duplex:  # the default: profiles that predate the field keep their hash
            unset.add("full_duplex")
        if self.overlap_slowdown == 0.0:  # likewise
            unset.add("overlap_slowdown")
        payload = self.model_dump(mode="json", exclude={"name", *_NOT_HASHED, *unset})
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()


# Profile fields the content hash leaves out (see content_hash).
_NOT_HASHED = ("memory_bytes",)


# Optional profile fields that enter the content hash only when set.
_HASHED_IF_SET = ("tiers", "gemm_efficiency", "hbm_bytes_per_s", "all_to_all", "fp8")
