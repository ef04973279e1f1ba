"""The search: phase 2 over algorithm × mesh × configuration (:mod:`~meshtune.search.phase2`),
the padding of uneven sizes (:mod:`~meshtune.search.padding`), the shared mesh-level cache
(:mod:`~meshtune.search.costing`) and the search over DP × PP × v × ZeRO around it
(:mod:`~meshtune.search.levels`), which prices every split with :mod:`meshtune.step`; what
that search knows before it looks at an algorithm is shared between searches
(:mod:`~meshtune.search.space`)."""

from meshtune.search.phase2 import (
    NEAREST_SCAN,
    LayerChoice,
    MeshResult,
    SearchResult,
    best_layer_choice,
    evaluate_mesh,
    flop_utilization,
    layer_choice,
    mesh_problem,
    nearest_feasible,
    priced,
    search,
)

__all__ = [
    "NEAREST_SCAN",
    "LayerChoice",
    "MeshResult",
    "SearchResult",
    "best_layer_choice",
    "evaluate_mesh",
    "flop_utilization",
    "layer_choice",
    "mesh_problem",
    "nearest_feasible",
    "priced",
    "search",
]
