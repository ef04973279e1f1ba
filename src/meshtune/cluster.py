"""The whole cluster, as one import: the search over DP × PP × v × ZeRO around the mesh
(:mod:`meshtune.search.levels`), one split (:mod:`meshtune.search.split`) and the network
levels (:mod:`meshtune.cost.tiers`). The step itself is :mod:`meshtune.step`."""

from meshtune.cost.tiers import level_axis, mesh_profile, tier_profile
from meshtune.search.costing import MeshLevel
from meshtune.search.levels import ClusterResult, search_cluster
from meshtune.search.padding import padded_block, padded_layer, padding_waste
from meshtune.search.split import (
    DEFAULT_HEADROOM,
    ClusterCandidate,
    ClusterOptions,
    cluster_candidate,
    over_capacity,
    step_flops,
)
from meshtune.step.pipeline import bubble_fraction

__all__ = [
    "DEFAULT_HEADROOM",
    "ClusterCandidate",
    "ClusterOptions",
    "ClusterResult",
    "MeshLevel",
    "bubble_fraction",
    "cluster_candidate",
    "level_axis",
    "mesh_profile",
    "over_capacity",
    "padded_block",
    "padded_layer",
    "padding_waste",
    "search_cluster",
    "step_flops",
    "tier_profile",
]
