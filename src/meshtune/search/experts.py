"""Expert and context parallelism as levels of the cluster search: the EP and CP degrees.

Expert parallelism splits a MoE model's routed experts over ``ep`` of the DP replicas
(Lepikhin et al., "GShard", ICLR 2021, §2.2; Megatron-Core's expert-model parallelism inside
data parallelism), so ``ep`` divides both DP and the expert count; each degree is priced by the
step model (:mod:`meshtune.step.moe`: fewer expert weights per chip, four all-to-alls per MoE
block). A dense model, or a profile without all-to-all parameters, has only ``ep = 1``.

Context parallelism (:mod:`meshtune.step.cp`) splits every sequence over ``cp`` ranks of each
replica: ``chips = DP · PP · CP · TP``, searched for long sequences (:func:`context_degrees`).
"""

from __future__ import annotations

import math

from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import divisors
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
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


MIN_CP_TOKENS = 8192
"""The fewest tokens of a sequence a searched context-parallel rank keeps (Llama 3's 128K-token
phase ran CP 16: 8,192 per rank, Llama Team 2024 §3.3.2): below it the attention of a chunk
is too short to hide the ring's step, and TP alone holds the sequence."""


def check_cp(chips: int, seq_len: int, pinned: int | None) -> None:
    """Raise :class:`InfeasibleError` for a pinned CP that does not divide the chips or whose
    2·CP chunks do not divide the sequence (:mod:`meshtune.step.cp`)."""
    if pinned is None or pinned == 1:
        return
    if chips % pinned:
        raise InfeasibleError(f"--cp {pinned} does not divide {chips} chips")
    if seq_len % (2 * pinned):
        raise InfeasibleError(
            f"--cp {pinned}: the sequence of {seq_len} tokens does not split into 2·CP = "
            f"{2 * pinned} equal chunks"
        )


def context_degrees(chips: int, seq_len: int, pinned: int | None) -> tuple[int, ...]:
    """The CP degrees to search, ascending: the ``pinned`` one (:func:`check_cp` first), else 1
    and every divisor c of the chips whose 2·c chunks divide the sequence and leave each rank
    at least :data:`MIN_CP_TOKENS` tokens."""
    if pinned is not None:
        return (pinned,)
    return tuple(
        c
        for c in divisors(chips)
        if c == 1 or (seq_len % (2 * c) == 0 and seq_len // c >= MIN_CP_TOKENS)
    )
