"""Expert parallelism on virtual chips: a MoE layer's token dispatch and combine, really moved.

``ep`` ranks (each one DP replica; Lepikhin et al., "GShard", ICLR 2021, §2.2 and Algorithm 1)
hold their own tokens, the router (replicated) and ``experts / ep`` consecutive experts each
(rank q holds experts ``q·E/ep … (q+1)·E/ep − 1``). A rank routes each of its tokens to the
``top_k`` experts of largest router logit (ties to the lower expert), with gates the softmax of
those logits (Mixtral's rule; Jiang et al. 2024, §2.1), and places each copy in a
``capacity``-row buffer of its expert, tokens in order; copies past an expert's capacity are
dropped (they contribute nothing, GShard's overflow rule). The dispatch is an all-to-all of those
buffers: in round s = 1 … ep − 1 each rank r sends rank (r + s) mod ep the buffers of that rank's
experts (pairwise exchange; the rank's own share never leaves it). Each rank runs its experts on
the rows it received (zero rows of unused capacity give zero, the expert MLP having no bias),
the combine sends the outputs back the same way, and each rank sums its tokens' gated expert
outputs and its shared experts' outputs.

The counters (:class:`AllToAllCounter`) are filled from the buffers each round hands to another
rank, never from a formula: all-to-alls launched, rounds, and the bytes the busiest rank sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


@dataclass
class AllToAllCounter:
    """What the all-to-alls moved: launches, rounds, bytes sent by the busiest rank."""

    launches: int = 0
    rounds: int = 0
    bytes_sent: int = 0


@dataclass(frozen=True)
class Experts:
    """A MoE layer's weights: ``router`` (h × E), per expert ``up`` (E × h × 2f: gate then up,
    SwiGLU) and ``down`` (E × f × h), and the shared experts' (S × h × 2f_s, S × f_s × h)."""

    router: Array
    up: Array
    down: Array
    shared_up: Array = field(default_factory=lambda: np.zeros((0, 0, 0)))
    shared_down: Array = field(default_factory=lambda: np.zeros((0, 0, 0)))

    @property
    def count(self) -> int:
        """Routed experts E."""
        return int(self.up.shape[0])


def _swiglu(x: Array, up: Array, down: Array) -> Array:
    """``(silu(x·W_gate) ⊙ x·W_up) · W_down`` with ``up = [W_gate | W_up]``."""
    width = up.shape[1] // 2
    projected = x @ up
    gate, value = projected[:, :width], projected[:, width:]
    return ((gate / (1.0 + np.exp(-gate))) * value) @ down


def route(x: Array, router: Array, top_k: int) -> tuple[NDArray[np.int64], Array]:
    """(experts, gates) of each token (module docstring): ``experts`` tokens × top_k, highest
    logit first, ties to the lower expert; ``gates`` the softmax of their logits."""
    logits = x @ router
    order = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    chosen = np.take_along_axis(logits, order, axis=1)
    weights = np.exp(chosen - chosen.max(axis=1, keepdims=True))
    return order.astype(np.int64), weights / weights.sum(axis=1, keepdims=True)


def dense_moe(x: Array, experts: Experts, top_k: int, capacity: int) -> Array:
    """The oracle: one rank's MoE output computed densely, token by token, with the same
    routing and capacity rule (a copy past its expert's ``capacity`` contributes nothing)."""
    chosen, gates = route(x, experts.router, top_k)
    used = np.zeros(experts.count, dtype=np.int64)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for slot in range(top_k):
            e = int(chosen[t, slot])
            if used[e] < capacity:
                used[e] += 1
                row = x[t : t + 1]
                out[t] += gates[t, slot] * _swiglu(row, experts.up[e], experts.down[e])[0]
    for s in range(experts.shared_up.shape[0]):
        out += _swiglu(x, experts.shared_up[s], experts.shared_down[s])
    return out


def _all_to_all(
    buffers: list[Array], counter: AllToAllCounter, bytes_per_element: int
) -> list[Array]:
    """Pairwise exchange of ``buffers[r]`` (E × capacity × h on rank r, split by owner): rank q
    ends with the rows of its experts from every rank, ``ep × E/ep × capacity × h``."""
    ep = len(buffers)
    per = buffers[0].shape[0] // ep
    received = [np.zeros((ep, per, *buffers[0].shape[1:])) for _ in range(ep)]
    for r in range(ep):  # the own share stays on the rank
        received[r][r] = buffers[r][r * per : (r + 1) * per]
    counter.launches += 1
    sent = [0] * ep
    for s in range(1, ep):
        counter.rounds += 1
        for r in range(ep):
            q = (r + s) % ep
            piece = buffers[r][q * per : (q + 1) * per].copy()  # what travels r -> q
            received[q][r] = piece
            sent[r] += piece.size * bytes_per_element
    counter.bytes_sent += max(sent)
    return received


def expert_parallel_moe(
    x: Array,
    experts: Experts,
    *,
    top_k: int,
    capacity: int,
    bytes_per_element: int,
) -> tuple[Array, AllToAllCounter]:
    """The MoE layer of the module docstring on ``ep = x.shape[0]`` ranks (``x``: ep × T × h,
    rank r's tokens ``x[r]``); returns (outputs ep × T × h, the all-to-all counters).

    Raises ``ValueError`` unless ``ep`` divides the experts.
    """
    ep, tokens, hidden = x.shape
    count = experts.count
    if count % ep:
        raise ValueError(f"ep {ep} does not divide {count} experts")
    per = count // ep
    counter = AllToAllCounter()
    buffers = [np.zeros((count, capacity, hidden)) for _ in range(ep)]
    places: list[list[tuple[int, int, int, float]]] = [[] for _ in range(ep)]
    for r in range(ep):
        chosen, gates = route(x[r], experts.router, top_k)
        used = np.zeros(count, dtype=np.int64)
        for t in range(tokens):
            for slot in range(top_k):
                e = int(chosen[t, slot])
                if used[e] < capacity:
                    buffers[r][e, used[e]] = x[r, t]
                    places[r].append((t, e, int(used[e]), float(gates[t, slot])))
                    used[e] += 1
    received = _all_to_all(buffers, counter, bytes_per_element)
    outputs = []
    for q in range(ep):  # rank q runs its experts on every source rank's rows
        rows = received[q]  # ep × per × capacity × h
        done = np.zeros_like(rows)
        for local in range(per):
            e = q * per + local
            flat = rows[:, local].reshape(ep * capacity, hidden)
            done[:, local] = _swiglu(flat, experts.up[e], experts.down[e]).reshape(
                ep, capacity, hidden
            )
        outputs.append(np.concatenate(list(done), axis=0).reshape(count, capacity, hidden))
    # the combine: rank q returns to rank r the outputs of r's rows (the same pairwise rounds;
    # outputs[q] is ordered by source rank as the dispatch buffers are by owner)
    back = _all_to_all(outputs, counter, bytes_per_element)
    y = np.zeros_like(x)
    for r in range(ep):
        results = np.concatenate(list(back[r]), axis=0)  # E × capacity × h, expert order
        for t, e, row, gate in places[r]:
            y[r, t] += gate * results[e, row]
        for s in range(experts.shared_up.shape[0]):
            y[r] += _swiglu(x[r], experts.shared_up[s], experts.shared_down[s])
    return y, counter
