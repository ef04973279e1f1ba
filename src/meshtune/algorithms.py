"""The algorithm registry: every distributed GeMM algorithm meshtune can plan, verify and compare.

One entry per algorithm, each a cost module in :mod:`meshtune.cost`, an executor module in
:mod:`meshtune.executor` and the line below. Nothing else in meshtune names an algorithm: the
search, the plan, verify, ``gemm``, ``compare`` and the reports iterate over this registry, and
one registry-wide test runs every entry through the same oracle and traffic checks.
"""

from __future__ import annotations

from meshtune.algorithm import Algorithm
from meshtune.cost import meshslice
from meshtune.errors import MeshtuneError

DEFAULT_ALGORITHM = "meshslice"

_REGISTERED: tuple[Algorithm, ...] = (
    Algorithm(
        name="meshslice",
        title="MeshSlice",
        citation="Nam et al., ISCA 2025, §3.1 (Figure 5, Algorithm 2)",
        summary="Partial AG/RdS on S slices in both directions, overlapped with partial GeMMs.",
        configs=meshslice.meshslice_configs,
        comms=meshslice.meshslice_comms,
        cost=meshslice.meshslice_cost,
        size_units=meshslice.meshslice_units,
        executor="meshtune.executor.meshslice:execute",
    ),
    Algorithm(
        name="collective",
        title="Collective",
        citation="Nam et al., ISCA 2025, §2.3.4 (Figure 2b); GSPMD-style AG/RdS 2D GeMM",
        summary="One AG/RdS per direction, then one GeMM: no overlap (MeshSlice with S = 1).",
        configs=meshslice.collective_configs,
        comms=meshslice.meshslice_comms,
        cost=meshslice.meshslice_cost,
        size_units=meshslice.collective_units,
        executor="meshtune.executor.meshslice:execute",
    ),
)

REGISTRY: dict[str, Algorithm] = {a.name: a for a in _REGISTERED}


def algorithm_names() -> tuple[str, ...]:
    """Registered names, in registration order."""
    return tuple(REGISTRY)


def get_algorithm(name: str) -> Algorithm:
    """The algorithm called ``name``; :class:`MeshtuneError` naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(REGISTRY)
        raise MeshtuneError(f"unknown algorithm '{name}'; known algorithms: {known}") from None
