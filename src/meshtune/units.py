"""Units and limits of the input data: the frozen model configuration every record uses, and the
annotated types of seconds, bytes per second, FLOP per second and bytes, with their bounds (SI
base units inside; conversions only for display)."""

from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
)

FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)
"""The configuration of every meshtune record model: unknown fields refused, instances
immutable (hashable), schema built on first use (start-up time)."""

MAX_DIMENSION = 2**40
"""Largest model dimension (width, count or length) accepted: far above any real model, small
enough that the planner's products of a few dimensions stay finite and its searches fast."""

Dimension = Annotated[int, Field(strict=True, gt=0, le=MAX_DIMENSION)]
"""A positive integer model dimension: an integer in the file (not "8192", not 8192.0)."""

# Physically plausible ranges of a hardware profile's numbers. Every value must be a finite
# number inside them: they lie orders of magnitude beyond any chip or network built, and are
# narrow enough that every time the cost model derives from them (sums of products of model
# dimensions up to MAX_DIMENSION, divided by a rate) stays a finite float, never inf or NaN.
MAX_LATENCY_S = 1.0
"""t_launch, t_sync and the per-GeMM overhead lie in [0, 1 s] (real ones: microseconds)."""
MIN_BANDWIDTH_BYTES_PER_S = 1e3
MAX_BANDWIDTH_BYTES_PER_S = 1e15
"""A link or a memory moves 1 kB/s to 1 PB/s (real ones: GB/s to TB/s)."""
MIN_FLOPS_PER_S = 1e6
MAX_FLOPS_PER_S = 1e18
"""A chip computes 1 MFLOP/s to 1 EFLOP/s (real ones: TFLOP/s to PFLOP/s)."""
MAX_MEMORY_BYTES = 1e15
"""A chip holds at most 1 PB (real ones: tens to hundreds of GB)."""
MIN_EFFICIENCY = 1e-6
"""A GeMM runs faster than a millionth of the effective FLOP/s: efficiency in (1e-6, 1]."""
MIN_POINT_FLOPS = 1.0
"""An efficiency point measures a GeMM of at least one FLOP."""

Latency = Annotated[float, Field(ge=0, le=MAX_LATENCY_S, allow_inf_nan=False)]
"""Seconds in [0, :data:`MAX_LATENCY_S`]."""
Bandwidth = Annotated[
    float,
    Field(ge=MIN_BANDWIDTH_BYTES_PER_S, le=MAX_BANDWIDTH_BYTES_PER_S, allow_inf_nan=False),
]
"""Bytes per second in [:data:`MIN_BANDWIDTH_BYTES_PER_S`, :data:`MAX_BANDWIDTH_BYTES_PER_S`]."""
FlopRate = Annotated[float, Field(ge=MIN_FLOPS_PER_S, le=MAX_FLOPS_PER_S, allow_inf_nan=False)]
"""FLOP per second in [:data:`MIN_FLOPS_PER_S`, :data:`MAX_FLOPS_PER_S`]."""
MemoryBytes = Annotated[float, Field(gt=0, le=MAX_MEMORY_BYTES, allow_inf_nan=False)]
"""Bytes in (0, :data:`MAX_MEMORY_BYTES`]."""


# --------------------------------------------------------------------------- catalogs


def without_none(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``data`` without the ``keys`` whose value is ``None`` (optional fields a dump leaves
    out when unset: a record that does not set them dumps, and hashes, as one whose schema has
    no such field)."""
    for key in keys:
        if key in data and data[key] is None:
            del data[key]
    return data
