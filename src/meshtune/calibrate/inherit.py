"""What a calibrated profile inherits from its ``--base`` profile, and the record of it.

Benchmark logs measure collectives (and, with GeMM timings, compute); they never measure a
chip's memory capacity or HBM bandwidth, the network tiers of a cluster the logs did not cover,
which collectives overlap with compute and how much a collective slows the compute beside it,
whether links are full duplex, the all-to-all
parameters, the FP8 GeMM rates, or extra mesh axes (``axis2`` …). Every such field the
base profile has is carried into the calibrated profile unchanged, with the provenance
``Origin(kind="base", detail="from base profile '<name>'")``, so that a profile calibrated from
one all-reduce log plans the same cluster as its base, only with the measured links.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from meshtune.hardware.calibration import Origin
from meshtune.hardware.links import CollectiveKind, LinkParams
from meshtune.hardware.profile import HardwareProfile

CARRIED = (
    "memory_bytes",
    "hbm_bytes_per_s",
    "tiers",
    "overlapped",
    "overlap_slowdown",
    "full_duplex",
    "all_to_all",
    "fp8",
)
"""Optional profile fields no benchmark log measures (the GeMM curve is handled with compute:
GeMM logs can measure it; an all-to-all log is fitted into the calibration record, not yet
into ``all_to_all``, which is carried from the base; the FP8 rates, as GeMM logs are fitted
at one operand type)."""


def base_origin(base: HardwareProfile) -> Origin:
    """The provenance of a value taken from ``base``."""
    return Origin(kind="base", detail=f"from base profile '{base.name}'")


def carried_fields(base: HardwareProfile | None, origins: dict[str, Origin]) -> dict[str, Any]:
    """The :data:`CARRIED` fields ``base`` sets, recorded in ``origins``; without a base every
    collective kind overlaps with compute (the paper's simulated setup, §3.2.2)."""
    if base is None:
        return {"overlapped": list(CollectiveKind)}
    fields: dict[str, Any] = {}
    for field in CARRIED:
        value = getattr(base, field)
        if value is None:
            continue
        fields[field] = list(value) if isinstance(value, list) else value
        origins[field] = base_origin(base)
    return fields


def extra_axes(
    base: HardwareProfile | None, origins: dict[str, Origin]
) -> dict[str, dict[str, LinkParams]]:
    """Per collective kind, the base's link tables beyond axis0 / axis1 (``axis2`` …, depth or
    network axes) that no 2D fit measures, recorded in ``origins``."""
    if base is None:
        return {}
    tables: dict[str, dict[str, LinkParams]] = {}
    for kind in CollectiveKind:
        for axis in base.axes(kind):
            if axis in (0, 1):
                continue
            key = f"axis{axis}"
            tables.setdefault(kind.value, {})[key] = base.link(kind, axis)
            origins[f"{kind.value}.{key}"] = base_origin(base)
    return tables


def provenance_lines(origins: Mapping[str, Origin], base: HardwareProfile | None) -> list[str]:
    """Two ``sources`` lines: what the logs measured, and what came from the base profile."""
    measured = [f for f, o in origins.items() if o.kind == "fit"]
    inherited = [f for f, o in origins.items() if o.kind == "base"]
    lines = [f"measured from the logs: {', '.join(measured) or 'nothing'}"]
    if base is not None:
        lines.append(
            f"inherited from base profile '{base.name}': {', '.join(inherited) or 'nothing'}"
        )
    return lines
