"""The LLM architecture spec (:class:`ModelSpec`), with its MoE and MLA parts: frozen pydantic
models, ``extra="forbid"``, a file's ``name`` its stem.

No ``from __future__ import annotations``: pydantic would evaluate every annotation from its
string when each model class is created, on every start-up."""

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from meshtune.units import FROZEN, MAX_DIMENSION, Dimension, without_none

MAX_BLOCKS = 2**14
"""Most transformer blocks a model may have: the search, the step replay and the exports walk
the blocks one by one, so this count bounds their work. Llama 3.1 405B, the deepest published
dense model, has 126 (Meta, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 3): over a
hundredfold margin."""

MAX_EXPERTS = 2**14
"""Most routed experts a MoE block may have: the expert search enumerates their divisors and the
replay and the executor walk them. DeepSeek-V3 has 256 (arXiv:2412.19437, §4.2): a
sixty-fourfold margin."""

MAX_TOKEN_EXPERTS = 2**10
"""Most experts one token visits (``top_k``) or shares (``shared_experts``): the executor walks
each token's slots. DeepSeek-V3 routes each token to 8 and shares 1 (arXiv:2412.19437, §4.2);
DeepSeek-V2 shares 2 (arXiv:2405.04434, §3.1): over a hundredfold margin."""


BlockCount = Annotated[int, Field(strict=True, gt=0, le=MAX_BLOCKS)]
"""A number of blocks, read strictly like :data:`~meshtune.units.Dimension` (not "8", not 8.0)."""
LeadingBlocks = Annotated[int, Field(strict=True, ge=0, le=MAX_BLOCKS)]
"""A number of blocks that may be 0."""
ExpertCount = Annotated[int, Field(strict=True, gt=0, le=MAX_EXPERTS)]
"""A number of routed experts."""
TokenExperts = Annotated[int, Field(strict=True, gt=0, le=MAX_TOKEN_EXPERTS)]
"""A number of experts one token visits."""
SharedExperts = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKEN_EXPERTS)]
"""A number of shared experts (0: none)."""


class MoeSpec(BaseModel):
    """The mixture-of-experts MLP of a model's MoE blocks (Shazeer et al. 2017; Fedus et al.,
    "Switch Transformers", JMLR 2022, §2.1; Dai et al., "DeepSeekMoE", arXiv:2401.06066, §3).

    A MoE block replaces the dense MLP by a router GeMM (h → experts), ``experts`` routed
    experts of which each token visits ``top_k``, and ``shared_experts`` experts every token
    visits; every expert is an MLP of the model's kind (gated for ``mlp = "swiglu"``).
    Blocks ``i ≥ dense_blocks_first`` with ``(i − dense_blocks_first + 1) % every == 0`` are
    MoE blocks; the others keep the dense MLP of width ``ffn_hidden``. ``capacity_factor`` is
    the stated load-imbalance assumption: the busiest expert receives that many times the
    balanced share ``tokens · top_k / experts`` (1.0: perfectly balanced routing).
    """

    model_config = FROZEN

    experts: ExpertCount = Field(
        description="Routed experts per MoE block, at most 2**14 (DeepSeek-V3 has 256)."
    )
    top_k: TokenExperts = Field(
        description="Routed experts each token visits, at most 2**10 (DeepSeek-V3: 8)."
    )
    expert_ffn_hidden: Dimension = Field(description="Inner width of one routed expert's MLP.")
    shared_experts: SharedExperts = Field(
        default=0,
        description="Experts every token visits (DeepSeekMoE's shared experts), at most 2**10 "
        "(DeepSeek-V2: 2).",
    )
    shared_ffn_hidden: Dimension | None = Field(
        default=None, description="Inner width of one shared expert (default: expert width)."
    )
    dense_blocks_first: LeadingBlocks = Field(
        default=0, description="Leading blocks that keep the dense MLP, at most 2**14 (blocks)."
    )
    every: BlockCount = Field(
        default=1, description="One block in `every` is MoE after those, at most 2**14 (blocks)."
    )
    capacity_factor: float = Field(
        default=1.0,
        ge=1.0,
        le=1e3,
        allow_inf_nan=False,
        description="Busiest expert's tokens / the balanced share (1.0: balanced routing).",
    )

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> "MoeSpec":
        if self.top_k > self.experts:
            raise ValueError(
                f"top_k ({self.top_k}) must be at most experts ({self.experts}): a token "
                "visits distinct experts"
            )
        return self

    @property
    def shared_width(self) -> int:
        """Inner width of one shared expert."""
        return self.shared_ffn_hidden or self.expert_ffn_hidden

    @property
    def shared_slots(self) -> float:
        """The shared experts in routed-expert widths: ``shared_experts · shared_width /
        expert_ffn_hidden``."""
        return self.shared_experts * self.shared_width / self.expert_ffn_hidden

    def expert_rows(self, tokens: int) -> int:
        """Rows of one mesh's expert GeMMs for ``tokens`` tokens (:mod:`meshtune.model.moe`):
        ``⌈tokens · (top_k · capacity_factor + shared_slots)⌉``."""
        return math.ceil(tokens * (self.top_k * self.capacity_factor + self.shared_slots))

    def expert_groups(self, ep: int) -> int:
        """The GeMMs of one mesh's expert FC layer with ``ep`` expert-parallel ranks
        (:mod:`meshtune.model.moe`): its ``experts / ep`` routed experts and the shared experts in
        routed widths, ``experts / ep + ⌈shared_slots⌉``. Raises ``ValueError`` when ``ep``
        does not divide the experts (the search enumerates only divisors)."""
        if ep < 1 or self.experts % ep:
            raise ValueError(f"ep {ep} does not divide {self.experts} experts")
        return self.experts // ep + math.ceil(self.shared_slots)

    def is_moe_block(self, block: int) -> bool:
        """Whether block ``block`` (0-based) has the MoE MLP (class docstring)."""
        offset = block - self.dense_blocks_first
        return offset >= 0 and (offset + 1) % self.every == 0

    def moe_blocks(self, blocks: int) -> int:
        """MoE blocks among ``blocks``: ``⌊(blocks − dense_blocks_first) / every⌋``."""
        return max(0, blocks - self.dense_blocks_first) // self.every


