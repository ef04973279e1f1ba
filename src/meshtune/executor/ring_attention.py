"""Context parallelism on virtual ranks: causal ring attention, K/V really passed around.

A sequence of ``s`` tokens is cut into ``2·cp`` chunks; rank r holds chunks r and
``2·cp − 1 − r`` (the load-balanced layout of :mod:`meshtune.step.cp`) of Q, K and V
(heads × tokens × width, GQA: K/V heads shared by ``heads / kv_heads`` query heads). In each of
``cp`` steps a rank attends its queries to the K/V shard in hand, under the causal mask of
the tokens' global positions, accumulating with the online softmax (running maximum, sum and
output; Milakov and Gimelshein 2018; FlashAttention §3.1), then passes that shard to rank
r + 1 and receives rank r − 1's: ``cp − 1`` sends in all. The counter is filled from the
arrays each step hands on, never from a formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


@dataclass
class RingCounter:
    """What the ring moved: send-recv steps and the bytes the busiest rank sent."""

    steps: int = 0
    bytes_sent: int = 0


def rank_positions(seq_len: int, cp: int, rank: int) -> NDArray[np.int64]:
    """Global token positions rank ``rank`` holds: chunks ``rank`` and ``2·cp − 1 − rank`` of
    ``2·cp`` (``seq_len`` must be a multiple of 2·cp)."""
    if seq_len % (2 * cp):
        raise ValueError(f"seq_len {seq_len} is not a multiple of 2·cp = {2 * cp}")
    chunk = seq_len // (2 * cp)
    first = np.arange(rank * chunk, (rank + 1) * chunk)
    second = np.arange((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk)
    return np.concatenate([first, second])


def dense_causal_attention(q: Array, k: Array, v: Array) -> Array:
    """The oracle: softmax(Q·Kᵀ/√d + causal mask)·V per query head (heads × s × d; K/V heads
    shared by consecutive query heads)."""
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[2])
    s = q.shape[1]
    scores = np.where(np.tril(np.ones((s, s), dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=2, keepdims=True))
    out: Array = (weights / weights.sum(axis=2, keepdims=True)) @ v
    return out


def ring_attention(
    q: Array, k: Array, v: Array, cp: int, bytes_per_element: int
) -> tuple[Array, RingCounter]:
    """Causal attention of the full sequences ``q, k, v`` (heads × s × d) computed by ``cp``
    ranks as in the module docstring; returns the output in global token order and the
    counter."""
    seq_len = q.shape[1]
    group = q.shape[0] // k.shape[0]
    scale = 1.0 / np.sqrt(q.shape[2])
    positions = [rank_positions(seq_len, cp, r) for r in range(cp)]
    queries = [q[:, p] for p in positions]
    in_hand = [(k[:, p], v[:, p], p) for p in positions]  # each rank's own K/V shard first
    best = [np.full((q.shape[0], len(p), 1), -np.inf) for p in positions]
    total = [np.zeros((q.shape[0], len(p), 1)) for p in positions]
    acc = [np.zeros((q.shape[0], len(p), v.shape[2])) for p in positions]
    counter = RingCounter()
    for step in range(cp):
        for r in range(cp):
            keys, values, kpos = in_hand[r]
            keys, values = np.repeat(keys, group, axis=0), np.repeat(values, group, axis=0)
            scores = queries[r] @ keys.transpose(0, 2, 1) * scale
            visible = positions[r][:, None] >= kpos[None, :]
            scores = np.where(visible, scores, -np.inf)
            peak = np.maximum(best[r], scores.max(axis=2, keepdims=True))
            safe = np.where(np.isfinite(peak), peak, 0.0)
            weights = np.where(visible, np.exp(scores - safe), 0.0)
            rescale = np.where(np.isfinite(best[r]), np.exp(best[r] - safe), 0.0)
            total[r] = total[r] * rescale + weights.sum(axis=2, keepdims=True)
            acc[r] = acc[r] * rescale + weights @ values
            best[r] = peak
        if step < cp - 1:  # pass the shard in hand to the next rank
            counter.steps += 1
            moved = [(kk.copy(), vv.copy(), pp) for kk, vv, pp in in_hand]
            sent = max(kk.size + vv.size for kk, vv, _ in moved)
            counter.bytes_sent += sent * bytes_per_element
            in_hand = [moved[(r - 1) % cp] for r in range(cp)]
    out = np.zeros_like(q)
    for r in range(cp):
        out[:, positions[r]] = acc[r] / total[r]
    return out, counter
