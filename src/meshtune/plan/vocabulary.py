"""A plan file's limits and vocabularies: the schema version, size limits, and the closed sets
every name in a plan belongs to, as annotated types the plan models use
(:mod:`meshtune.plan.models`)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
)

from meshtune.algorithms.registry import REGISTRY
from meshtune.dataflow import (
    Dim,
    Stationary,
    layer_dataflow,
)
from meshtune.model.layers import FcLayer

PLAN_SCHEMA_VERSION: Literal[2] = 2
MAX_TOP = 1000
"""The most candidates ``--top`` lists."""
READABLE_VERSIONS = (1, 2)
AUTO = "auto"

# Sizes above this are refused: far beyond any model, and they keep every number exact.
MAX_DIMENSION = 2**40

Dimension = Annotated[int, Field(gt=0, le=MAX_DIMENSION)]
Knob = Annotated[int, Field(ge=1, le=MAX_DIMENSION)]

# ---- Vocabularies. A plan file is shared input: every string in it that names something is one
# of a closed set, so that no string of a plan reaches generated code, a file path or a
# command line unchecked (free text, e.g. a model's display_name, is only ever shown quoted).

LayerName = Literal["qkv", "attn_out", "mlp_up", "mlp_down"]
"""The FC layers of a block (:func:`meshtune.model.layers.fc_layers`)."""
Tensor = Literal["X", "W", "Y"]
FORMULAS = frozenset(
    op.formula
    for stationary in Stationary
    for transposed in (False, True)
    for op in layer_dataflow(FcLayer("x", 1, 1, 1, None), stationary, transposed).ops
)
"""Every pass formula phase 1 writes (Table 1)."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""A catalog name (a file stem): never a path, never a file name with a suffix."""
KNOB_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_TRANSPOSE = re.compile(r"transpose (qkv|attn_out|mlp_up|mlp_down) output before the residual add")


def catalog_name(value: str) -> str:
    """``value`` if it is a catalog name (see :data:`NAME_PATTERN`), else ``ValueError``.

    A plan names its model and profile by catalog name; a path (``/proc/kmsg``,
    ``../x.toml``) in a plan is refused: files are named on the command line only.
    """
    if not NAME_PATTERN.fullmatch(value) or value.lower().endswith((".toml", ".json")):
        raise ValueError(
            f"{value!r} is not a catalog name (letters, digits, '_', '.', '-'; no path, no "
            "suffix): a plan names its model and profile by catalog name; give a file on the "
            "command line instead (--profile FILE)"
        )
    return value


def _registered(value: str) -> str:
    if value not in REGISTRY:
        raise ValueError(f"algorithm {value!r} is not registered; known: {', '.join(REGISTRY)}")
    return value


def _requested(value: str) -> str:
    return value if value == AUTO else _registered(value)


def _formula(value: str) -> str:
    if value not in FORMULAS:
        raise ValueError(
            f"{value!r} is not a Table 1 formula; known: {', '.join(sorted(FORMULAS))}"
        )
    return value


def _transpose(value: str) -> str:
    if not _TRANSPOSE.fullmatch(value):
        raise ValueError(f"{value!r} is not a transpose phase 1 inserts")
    return value


def _knobs(value: dict[str, int]) -> dict[str, int]:
    for key in value:
        if not KNOB_PATTERN.fullmatch(key):
            raise ValueError(f"{key!r} is not a configuration knob name")
    return value


def _mesh_label(value: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]{0,8}x[1-9][0-9]{0,8}(x[1-9][0-9]{0,8})?", value):
        raise ValueError(f"{value!r} is not a mesh shape like 32x8 or 16x16x4")
    return value


AlgorithmName = Annotated[str, AfterValidator(_registered)]
CatalogName = Annotated[str, AfterValidator(catalog_name)]
KnobConfig = Annotated[dict[str, Knob], AfterValidator(_knobs)]
MeshLabel = Annotated[str, AfterValidator(_mesh_label)]
Sharding = Annotated[list[Dim], Field(min_length=2, max_length=2)]
RequestedAlgorithm = Annotated[str, AfterValidator(_requested)]
Formula = Annotated[str, AfterValidator(_formula)]
Transpose = Annotated[str, AfterValidator(_transpose)]


# --------------------------------------------------------------------------- option sections
# The schema-2 layout of the sections that record the step's options (inputs.levels and
# cluster): their fields are generated from the options record
# (meshtune.plan.options.OptionFields); these say where the file format puts them, what it
# writes of them, and what a file without one means.

LEVELS_FILE_ORDER = (
    "dp",
    "pp",
    "micro_batches",
    "zero1",
    "recompute",
    "zero",
    "vpp",
    "headroom",
    "attention",
    "dropout",
    "grad_overlap",
    "fp32_grads",
    "grad_accumulation",
    "grad_all_reduce",
    "zero3_recompute_gather",
    "cp_comm",
    "schedule",
    "precision",
    "ep",
    "cp",
    "block_overhead_s",
)
"""The keys of ``inputs.levels`` in the schema-2 file order: the levels and the step's
options (:class:`~meshtune.plan.options.OptionFields`; a newer option follows
``block_overhead_s``)."""

LEVELS_DESCRIPTIONS: dict[str, str | None] = {
    "recompute": None,
    "attention": None,
    "block_overhead_s": "Host time per block and micro-batch the GPU waits for (plan --engine), "
    "seconds; 0 in files that predate it.",
}
"""The schema-2 file's descriptions of ``inputs.levels`` options, where not the options'."""

LEVELS_MISSING = {"headroom": 0.0, "fp32_grads": False}
"""What a schema-2 ``inputs.levels`` without these keys means: written before they were
recorded, it was planned with no headroom and operand-width gradients."""

CLUSTER_FILE_ORDER = (
    "dp",
    "pp",
    "micro_batches",
    "micro_batch",
    "stage_blocks",
    "zero1",
    "recompute",
    "zero",
    "vpp",
    "ep",
    "cp",
    "attention",
    "dropout",
    "grad_overlap",
    "fp32_grads",
    "grad_accumulation",
    "grad_all_reduce",
    "zero3_recompute_gather",
    "cp_comm",
    "schedule",
    "precision",
    "block_overhead_s",
    "headroom",
)
"""The first keys of ``cluster`` in the schema-2 file order, up to its last step option (a
newer one follows ``headroom``; the step and its figures follow in their declared order)."""

CLUSTER_MISSING = {"attention": "plain", "fp32_grads": False, "headroom": 0.0}
"""What a schema-2 ``cluster`` without these keys means: written before they were recorded,
it was planned with plain attention, operand-width gradients and no headroom."""

CLUSTER_DESCRIPTIONS: dict[str, str | None] = {"recompute": None, "attention": None}
"""The schema-2 file's descriptions of ``cluster`` options, where not the options'."""
