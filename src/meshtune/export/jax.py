"""JAX: a plan as a standalone ``shard_map`` module (:func:`meshtune.engines.export.export_jax`):
the kernels, the TP mesh, every pass, and the cluster mesh of DP × PP × the TP mesh."""

from __future__ import annotations

from meshtune.engines.export import export_jax as render

NAME = "jax"
TITLE = "JAX"

__all__ = ["NAME", "TITLE", "render"]
