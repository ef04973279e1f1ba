"""Units as logs spell them: time units, element widths, and byte sizes such as ``512KiB``."""

from __future__ import annotations

import math
import re

TIME_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
}
"""Seconds per time unit, as the tools spell them."""


BYTES_PER_ELEMENT = {
    "fp8": 1,
    "e4m3": 1,
    "e5m2": 1,
    "int8": 1,
    "uint8": 1,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "half": 2,
    "float16": 2,
    "fp32": 4,
    "tf32": 4,
    "float": 4,
    "float32": 4,
    "int32": 4,
    "int": 4,
    "fp64": 8,
    "double": 8,
    "float64": 8,
    "int64": 8,
}
"""Width of the element types logs name (GeMM dtypes, nccl-tests ``type``)."""


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?$", re.IGNORECASE)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> float | None:
    """Bytes in ``8KB``, ``1 MiB``, ``512M`` or ``4096`` (binary multiples), else ``None``
    (also for a number too large to be finite)."""
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    value = float(match.group(1)) * _UNIT[match.group(2).upper()]
    return value if math.isfinite(value) else None


def format_bytes(value: float) -> str:
    """``value`` bytes as B, KiB, MiB or GiB with up to 4 significant digits."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value:.4g} B"
