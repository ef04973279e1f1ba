"""The non-FC work of one transformer block on one chip, for end-to-end step estimates (§4.4).

The 2D GeMM algorithms differ only in the FC layers; every other layer of a block runs locally
on each chip without communication (§4.4, Korthikanti et al.), on the chip's share of the
activations. The activations of a block are split over all P chips (the 2D sharding of X and
Y), so each chip does 1/P of the block's non-FC work. With T = batch · seq tokens, h the model
width, F the MLP's inner width, H query heads of width d, e bytes per element, one training step
(forward + backward) of one block costs per chip:

* attention core, two GeMMs per head and sequence (QKᵀ: s × s × d, softmax · V: s × d × s),
  compute-bound, backward twice the forward:
  ``attention_flops = 3 · 4 · batch · H · s² · d / P``
* memory-bound element-wise work, bytes moved through HBM (forward reads and writes each
  element once; backward reads the saved input and the incoming gradient and writes one
  gradient):

  - softmax over the materialised scores: ``5 · e · batch · H · s² / P``
  - two layer norms over the residual stream: ``2 · 5 · e · T · h / P``
  - two residual adds (forward: two reads, one write; backward: the same):
    ``2 · 6 · e · T · h / P``
  - the activation function, GELU: ``5 · e · T · F / P``; SwiGLU (gate and up in, one out):
    ``8 · e · T · F / P``

``time = attention_flops / effective FLOP/s + bytes / HBM bandwidth``. The paper measures these
layers on a real TPU instead (§4.4); this is the analytical counterpart, with no causal-mask
savings, no fused attention and no dropout.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.errors import ProfileError
from meshtune.specs import HardwareProfile, ModelSpec


@dataclass(frozen=True)
class NonFcWork:
    """One block's non-FC work on one chip, forward + backward (see the module docstring)."""

    attention_flops: float
    memory_bytes: float
    compute_s: float
    memory_s: float

    @property
    def total_s(self) -> float:
        """compute_s + memory_s."""
        return self.compute_s + self.memory_s


def nonfc_block(
    model: ModelSpec, batch: int, seq_len: int, chips: int, profile: HardwareProfile
) -> NonFcWork:
    """Per-chip non-FC work of one block of ``model`` for ``batch`` sequences of ``seq_len``.

    Formulas in the module docstring. Raises :class:`ProfileError` when the profile has no
    ``hbm_bytes_per_s``.
    """
    if profile.hbm_bytes_per_s is None:
        raise ProfileError(
            f"profile '{profile.name}' has no hbm_bytes_per_s, which the non-FC (memory-bound) "
            "part of an end-to-end estimate needs"
        )
    e = profile.bytes_per_element
    tokens = batch * seq_len
    scores = batch * model.heads * seq_len * seq_len
    attention_flops = 3 * 4 * scores * model.head_dim / chips
    activation = 8 if model.mlp == "swiglu" else 5
    memory_bytes = (
        e
        * (
            5 * scores
            + 2 * 5 * tokens * model.hidden
            + 2 * 6 * tokens * model.hidden
            + activation * tokens * model.ffn_hidden
        )
        / chips
    )
    return NonFcWork(
        attention_flops=attention_flops,
        memory_bytes=memory_bytes,
        compute_s=attention_flops / profile.effective_flops_per_s,
        memory_s=memory_bytes / profile.hbm_bytes_per_s,
    )
