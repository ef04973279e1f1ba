"""What FP8 training changes in one step beside the FC GeMMs' rate: pure functions.

``--precision fp8`` follows DeepSeek-V3's FP8 mixed-precision framework (DeepSeek-AI 2024,
"DeepSeek-V3 Technical Report", arXiv:2412.19437, §3.3):

* **GeMMs** (§3.3.1, Figure 6): the forward (Fprop), activation-gradient (Dgrad) and
  weight-gradient (Wgrad) GeMMs of every linear layer run in FP8, dense and expert FC layers
  and MLA's up projections alike; the embedding, the output head, the MoE gating (router), the
  normalizations and the attention operators keep their higher precision. The FC GeMMs are
  priced with :func:`meshtune.cost.compute.at_precision`; everything else with the profile.
* **Model state** (§3.3.1, §3.3.3 "Low-precision optimizer states"): master weights and weight
  gradients stay fp32; AdamW's first and second moments are kept in BF16, so the optimizer
  state is ``4 + 2 + 2 = 8`` bytes per parameter (:func:`optimizer_bytes_per_param`; ZeRO's
  mixed precision keeps 12). The working weights keep the profile's operand width (the report
  does not state a separate copy; meshtune keeps the one it always counts).
* **Cached activations** (§3.3.3 "Low-precision activation"): the inputs of the linear layers
  are cached for the backward pass in FP8 with one fp32 scale per 1 × 128 tile (§3.3.2), ``1 +
  4/128`` bytes per element (:data:`FP8_TILE_BYTES`); the input of the linear layer after the
  attention operator in the customized E5M6 format (12 bits, 1.5 bytes); the MLP activation's
  input (SwiGLU's, §3.3.3 (2)) in FP8 and its output recomputed in the backward pass (0
  bytes kept). Attention's Q, K, V and the normalizations' inputs keep the operand width
  (:func:`activation_widths`).
* **MoE communication** (§3.3.3 "Low-precision communication"): the activations dispatched
  to the experts (before the up projection) and the activation gradients dispatched in the
  backward pass (before the down projection) travel in FP8 (with their tile scales); the
  combine all-to-alls, forward and backward, stay in BF16 (:func:`dispatch_widths`).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.cost.compute import Precision

FP8_TILE = 128  # §3.3.2: activations quantized per 1 × 128 tile, one fp32 scale each
FP8_TILE_BYTES = 1 + 4 / FP8_TILE  # one FP8 byte per element and the tile's fp32 scale
E5M6_BYTES = 12 / 8  # §3.3.3 (1): the attention output, cached in a 12-bit format
MASTER_WEIGHT_BYTES = 4  # fp32 master weights (§3.3.1, ZeRO §3.1)
MOMENT_BYTES = {"bf16": 4, "fp8": 2}  # AdamW's moments: fp32 (ZeRO §3.1), BF16 (§3.3.3)


def optimizer_bytes_per_param(precision: Precision) -> int:
    """Optimizer state bytes per parameter: fp32 master weight and two AdamW moments,
    ``4 + 2·moment``: 12 in bf16 training (ZeRO §3.1's K), 8 in FP8 training (BF16 moments,
    DeepSeek-V3 §3.3.3)."""
    return MASTER_WEIGHT_BYTES + 2 * MOMENT_BYTES[precision]


@dataclass(frozen=True)
class ActivationWidths:
    """Bytes per element of the activations a block caches for its backward pass that FP8
    training narrows: ``fc_input`` (the inputs of the QKV and MLP-up layers, h wide),
    ``attention_output`` (the input of the attention-output layer), ``activation_input``
    (the MLP activation's input, the up layer's output) and ``activation_output`` (its
    output, the down layer's input)."""

    fc_input: float
    attention_output: float
    activation_input: float
    activation_output: float


def activation_widths(precision: Precision, bytes_per_element: int) -> ActivationWidths:
    """The widths of the module docstring: all ``e`` in bf16; in FP8 ``FP8_TILE_BYTES``,
    ``E5M6_BYTES``, ``FP8_TILE_BYTES`` and 0 (recomputed) (DeepSeek-V3 §3.3.3)."""
    e = float(bytes_per_element)
    if precision == "bf16":
        return ActivationWidths(e, e, e, e)
    return ActivationWidths(FP8_TILE_BYTES, E5M6_BYTES, FP8_TILE_BYTES, 0.0)


def dispatch_widths(precision: Precision, bytes_per_element: int) -> tuple[float, float]:
    """(dispatch, combine) bytes per element of the MoE all-to-alls, forward and backward
    alike: ``(e, e)`` in bf16, ``(FP8_TILE_BYTES, e)`` in FP8 (DeepSeek-V3 §3.3.3)."""
    e = float(bytes_per_element)
    return (e if precision == "bf16" else FP8_TILE_BYTES), e
