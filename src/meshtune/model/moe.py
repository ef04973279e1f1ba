"""Mixture-of-experts and multi-head latent attention arithmetic: tokens, GeMMs, parameters.

Pure functions of a :class:`~meshtune.model.spec.ModelSpec`. A MoE block (Fedus et al., "Switch
Transformers", JMLR 2022, §2.1; Dai et al., "DeepSeekMoE", arXiv:2401.06066, §3) routes each of
its T tokens to ``top_k`` of ``experts`` routed experts and through its ``shared_experts``; an
expert is an MLP of the model's kind. One mesh's experts receive ``R = T · (top_k ·
capacity_factor + shared_slots)`` rows: the routed tokens plus the shared experts' tokens,
counted in routed-expert widths (``shared_slots = shared_experts · shared_width /
expert_width``). Under balanced routing each mesh of an expert-parallel group receives, after
the all-to-all dispatch, as many routed tokens as it sent (:mod:`meshtune.step.moe`), so R is
its rows whatever the EP degree; ``capacity_factor`` is the busiest expert's load over the
balanced share, the stated load-imbalance assumption. The leading dense blocks and the dense
blocks between MoE blocks are priced as MoE blocks by the step model (exact in
:func:`parameter_counts`).

The block's MLP FC layers (:func:`meshtune.model.layers.fc_layers`) are *grouped GeMMs*: a mesh of
an EP group of ``ep`` ranks holds ``experts / ep`` routed experts and the shared ones,
``G = experts / ep + ⌈shared_slots⌉`` weights one expert wide
(:meth:`~meshtune.model.spec.MoeSpec.expert_groups`), and runs G GeMMs of ``⌈R / G⌉`` rows each,
one expert's weight and that expert's balanced share of the tokens (GShard §2.2's per-expert
einsum; Megatron-Core's grouped expert MLP runs the same G GeMMs). Each is sharded over the
mesh by the layer's algorithm, one after another (:meth:`meshtune.algorithms.base.Algorithm.cost`):
the FLOPs are the R rows' (``G·⌈R/G⌉`` of them, exact when G divides R), a dataflow that moves
the weight (all-gathers W or reduce-scatters its gradient) moves all G weights, one that moves
the activations moves each expert's tokens. Phase 1 (MeshSlice §3.2.1, Table 1) compares one
expert's X, W and Y, the ratio of the group's G·X, G·W, G·Y: with few tokens per expert the
weight is the largest and stays, with many the activations do. At EP = experts (no shared
experts) G = 1 and the layer is one expert wide over all R rows. Priced as one GeMM over all
its tokens (one expert's weight moved), Mixtral 8x7B's MLP layers at 65,536 tokens per
micro-batch on an 8 × 1 H100 mesh would take 25.3 ms per block; as 8 GeMMs of their own tokens
they take 43.4 ms, which decides EP against TP for it (docs/models.md).

The GeMMs outside the four FC layers (:func:`side_gemms`) are the router (T × h → experts) and
MLA's up projections (DeepSeek-V2 §2.1.2): query latent → heads·head_dim, KV latent →
heads·(non-RoPE key + value widths).

Parameter counts (:func:`parameter_counts`) are those of the weight matrices: input and output
embeddings (untied), attention and MLA projections, router, routed and shared experts, dense
MLPs; layer norms and biases (under 0.01 % of these models) are left out. *Active* parameters
are those one token passes through: the top-k routed experts of each MoE block, all the rest.
Publishers count the input embedding differently: Mistral AI (Mixtral 8x7B, 12.9B active) and
Qwen (Qwen1.5-MoE-A2.7B) count both embedding matrices whole; DeepSeek leaves the input
embedding out (a token reads one row of it, no GeMM): DeepSeek-V3's README_WEIGHTS.md gives
"Activation parameters: 36.6B (including 0.9B for the output Head)" for the main model
(the 14B multi-token-prediction module apart), which the report's abstract rounds to 37B.
:attr:`ParameterCount.active_without_input_embedding` is that count.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.errors import SpecError
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec


def side_gemms(spec: ModelSpec, tokens: int) -> tuple[FcLayer, ...]:
    """A block's GeMMs outside its four FC layers for ``tokens`` tokens (module docstring):
    ``router`` (h → experts) for a MoE model; ``q_up`` (q_lora_rank → heads·head_dim, when
    queries are compressed) and ``kv_up`` (kv_lora_rank → heads·(head_dim − rope_head_dim +
    v_head_dim)) for MLA."""
    gemms: list[FcLayer] = []
    if spec.moe is not None:
        gemms.append(FcLayer("router", tokens, spec.hidden, spec.moe.experts, fed_by=None))
    mla = spec.mla
    if mla is not None:
        if mla.q_lora_rank:
            query = spec.heads * spec.head_dim
            gemms.append(FcLayer("q_up", tokens, mla.q_lora_rank, query, fed_by="qkv"))
        key_value = spec.heads * (spec.head_dim - mla.rope_head_dim + mla.v_head_dim)
        gemms.append(FcLayer("kv_up", tokens, mla.kv_lora_rank, key_value, fed_by="qkv"))
    return tuple(gemms)


def with_capacity_factor(spec: ModelSpec, factor: float) -> ModelSpec:
    """``spec`` with its MoE ``capacity_factor`` set to ``factor`` (the stated load-imbalance
    assumption: the busiest expert's load over the balanced share). Raises
    :class:`SpecError` for a dense model or a factor outside [1, 1000]."""
    if spec.moe is None:
        raise SpecError(f"--capacity-factor: model '{spec.name}' has no experts")
    if not 1.0 <= factor <= 1e3:
        raise SpecError(f"--capacity-factor must be in [1, 1000], got {factor!r}")
    moe = spec.moe.model_copy(update={"capacity_factor": float(factor)})
    return spec.model_copy(update={"moe": moe})


@dataclass(frozen=True)
class ParameterCount:
    """Weight parameters of a model: all of them, those one token passes through, and the
    input embedding's share of both (module docstring: the publishers' two conventions)."""

    total: int
    active: int
    input_embedding: int

    @property
    def active_without_input_embedding(self) -> int:
        """``active − V·h``: the weights a token's FLOPs go through, DeepSeek's convention."""
        return self.active - self.input_embedding


def _mlp(spec: ModelSpec, width: int) -> int:
    """One MLP's weights: (3 for SwiGLU: gate, up, down; else 2) · h · width."""
    return (3 if spec.mlp == "swiglu" else 2) * spec.hidden * width