class MlaSpec(BaseModel):
    """Multi-head latent attention (DeepSeek-AI, "DeepSeek-V2", arXiv:2405.04434, §2.1.2-2.1.3).

    Queries and keys/values pass through low-rank latents: the block's fused down projection
    maps h to ``q_lora_rank`` (queries; 0: queries projected directly, h → heads·head_dim)
    + ``kv_lora_rank`` (the compressed KV) + ``rope_head_dim`` (the decoupled RoPE key shared
    by the heads); up projections map the query latent to heads·head_dim and the KV latent to
    heads·(head_dim − rope_head_dim + v_head_dim) (non-RoPE keys and values); the attention
    output projection reads heads·v_head_dim. The spec's ``head_dim`` is the query/key head
    width (non-RoPE + RoPE parts).
    """

    model_config = FROZEN

    q_lora_rank: Annotated[int, Field(strict=True, ge=0, le=MAX_DIMENSION)] = Field(
        description="Query latent width (0: no query compression)."
    )
    kv_lora_rank: Dimension = Field(description="Compressed key/value latent width.")
    rope_head_dim: Dimension = Field(description="Decoupled RoPE key width (shared by heads).")
    v_head_dim: Dimension = Field(description="Value head width.")


OPTIONAL_MODEL_FIELDS = ("context_len", "moe", "mla", "sliding_window")
"""ModelSpec fields left out of a dump when unset: a dense spec (and its plan) has no key for
them."""


