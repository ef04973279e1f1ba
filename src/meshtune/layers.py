"""From a model spec to the FC GeMMs of one transformer block.

Each FC layer computes ``Y = X W`` with ``X`` of shape (tokens × in), ``W`` (in × out) and ``Y``
(tokens × out), where tokens = batch × sequence (the 4D activation (B, S, H, D) reshaped to
(B·S, H·D), MeshSlice §3.2.1 "Sharding"). A block has four FC layers (§4.4): the fused QKV
projection, the attention output projection, the MLP up projection (gate and up fused for
SwiGLU) and the MLP down projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.specs import ModelSpec


@dataclass(frozen=True)
class FcLayer:
    """One FC layer ``Y = X W`` of a transformer block.

    ``fed_by`` names the FC layer whose output reaches this layer's input through non-FC ops
    only (attention, activation), so that its sharding layout carries over; ``None`` means the
    input comes from the residual stream (after a layer norm).
    """

    name: str
    tokens: int
    in_features: int
    out_features: int
    fed_by: str | None

    @property
    def x_elements(self) -> int:
        """Elements of the input X (tokens × in)."""
        return self.tokens * self.in_features

    @property
    def w_elements(self) -> int:
        """Elements of the weight W (in × out)."""
        return self.in_features * self.out_features

    @property
    def y_elements(self) -> int:
        """Elements of the output Y (tokens × out)."""
        return self.tokens * self.out_features

    @property
    def flops_per_pass(self) -> int:
        """FLOPs of one GeMM of the layer: 2 · tokens · in · out (forward = each backward)."""
        return 2 * self.tokens * self.in_features * self.out_features


def fc_layers(spec: ModelSpec, batch: int, seq_len: int) -> tuple[FcLayer, ...]:
    """The four FC layers of one block of ``spec`` for ``batch`` sequences of ``seq_len``.

    QKV: h → (heads + 2·kv_heads)·head_dim; attention out: heads·head_dim → h;
    MLP up: h → ffn (GELU) or 2·ffn (SwiGLU, gate and up fused); MLP down: ffn → h.
    A mixture of experts' MLP layers are its experts' GeMMs, one expert wide, over the tokens
    the experts of one mesh receive (:meth:`~meshtune.specs.MoeSpec.expert_rows`); multi-head latent
    attention's QKV layer is its fused down projection (:class:`~meshtune.specs.MlaSpec`).
    """
    tokens = batch * seq_len
    mlp_tokens = tokens if spec.moe is None else spec.moe.expert_rows(tokens)
    return (
        FcLayer("qkv", tokens, spec.hidden, spec.qkv_width, fed_by=None),
        FcLayer("attn_out", tokens, spec.attention_width, spec.hidden, fed_by="qkv"),
        FcLayer("mlp_up", mlp_tokens, spec.hidden, spec.mlp_up_width, fed_by=None),
        FcLayer("mlp_down", mlp_tokens, spec.mlp_width, spec.hidden, fed_by="mlp_up"),
    )
