"""The memory pre-check of the cluster search, factored into the terms splits share.

The search checks every split's memory before any mesh is costed
(:func:`meshtune.step.bounds.fitting_zero`): :func:`~meshtune.step.memory.memory_per_chip`
of one block's FC layers with the ends and no communication buffers. That memory is a sum of
terms that depend on few of the split's numbers (:mod:`meshtune.step.memory` gives the
formulas):

* model state (weights, gradients, optimizer state) and ZeRO-3's gathered block: the block's
  parameters, TP, DP, the blocks a chip holds and the ZeRO stage, not the micro-batches;
* activations: one block's kept bytes of a micro-batch (the micro-batch size alone), spread
  over the blocks × micro-batches in flight and TP;
* logits: the micro-batch size and TP.

:class:`SplitMemory` computes each term once per key that determines it and adds them in
the order :func:`~meshtune.step.memory.memory_per_chip` does, so its answer is the same
:class:`~meshtune.step.memory.MemoryBreakdown`, bit for bit (a test checks it against
``memory_per_chip``); ``memory_per_chip`` stays the definition. :meth:`SplitMemory.totals`
gives the totals of many splits at once from NumPy arrays, with the same operations in the
same order (the same floats, a test checks them against :meth:`SplitMemory.memory`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from meshtune.cost.compute import DEFAULT_PRECISION, Precision
from meshtune.cost.vector import EXACT_INTEGER
from meshtune.model.spec import ModelSpec
from meshtune.ranks import ranks
from meshtune.step.memory import (
    MemoryBreakdown,
    Recompute,
    _block_bytes,
    _spread,
    in_flight,
    state_bytes,
)
from meshtune.step.precision import optimizer_bytes_per_param
from meshtune.step.work import LOGIT_BYTES, AttentionKind

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

State = tuple[float, float, float, float]  # weights, gradients, optimizer state, buffers


class SplitMemory:
    """:func:`~meshtune.step.memory.memory_per_chip` with ``ends=True`` and the defaults of
    every other optional argument (no buffers, weights and tokens over all TP chips, no MoE
    parameters, gradients at the operand width) for one model, sequence length, operand width,
    recompute mode, attention kernel, precision and number of model copies, from cached
    terms (module docstring)."""

    def __init__(
        self,
        model: ModelSpec,
        *,
        seq_len: int,
        bytes_per_element: int,
        recompute: Recompute,
        attention: AttentionKind = "plain",
        precision: Precision = DEFAULT_PRECISION,
        copies: int = 1,
    ) -> None:
        self.model, self.seq_len, self.e = model, seq_len, bytes_per_element
        self.recompute, self.attention, self.precision = recompute, attention, precision
        self.copies = copies
        self.optimizer_bytes = optimizer_bytes_per_param(precision)
        self.blocks: dict[int, tuple[float, float, float, float]] = {}
        """micro-batch size → one block's kept bytes (``memory._block_bytes``)."""
        self.states: dict[tuple[int, int, int, int, int, int], State] = {}
        """(block parameters, TP, DP, blocks held, ZeRO stage, end shares) → (weights,
        gradients, optimizer state, buffers) of one chip."""

    def block_bytes(self, micro_batch: int) -> tuple[float, float, float, float]:
        """One block's kept bytes of one micro-batch and their parts (cached)."""
        found = self.blocks.get(micro_batch)
        if found is None:
            found = _block_bytes(
                self.model,
                micro_batch,
                self.seq_len,
                self.e,
                self.recompute,
                self.attention,
                self.precision,
            )
            self.blocks[micro_batch] = found
        return found

    def activations(self, micro_batch: int, tp: int, blocks: float) -> float:
        """Activation bytes per chip of ``blocks`` blocks × micro-batches in flight
        (:func:`~meshtune.step.memory.activation_bytes`)."""
        return _spread(self.block_bytes(micro_batch), blocks, tp, tp)

    def state(self, block_params: int, tp: int, dp: int, held: int, zero: int, ends: int) -> State:
        """(weights, gradients, optimizer state, buffers) of a chip holding ``held`` blocks of
        ``block_params`` parameters and ``ends`` embeddings or LM heads, over TP (cached)."""
        key = (block_params, tp, dp, held, zero, ends)
        found = self.states.get(key)
        if found is None:
            found = self._state(block_params, tp, dp, held, zero, ends)
            self.states[key] = found
        return found

    def _state(self, block_params: Any, tp: Any, dp: Any, held: Any, zero: int, ends: Any) -> Any:
        """:meth:`state`, computed: plain arithmetic, so that the split numbers may be ints or
        NumPy arrays of them (:meth:`totals`)."""
        e = self.e
        block = block_params / tp + 0.0
        experts = state_bytes(held * 0.0, e, dp, zero, None, self.optimizer_bytes)
        end_params = self.model.vocab * self.model.hidden / tp
        buffers = 0.0 + 2 * (block + 0.0) * e if zero >= 3 else 0.0
        weights, gradients, optimizer = state_bytes(
            held * block + ends * end_params, e, dp, zero, None, self.optimizer_bytes
        )
        return (weights + experts[0], gradients + experts[1], optimizer + experts[2], buffers)

    def logits(self, micro_batch: int, tp: int) -> float:
        """Logit bytes per chip of the last stage: fp32 logits of one micro-batch over TP."""
        return LOGIT_BYTES * micro_batch * self.seq_len * self.model.vocab / tp

    def _logits(self, micro_batch: NDArray[np.int64], tp: NDArray[np.int64]) -> NDArray[np.float64]:
        """:meth:`logits` of each (micro-batch, TP): as arrays when every product
        ``LOGIT_BYTES · micro · seq · vocab`` is below 2**53 (converted exactly, so the one
        rounded division is Python's), else each distinct pair in Python."""
        import numpy as np  # not at module import: the CLI starts without NumPy

        per = LOGIT_BYTES * self.seq_len * self.model.vocab
        if int(micro_batch.max()) * per < EXACT_INTEGER:
            exact: NDArray[np.float64] = (micro_batch * per).astype(np.float64) / tp
            return exact
        top = int(tp.max()) + 1  # (micro-batch, TP) as one number: each pair's logits once
        pairs, which = np.unique(micro_batch * top + tp, return_inverse=True)
        logits = np.array([self.logits(*divmod(key, top)) for key in pairs.tolist()])
        found: NDArray[np.float64] = logits[which.reshape(-1)]
        return found

    def memory(
        self,
        block_params: int,
        *,
        micro_batch: int,
        dp: int,
        pp: int,
        tp: int,
        stage_blocks: int,
        micro_batches: int,
        zero: int,
        vpp: int = 1,
    ) -> MemoryBreakdown:
        """``memory_per_chip`` of the class docstring for one block of ``block_params``
        parameters (Σ in·out of its FC layers): the fuller end stage."""
        flight = in_flight(micro_batches, pp, vpp, self.copies)
        logits = self.logits(micro_batch, tp)
        held = self.copies * stage_blocks
        first = self.activations(micro_batch, tp, stage_blocks * flight)
        ends = 2 if pp == 1 or self.copies > 1 else 1  # one chip holds both ends
        weights, gradients, optimizer, buffers = self.state(block_params, tp, dp, held, zero, ends)
        if ends == 2:
            return MemoryBreakdown(weights, gradients, optimizer, first, buffers, logits)
        last = self.activations(micro_batch, tp, stage_blocks * 1.0)
        first_total = weights + gradients + optimizer + first + buffers + 0.0
        last_total = weights + gradients + optimizer + last + buffers + logits
        if last_total > first_total:
            return MemoryBreakdown(weights, gradients, optimizer, last, buffers, logits)
        return MemoryBreakdown(weights, gradients, optimizer, first, buffers, 0.0)

    def totals(
        self,
        block_params: NDArray[np.int64],
        *,
        micro_batch: NDArray[np.int64],
        dp: NDArray[np.int64],
        pp: NDArray[np.int64],
        tp: NDArray[np.int64],
        stage_blocks: NDArray[np.int64],
        micro_batches: NDArray[np.int64],
        zero: int,
        vpp: NDArray[np.int64],
    ) -> NDArray[np.float64]:
        """``memory(...).total_bytes`` of many splits, one per element of the arrays (one ZeRO
        stage): the terms of :meth:`memory` by the same operations in the same order, so each
        total is the same float (the logits, whose product can pass 2**53, divided in Python
        as :meth:`memory` does)."""
        import numpy as np  # not at module import: the CLI starts without NumPy

        interleave = np.where(vpp > 1, 1.0 + (pp - 1) / (pp * vpp), 1.0)
        flight = np.minimum(micro_batches, pp) * interleave if self.copies == 1 else pp + 1
        logits = self._logits(micro_batch, tp)
        sizes, which = ranks(micro_batch)
        table = np.array([self.block_bytes(int(b)) for b in sizes])
        per_block = (table[which, 0], table[which, 1], table[which, 2], table[which, 3])
        first = _spread(per_block, stage_blocks * flight, tp, tp)  # type: ignore[arg-type]
        ends = np.where((pp == 1) | (self.copies > 1), 2, 1)
        weights, gradients, optimizer, buffers = self._state(
            block_params, tp, dp, self.copies * stage_blocks, zero, ends
        )
        last = _spread(per_block, stage_blocks * 1.0, tp, tp)  # type: ignore[arg-type]
        first_total = weights + gradients + optimizer + first + buffers + 0.0
        last_total = weights + gradients + optimizer + last + buffers + logits
        both = weights + gradients + optimizer + first + buffers + logits  # one chip, both ends
        total: NDArray[np.float64] = np.where(
            ends == 2, both, np.where(last_total > first_total, last_total, first_total)
        )
        return total
