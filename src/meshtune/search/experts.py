"""Expert parallelism as a level of the cluster search: the EP degrees a split may use.

Expert parallelism splits a MoE model's routed experts over ``ep`` of the DP replicas
(Lepikhin et al., "GShard", ICLR 2021, §2.2; Megatron-Core's expert-model parallelism inside
data parallelism), so ``ep`` divides both DP and the expert count; each degree is priced by the
step model (:mod:`meshtune.step.moe`: fewer expert weights per chip, four all-to-alls per MoE
block). A dense model, or a profile without all-to-all parameters, has only ``ep = 1``.
"""

from __future__ import annotations

import math

from meshtune.errors import InfeasibleError
from meshtune.mesh import divisors
from meshtune.specs import HardwareProfile, ModelSpec
from meshtune.step.moe import has_all_to_all


def check_ep(model: ModelSpec, profile: HardwareProfile, pinned: int | None) -> None:
    """Raise :class:`InfeasibleError` for a pinned EP above 1 on a dense model, on a profile
    that cannot price the all-to-all, or that does not divide the expert count."""
    if pinned is None or pinned == 1:
        return
    if model.moe is None:
        raise InfeasibleError(f"--ep {pinned}: model '{model.name}' has no experts")
    if not has_all_to_all(profile):
        raise InfeasibleError(
            f"--ep {pinned}: profile '{profile.name}' has no all_to_all parameters to price "
            "the token dispatch"
        )
    if model.moe.experts % pinned:
        raise InfeasibleError(
            f"--ep {pinned} does not divide the {model.moe.experts} experts of {model.name}"
        )


def expert_degrees(
    model: ModelSpec, profile: HardwareProfile, dp: int, pinned: int | None
) -> tuple[int, ...]:
    """The EP degrees of a split with ``dp`` replicas, ascending: every common divisor of DP
    and the expert count (only 1 for a dense model or a profile without ``all_to_all``), or
    the ``pinned`` one where it divides both (none otherwise; :func:`check_ep` first)."""
    if model.moe is None or not has_all_to_all(profile):
        return (1,) if pinned in (None, 1) else ()
    found = divisors(math.gcd(dp, model.moe.experts))
    return found if pinned is None else tuple(d for d in found if d == pinned)
