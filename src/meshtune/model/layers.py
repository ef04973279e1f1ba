"""From a model spec to the FC GeMMs of one transformer block.

Each FC layer computes ``Y = X W`` with ``X`` of shape (tokens × in), ``W`` (in × out) and ``Y``
(tokens × out), where tokens = batch × sequence (the 4D activation (B, S, H, D) reshaped to
(B·S, H·D), MeshSlice §3.2.1 "Sharding"). A block has four FC layers (§4.4): the fused QKV
projection, the attention output projection, the MLP up projection (gate and up fused for
SwiGLU) and the MLP down projection.

A mixture of experts' MLP layers are *grouped*: ``groups`` GeMMs of the same shape, one per
expert a mesh holds, each over that expert's own tokens (:mod:`meshtune.model.moe`). Every size of
an :class:`FcLayer` is that of one GeMM of the group; its FLOPs are the group's.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.model.spec import ModelSpec


@dataclass(frozen=True)
class FcLayer:
    """One FC layer ``Y = X W`` of a transformer block.

    ``fed_by`` names the FC layer whose output reaches this layer's input through non-FC ops
    only (attention, activation), so that its sharding layout carries over; ``None`` means the
    input comes from the residual stream (after a layer norm). ``groups``: the layer is that
    many GeMMs of this shape run one after another (a mesh's experts, module docstring); 1 for
    every dense layer.
    """

    name: str
    tokens: int
    in_features: int
    out_features: int
    fed_by: str | None
    groups: int = 1

    @property
    def x_elements(self) -> int:
        """Elements of the input X (tokens × in) of one GeMM of the group."""
        return self.tokens * self.in_features

    @property
    def w_elements(self) -> int:
        """Elements of the weight W (in × out) of one GeMM of the group."""
        return self.in_features * self.out_features

    @property
    def y_elements(self) -> int:
        """Elements of the output Y (tokens × out) of one GeMM of the group."""
        return self.tokens * self.out_features

    @property
    def flops_per_pass(self) -> int:
        """FLOPs of one pass of the layer, every GeMM of its group: 2 · groups · tokens · in ·
        out (forward = each backward)."""
        return 2 * self.groups * self.tokens * self.in_features * self.out_features


def fc_layers(spec: ModelSpec, batch: int, seq_len: int, ep: int = 1) -> tuple[FcLayer, ...]:
    """The four FC layers of one block of ``spec`` for ``batch`` sequences of ``seq_len``.

    QKV: h → (heads + 2·kv_heads)·head_dim; attention out: heads·head_dim → h;
    MLP up: h → ffn (GELU) or 2·ffn (SwiGLU, gate and up fused); MLP down: ffn → h.
    A mixture of experts' MLP layers are the grouped GeMMs of the experts one mesh holds with
    ``ep`` expert-parallel ranks, one expert wide: G =
    :meth:`~meshtune.model.spec.MoeSpec.expert_groups` GeMMs of ``⌈R / G⌉`` tokens each, R the
    rows the mesh's experts receive (:meth:`~meshtune.model.spec.MoeSpec.expert_rows`; the balanced
    share of each expert, :mod:`meshtune.model.moe`); multi-head latent attention's QKV layer is its
    fused down projection (:class:`~meshtune.model.spec.MlaSpec`).
    """
    tokens = batch * seq_len
    mlp_tokens, groups = tokens, 1
    if spec.moe is not None:
        groups = spec.moe.expert_groups(ep)
        mlp_tokens = -(-spec.moe.expert_rows(tokens) // groups)
    return (
        FcLayer("qkv", tokens, spec.hidden, spec.qkv_width, fed_by=None),
        FcLayer("attn_out", tokens, spec.attention_width, spec.hidden, fed_by="qkv"),
        FcLayer("mlp_up", mlp_tokens, spec.hidden, spec.mlp_up_width, None, groups),
        FcLayer("mlp_down", mlp_tokens, spec.mlp_width, spec.hidden, "mlp_up", groups),
    )