class ModelSpec(BaseModel):
    """A decoder-only transformer, as far as its FC layers are concerned."""

    model_config = FROZEN

    name: str = Field(description="Catalog name; the file stem.")
    display_name: str = Field(description="Human-readable name, e.g. 'GPT-3 175B'.")
    source: str = Field(min_length=1, description="Where the hyperparameters come from.")
    blocks: BlockCount = Field(
        description="Number of transformer blocks (4 FC layers each), at most 2**14 "
        "(Llama 3.1 405B has 126)."
    )
    hidden: Dimension = Field(description="Model (residual stream) width h.")
    heads: Dimension = Field(description="Query heads.")
    head_dim: Dimension = Field(description="Width of one attention head.")
    kv_heads: Dimension = Field(description="Key/value heads (== heads without GQA).")
    ffn_hidden: Dimension = Field(description="Inner width of the MLP.")
    mlp: Literal["gelu", "swiglu"] = Field(description="gelu: one up matrix; swiglu: gate+up.")
    vocab: Dimension = Field(description="Vocabulary size.")
    seq_len: Dimension = Field(description="Default training sequence length.")
    context_len: Dimension | None = Field(
        default=None,
        description="Longest context the released model supports (e.g. after RoPE scaling); "
        "a note only: plans use seq_len or --seq.",
    )
    moe: MoeSpec | None = Field(default=None, description="Mixture of experts; None: dense.")
    mla: MlaSpec | None = Field(
        default=None, description="Multi-head latent attention; None: (grouped-query) MHA."
    )
    sliding_window: Dimension | None = Field(
        default=None,
        description="Sliding-window attention in every block: a query attends to the last "
        "sliding_window tokens (Jiang et al. 2023, Mistral 7B, Sec. 2); None: the whole context.",
    )

    @model_serializer(mode="wrap")
    def _drop_unset_optionals(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        return without_none(handler(self), OPTIONAL_MODEL_FIELDS)

    @model_validator(mode="before")
    @classmethod
    def _layers_was_renamed(cls, data: object) -> object:
        if isinstance(data, dict) and "layers" in data and "blocks" not in data:
            raise ValueError(
                "'layers' is now called 'blocks' (the number of transformer blocks, each with "
                "four FC layers); rename the key"
            )
        return data

    @model_validator(mode="after")
    def _kv_heads_divide_heads(self) -> "ModelSpec":
        if self.heads % self.kv_heads:
            raise ValueError(
                f"kv_heads ({self.kv_heads}) must divide heads ({self.heads}) for grouped-query "
                "attention"
            )
        return self

    @model_validator(mode="after")
    def _widths_within_bound(self) -> "ModelSpec":
        """The FC widths the model's layers have (:func:`meshtune.model.layers.fc_layers`) are model
        dimensions too: each at most :data:`MAX_DIMENSION`, like the fields they come from."""
        for what, width in (
            ("the QKV width (heads + 2·kv_heads)·head_dim", self.qkv_width),
            ("the attention width heads·head_dim", self.attention_width),
            ("the MLP up width ffn_hidden (×2 for swiglu)", self.mlp_up_width),
        ):
            if width > MAX_DIMENSION:
                raise ValueError(
                    f"{what} is {width:,}, above the largest model dimension "
                    f"{MAX_DIMENSION:,} (2**40)"
                )
        return self

    @model_validator(mode="after")
    def _moe_blocks_exist(self) -> "ModelSpec":
        if self.moe is not None and self.moe.moe_blocks(self.blocks) == 0:
            raise ValueError(
                f"moe: no MoE block among {self.blocks} blocks (dense_blocks_first "
                f"{self.moe.dense_blocks_first}, every {self.moe.every})"
            )
        return self

    @model_validator(mode="after")
    def _mla_rope_within_head(self) -> "ModelSpec":
        if self.mla is not None and self.mla.rope_head_dim >= self.head_dim:
            raise ValueError(
                f"mla.rope_head_dim ({self.mla.rope_head_dim}) must be below head_dim "
                f"({self.head_dim}), the query/key head width it is part of"
            )
        return self

    @property
    def qkv_width(self) -> int:
        """Outputs of the fused QKV projection: ``(heads + 2·kv_heads) · head_dim``; with MLA
        the fused down projection's ``(q_lora_rank or heads·head_dim) + kv_lora_rank +
        rope_head_dim`` (:class:`MlaSpec`)."""
        if self.mla is not None:
            query = self.mla.q_lora_rank or self.heads * self.head_dim
            return query + self.mla.kv_lora_rank + self.mla.rope_head_dim
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    @property
    def attention_width(self) -> int:
        """Inputs of the attention output projection: ``heads · head_dim`` (MLA: ``heads ·
        v_head_dim``)."""
        return self.heads * (self.mla.v_head_dim if self.mla is not None else self.head_dim)

    @property
    def mlp_width(self) -> int:
        """Inner width of the MLP the FC layers hold: ``ffn_hidden``, or one routed expert's
        ``moe.expert_ffn_hidden`` for a mixture of experts (:mod:`meshtune.model.moe`)."""
        return self.moe.expert_ffn_hidden if self.moe is not None else self.ffn_hidden

    @property
    def mlp_up_width(self) -> int:
        """Outputs of the MLP up projection: the MLP width (GELU), or twice it (SwiGLU: gate
        and up fused)."""
        return self.mlp_width * (2 if self.mlp == "swiglu" else 1)
