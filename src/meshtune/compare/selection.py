"""Which algorithms a study runs and how it states their results against the reference.

Shared by :mod:`meshtune.compare.gemm`, :mod:`meshtune.compare.views` and
:mod:`meshtune.compare.cluster`: the selection of registered algorithms (registration order,
duplicates dropped), the speedup convention of every study (``time / reference's time − 1``)
and the one-line reason a study gives when none of its algorithms is feasible. Pure functions;
the reasons come from the studies, never from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import REGISTRY, get_algorithm
from meshtune.errors import MeshtuneError


def selected(algorithms: Sequence[str] | None) -> tuple[Algorithm, ...]:
    """The registered algorithms named (all, in registration order, for ``None``)."""
    if algorithms is None:
        return tuple(REGISTRY.values())
    if not algorithms:
        raise MeshtuneError("no algorithm selected; known algorithms: " + ", ".join(REGISTRY))
    return tuple(dict.fromkeys(get_algorithm(name) for name in algorithms))


def none_feasible(reasons: Sequence[tuple[str, str | None]], where: str) -> str | None:
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
