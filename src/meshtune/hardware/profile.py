"""The hardware profile: a chip's compute, memory and the links of its network tiers
(:mod:`~meshtune.hardware.links`), with the record of how each number was measured
(:mod:`~meshtune.hardware.calibration`).

No ``from __future__ import annotations``: pydantic would evaluate every annotation from its
string when each model class is created, on every start-up."""

import hashlib
import json
from collections.abc import Callable, Hashable
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, Field, model_validator

from meshtune.errors import ProfileError
from meshtune.hardware.calibration import Calibration
from meshtune.hardware.compute import Fp8Compute, GemmEfficiency, check_within_peak
from meshtune.hardware.links import AxisTable, CollectiveKind, LinkParams, Tier
from meshtune.units import FROZEN, Bandwidth, FlopRate, MemoryBytes

K = TypeVar("K", bound=Hashable)


V = TypeVar("V")


class ProfileMemo(Generic[K, V]):
    """Answers of a pure function of one profile object and a key, ``(id(profile), key) →
    (profile, answer)``: the profile is held so that its id is not reused while its entries
    live, and the oldest entry is dropped past ``size`` (the cluster search asks the same few
    hundred questions thousands of times)."""

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
        check_within_peak(self.effective_flops_per_s, self.peak_flops_per_s)
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
        search looks them up for every priced communication).

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
        like :meth:`link`: the search asks it for every DP and PP ring)."""
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
        if self.full_duplex:  # the default: a profile without the field hashes alike
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
