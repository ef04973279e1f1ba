"""Input data: LLM architecture specs and measured hardware profiles, plus their catalogs.

Both are frozen pydantic models with ``extra="forbid"``; units live in field names and values
are SI base units (seconds, bytes, bytes per second, FLOP per second). A data file's ``name`` is
its stem and may not be written inside the file.

The communication parameters are those of the MeshSlice cost model (ISCA 2025, §3.2.2):
``cost_op = t_launch + (P - 1) * (t_sync + shard_bytes / bw)``, one triple per collective kind
and per mesh axis. Axis 0 is the ring of the P_r chips that share a mesh column (inter-row
traffic: the paper's AG_row / RdS_row); axis 1 is the ring of the P_c chips that share a mesh
row (inter-column traffic: AG_col / RdS_col).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    StringConstraints,
    model_validator,
)

from meshtune._toml import load_model_file
from meshtune.errors import MeshtuneError, ProfileError, SpecError

_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ModelSpec(BaseModel):
    """A decoder-only transformer, as far as its FC layers are concerned."""

    model_config = _FROZEN

    name: str = Field(description="Catalog name; the file stem.")
    display_name: str = Field(description="Human-readable name, e.g. 'GPT-3 175B'.")
    source: str = Field(min_length=1, description="Where the hyperparameters come from.")
    blocks: PositiveInt = Field(description="Number of transformer blocks (4 FC layers each).")
    hidden: PositiveInt = Field(description="Model (residual stream) width h.")
    heads: PositiveInt = Field(description="Query heads.")
    head_dim: PositiveInt = Field(description="Width of one attention head.")
    kv_heads: PositiveInt = Field(description="Key/value heads (== heads without GQA).")
    ffn_hidden: PositiveInt = Field(description="Inner width of the MLP.")
    mlp: Literal["gelu", "swiglu"] = Field(description="gelu: one up matrix; swiglu: gate+up.")
    vocab: PositiveInt = Field(description="Vocabulary size.")
    seq_len: PositiveInt = Field(description="Default training sequence length.")

    @model_validator(mode="before")
    @classmethod
    def _layers_was_renamed(cls, data: object) -> object:
        if isinstance(data, dict) and "layers" in data and "blocks" not in data:
            raise ValueError(
                "'layers' is now called 'blocks' (the number of transformer blocks, each with "
                "four FC layers); rename the key"
            )
        return data

    @model_validator(mode="after")
    def _kv_heads_divide_heads(self) -> ModelSpec:
        if self.heads % self.kv_heads:
            raise ValueError(
                f"kv_heads ({self.kv_heads}) must divide heads ({self.heads}) for grouped-query "
                "attention"
            )
        return self


class LinkParams(BaseModel):
    """Cost-model parameters of one collective kind on one mesh axis (§3.2.2)."""

    model_config = _FROZEN

    t_launch_s: float = Field(ge=0, description="Fixed cost of launching the operation.")
    t_sync_s: float = Field(ge=0, description="Synchronisation latency of each ring step.")
    bw_bytes_per_s: PositiveFloat = Field(description="Bandwidth of one ring step's transfer.")


AXIS_KEY_PATTERN = r"^axis[0-9]$"

AxisTable = dict[Annotated[str, StringConstraints(pattern=AXIS_KEY_PATTERN)], LinkParams]
"""One link kind's parameters per mesh axis, keyed ``axis0``, ``axis1`` (``axis2``: depth, ...)."""


class CollectiveKind(str, Enum):
    """The collective operations the cost model knows."""

    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"


