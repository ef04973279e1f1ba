"""JAX: a plan as a standalone ``shard_map`` module
(:func:`meshtune.engines.jax_codegen.export_jax`): the kernels, the TP mesh, every pass, and the
cluster mesh of DP × PP × the TP mesh.

The module runs the plan's FC GeMMs; it has no ring attention and no expert dispatch, so a
plan with CP or EP above 1 gets ``# NOT EXPRESSIBLE`` lines first: its cluster mesh holds one
CP rank's chips (``DP · PP · TP`` of the plan's ``DP · PP · CP · TP``) and the EP all-to-all
is left to the user's model code.
"""

from __future__ import annotations

from meshtune.engines.jax_codegen import export_jax
from meshtune.export.common import plan_split
from meshtune.plan import Plan

NAME = "jax"
TITLE = "JAX"


def render(plan: Plan, source: str) -> str:
    """The plan's JAX module (module docstring), its CP / EP notes first."""
    split = plan_split(plan)
    notes = []
    if split.cp > 1:
        notes.append(
            f"the module has no ring attention: CP {split.cp} is not in CLUSTER_SHAPE, which "
            f"holds the DP x PP x TP chips of one CP rank ({split.chips // split.cp} of "
            f"{split.chips})"
        )
    if split.ep > 1:
        notes.append(
            f"the module has no expert dispatch: EP {split.ep} (the experts shared out over "
            f"{split.ep} of the {split.dp} DP replicas) is the model code's all-to-all"
        )
    head = "".join(f"# NOT EXPRESSIBLE: {note}\n" for note in notes)
    return head + export_jax(plan, source)


__all__ = ["NAME", "TITLE", "render"]
