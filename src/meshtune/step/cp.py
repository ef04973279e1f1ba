"""Context parallelism (ring attention, or an all-gather of K/V): pure cost functions of one
block on one chip.

Context parallelism splits every sequence over ``cp`` ranks (Liu et al., "Ring Attention with
Blockwise Transformers", 2023; Megatron-Core's context parallelism; Llama Team 2024,
arXiv:2407.21783, §3.3.2, CP 16 for the 128K-token phase). Rank r holds 2 of the sequence's
2·cp chunks, r and 2·cp − 1 − r, so that under a causal mask every rank has the same work.
The FC layers, the element-wise work and the activations see ``s / cp`` tokens per sequence
(as if the tokens were split over ``tp · cp`` chips); the attention core of the rank's queries
needs every key and value: the K/V shard of each rank travels around the ring of ``cp`` ranks
in ``cp − 1`` send-recv steps, each overlapped with the attention of the chunk in hand.

Per step and micro-batch: the K/V shard is ``2 · b · (s / cp) · kv_heads · head_dim · e / tp``
bytes (:func:`kv_shard_bytes`; K/V heads split over TP); the backward pass sends the K/V shard
and its gradient, twice as much. A step costs one send-recv (:func:`meshtune.step.comms.p2p_s`,
``t_launch + t_sync + bytes / bw`` on the tier the ring spans); what shows is
``(cp − 1) · max(0, step − attention of one chunk)``, the attention core's time split evenly
over the ``cp`` chunks, the attention slowed while the ring runs on a GPU
(:func:`ring_exposed_s`, :func:`~meshtune.step.comms.overlap_exposed`).
Llama 3 runs CP differently (Llama Team 2024, §3.3.2): every rank first all-gathers the K and
V of the whole sequence, then computes the attention of its local queries, "although the
all-gather communication latency is exposed in the critical path" (the mask, e.g. per
document, is then free to choose); PyTorch's context parallelism offers the same as its
all-gather rotation. With ``comm = "all-gather"`` the forward shows one all-gather of the
``cp`` K/V shards and the backward one all-gather again (the gathered K/V of every block, cp
times the local ones, are assumed not kept) and one reduce-scatter of their gradients, each a
ring collective over the ``cp`` ranks on the tier they span (:func:`ring_s`), not overlapped.
Weight gradients are reduced over the DP × CP ranks (the CP ranks of a replica hold the same
weights). A sliding window (``ModelSpec.sliding_window``) shrinks the attention that hides the
ring but skips no ring step: every K/V shard still travels (conservative when the window is
shorter than a chunk).
"""

from __future__ import annotations

from typing import Literal

from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.step.comms import dp_profiles, overlap_exposed, p2p_s, ring_s
from meshtune.step.work import Work

CpComm = Literal["ring", "all-gather"]
CP_COMMS: tuple[CpComm, ...] = ("ring", "all-gather")


def kv_shard_bytes(
    model: ModelSpec, micro_batch: int, seq_len: int, tp: int, cp: int, bytes_per_element: int
) -> float:
    """One rank's K and V for its ``s / cp`` tokens: ``2·b·(s/cp)·kv_heads·head_dim·e / tp``."""
    tokens = micro_batch * seq_len / cp
    return 2 * tokens * model.kv_heads * model.head_dim * bytes_per_element / tp


def ring_exposed_s(step_s: float, attention_s: float, cp: int, slowdown: float = 0.0) -> float:
    """The ring's time not hidden by the attention core (``attention_s``, all ``cp`` chunks):
    ``(cp − 1) · max(0, step − attention / cp)`` with σ = 0, the ``max`` being
    :func:`~meshtune.step.comms.overlap_exposed` with ``slowdown`` σ; 0 when cp = 1."""
    if cp <= 1:
        return 0.0
    return (cp - 1) * overlap_exposed(step_s, attention_s / cp, slowdown)


def ring_attention_s(
    model: ModelSpec,
    profile: HardwareProfile,
    attention: Work,
    *,
    micro_batch: int,
    seq_len: int,
    tp: int,
    cp: int,
    comm: CpComm = "ring",
) -> tuple[float, float]:
    """(forward, backward) exposed CP time of one block and micro-batch (module docstring), on
    the network tier the ``cp · tp`` chips span; (0, 0) when cp = 1. ``ring``: the forward
    sends the K/V shard, the backward the K/V shard and its gradient, each step a send-recv
    hidden behind a chunk's attention where it can be. ``all-gather``: ``(t_ag, t_ag + t_rs)``
    of the ``cp · shard`` bytes of K/V, exposed."""
    if cp <= 1:
        return 0.0, 0.0
    _, ring = dp_profiles(profile, tp=tp, dp=1, pp=cp)
    shard = kv_shard_bytes(model, micro_batch, seq_len, tp, cp, profile.bytes_per_element)
    if comm == "all-gather":
        gather = ring_s(ring, CollectiveKind.ALL_GATHER, cp, cp * shard)
        return gather, gather + ring_s(ring, CollectiveKind.REDUCE_SCATTER, cp, cp * shard)
    slowdown = profile.overlap_slowdown
    forward = ring_exposed_s(p2p_s(ring, cp, shard), attention.forward_s(profile), cp, slowdown)
    backward = ring_exposed_s(
        p2p_s(ring, cp, 2 * shard), attention.backward_s(profile), cp, slowdown
    )
    return forward, backward