def attention_parameters(spec: ModelSpec) -> int:
    """One block's attention weights: ``h · qkv_width + attention_width · h`` plus MLA's up
    projections (:func:`side_gemms` without the router)."""
    ups = sum(g.w_elements for g in side_gemms(spec, 1) if g.name != "router")
    return spec.hidden * spec.qkv_width + spec.attention_width * spec.hidden + ups


def parameter_counts(spec: ModelSpec) -> ParameterCount:
    """Total and active parameters (module docstring): ``2·V·h + Σ_blocks (attention + MLP)``
    with a dense block's MLP ``mlp(ffn_hidden)`` and a MoE block's ``h·experts +
    experts·mlp(expert) + shared·mlp(shared)`` (active: ``top_k`` routed experts); the input
    embedding ``V·h`` apart in ``input_embedding``."""
    attention = attention_parameters(spec)
    embeddings = 2 * spec.vocab * spec.hidden
    moe = spec.moe
    if moe is None:
        total = embeddings + spec.blocks * (attention + _mlp(spec, spec.ffn_hidden))
        return ParameterCount(total, total, embeddings // 2)
    moe_blocks = moe.moe_blocks(spec.blocks)
    dense = (spec.blocks - moe_blocks) * (attention + _mlp(spec, spec.ffn_hidden))
    shared = moe.shared_experts * _mlp(spec, moe.shared_width)
    common = attention + spec.hidden * moe.experts + shared
    expert = _mlp(spec, moe.expert_ffn_hidden)
    return ParameterCount(
        total=embeddings + dense + moe_blocks * (common + moe.experts * expert),
        active=embeddings + dense + moe_blocks * (common + moe.top_k * expert),
        input_embedding=embeddings // 2,
    )