class FitRecord(BaseModel):
    """How one (op, axis) triple of a calibrated profile was fitted."""

    model_config = _FROZEN

    op: CollectiveKind
    axis: Literal[0, 1]
    points: PositiveInt = Field(description="Measurements used by the fit.")
    ring_sizes: list[PositiveInt] = Field(description="Distinct ring sizes P in the data.")
    r2: float = Field(description="Coefficient of determination of the fit.")
    t_launch_ci95_s: tuple[float, float] | None = None
    t_sync_ci95_s: tuple[float, float] | None = None
    bw_ci95_bytes_per_s: tuple[float, float] | None = None
    loo_mape_ge_1mb: float | None = Field(
        default=None, description="Leave-one-size-out MAPE over sizes >= 1 MB (fraction)."
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
    loo_mape_ge_1mb_all_sizes: float | None = Field(
        default=None,
        description="loo_mape_ge_1mb of one fit over every size, when min_shard_bytes is set.",
    )
    notes: list[str] = Field(default_factory=list)


class ComputeFitRecord(BaseModel):
    """How ``effective_flops_per_s`` was fitted from GeMM timings: time = overhead + FLOPs / F."""

    model_config = _FROZEN

    points: PositiveInt = Field(description="GeMM timings used by the fit.")
    dtype: str = Field(description="Operand type of the timed GeMMs.")
    r2: float | None = Field(default=None, description="Coefficient of determination.")
    effective_flops_ci95_per_s: tuple[float, float] | None = None
    overhead_s: float | None = Field(default=None, ge=0, description="Fixed cost per GeMM.")
    half_efficiency_flops: float | None = Field(
        default=None,
        description="FLOPs of a GeMM that reaches half the effective FLOPS (overhead × F).",
    )
    notes: list[str] = Field(default_factory=list)


class Calibration(BaseModel):
    """Provenance of a profile written by ``meshtune calibrate``."""

    model_config = _FROZEN

    tool: str = Field(description="meshtune version that wrote the profile.")
    source_files: list[str] = Field(description="Log files the fit read.")
    fits: list[FitRecord] = Field(default_factory=list)
    compute: ComputeFitRecord | None = None
    notes: list[str] = Field(default_factory=list)


class Tier(BaseModel):
    """One level of a tiered network (e.g. the NVLink inside an 8-GPU node, then the network
    between nodes): a ring whose chips all lie within one unit of ``chips`` consecutive chips
    uses this tier's parameters (``meshtune.cluster``)."""

    model_config = _FROZEN

    name: str = Field(min_length=1, description="e.g. 'nvlink' or 'network'.")
    chips: PositiveInt | None = Field(
        default=None, description="Chips per unit of this tier; None: every chip (the last)."
    )
    all_gather: LinkParams
    reduce_scatter: LinkParams
    send_recv: LinkParams


class HardwareProfile(BaseModel):
    """Measured constants of one accelerator and its 2D mesh network."""

    model_config = _FROZEN

    name: str = Field(description="Catalog name; the file stem.")
    description: str = Field(min_length=1)
    sources: list[str] = Field(min_length=1, description="Where every constant comes from.")
    peak_flops_per_s: PositiveFloat = Field(description="Peak FLOP/s per chip (utilization).")
    effective_flops_per_s: PositiveFloat = Field(description="Sustained GeMM FLOP/s per chip.")
    bytes_per_element: PositiveInt = Field(description="Operand width, e.g. 2 for bf16.")
    slice_block: PositiveInt = Field(description="Algorithm 2's block size B (elements).")
    all_gather: AxisTable = Field(description="Ring all-gather, per mesh axis.")
    reduce_scatter: AxisTable = Field(description="Ring reduce-scatter, per mesh axis.")
    send_recv: AxisTable = Field(description="One ring shift (send to the next chip), per axis.")
    overlapped: list[CollectiveKind] = Field(
        default_factory=lambda: list(CollectiveKind),
        description="Communication kinds that run concurrently with compute (default: all). "
        "The paper's real 4x4 TPUv4 (Sec. 5.3) overlapped send_recv only.",
    )
    calibration: Calibration | None = None
    memory_bytes: PositiveFloat | None = Field(
        default=None,
        description="Memory capacity of one chip (HBM), bytes; None: unknown, not checked.",
    )
    tiers: list[Tier] | None = Field(
        default=None,
        description="Network tiers, innermost first, for cluster plans; None: the axis tables "
        "serve every level.",
    )

    @model_validator(mode="after")
    def _effective_within_peak(self) -> HardwareProfile:
        if self.effective_flops_per_s > self.peak_flops_per_s:
            raise ValueError(
                f"effective_flops_per_s ({self.effective_flops_per_s:g}) exceeds "
                f"peak_flops_per_s ({self.peak_flops_per_s:g})"
            )
        if self.tiers is not None:
            sizes = [t.chips for t in self.tiers]
            if not sizes or sizes[-1] is not None or None in sizes[:-1]:
                raise ValueError("tiers: every tier but the last gives chips; the last has none")
            inner = [n for n in sizes if n is not None]
            if inner != sorted(set(inner)):
                raise ValueError(f"tiers: chips must grow from tier to tier, got {inner}")
        for kind in CollectiveKind:
            missing = {"axis0", "axis1"} - set(getattr(self, kind.value))
            if missing:
                raise ValueError(
                    f"{kind.value} needs parameters for {', '.join(sorted(missing))} (the two "
                    "axes of the 2D mesh)"
                )
        return self

    def link(self, op: CollectiveKind, axis: int) -> LinkParams:
        """Parameters of collective ``op`` on mesh ``axis``.

        Raises :class:`ProfileError` when the profile has no parameters for that axis.
        """
        table: AxisTable = getattr(self, op.value)
        try:
            return table[f"axis{axis}"]
        except KeyError:
            known = ", ".join(sorted(table))
            raise ProfileError(
                f"profile '{self.name}' has no {op.value} parameters for axis {axis} "
                f"(it has {known})"
            ) from None

    def axes(self, op: CollectiveKind) -> tuple[int, ...]:
        """The mesh axes ``op`` has parameters for, ascending."""
        table: AxisTable = getattr(self, op.value)
        return tuple(sorted(int(key.removeprefix("axis")) for key in table))

    def overlaps(self, op: CollectiveKind) -> bool:
        """Whether ``op`` can run while the chip computes (``overlapped``)."""
        return op in self.overlapped

    def content_hash(self) -> str:
        """SHA-256 of the profile's canonical JSON (the name excluded), as ``sha256:<hex>``.

        ``memory_bytes`` is left out: no time depends on it, and a plan that was checked against
        it records the capacity it used (``cluster.memory.capacity_bytes``), which verify
        compares with the profile's. ``tiers`` counts only when set, so profiles without
        tiers keep their hash.
        """
        unset = {f for f in _HASHED_IF_SET if getattr(self, f) is None}
        payload = self.model_dump(mode="json", exclude={"name", *_NOT_HASHED, *unset})
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()


# Profile fields the content hash leaves out (see content_hash).
_NOT_HASHED = ("memory_bytes",)
# Optional profile fields that enter the content hash only when set.
_HASHED_IF_SET = ("tiers",)


# --------------------------------------------------------------------------- catalogs

_REPO_ROOT = Path(__file__).resolve().parents[2]


def catalog_dir(kind: Literal["models", "profiles"]) -> Path:
    """Directory of the shipped ``kind`` files.

    ``$MESHTUNE_MODELS_DIR`` / ``$MESHTUNE_PROFILES_DIR`` override the default, which is the
    ``models/`` or ``profiles/`` folder of the source checkout (editable install) or, for a
    regular install, ``<sys.prefix>/share/meshtune/<kind>`` where the wheel puts them.
    """
    override = os.environ.get(f"MESHTUNE_{kind.upper()}_DIR")
    if override:
        return Path(override)
    checkout = _REPO_ROOT / kind
    if checkout.is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "meshtune" / kind


def catalog_names(kind: Literal["models", "profiles"]) -> list[str]:
    """Sorted stems of the ``*.toml`` files in the ``kind`` catalog."""
    folder = catalog_dir(kind)
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def _resolve(
    name_or_path: str | Path, kind: Literal["models", "profiles"], error: type[MeshtuneError]
) -> Path:
    text = str(name_or_path)
    path = Path(text)
    looks_like_path = text.endswith(".toml") or os.sep in text or "/" in text
    if isinstance(name_or_path, Path) or looks_like_path:
        if not path.is_file():
            raise error(f"{path}: no such file")
        return path
    candidate = catalog_dir(kind) / f"{text}.toml"
    if candidate.is_file():
        return candidate
    known = ", ".join(catalog_names(kind)) or "(none found)"
    singular = kind[:-1]
    raise error(f"unknown {singular} '{text}'; known {kind}: {known}")


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Load a model spec by catalog name (``gpt3``) or by path to a TOML file.

    A :class:`~pathlib.Path`, or a string ending in ``.toml`` or containing a path separator, is
    a file; any other string is a catalog name.
    """
    path = _resolve(name_or_path, "models", SpecError)
    return load_model_file(path, ModelSpec, SpecError, name=path.stem)


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """Load a hardware profile by catalog name (``tpuv4``) or by path to a TOML file."""
    path = _resolve(name_or_path, "profiles", ProfileError)
    return load_model_file(path, HardwareProfile, ProfileError, name=path.stem)
