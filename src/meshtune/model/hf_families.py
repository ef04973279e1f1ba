"""The architecture families whose Hugging Face ``config.json`` meshtune reads, and how each
names the :class:`~meshtune.model.spec.ModelSpec` fields (:mod:`meshtune.model.hf` reads them).

:data:`FAMILIES` lists, per family, the ``config.json`` keys each spec field may come from
(the first present wins; a dotted key reads into a nested object) and the rule for a field the
file may leave out (the family's fixed value, the ``transformers`` default).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from meshtune.errors import SpecError
from meshtune.model.hf_extras import MOE_KEYS, Config, integer

CONFIG_NAME = "config.json"

# A default rule: (value, how it was derived) from the already-read fields and the config.
Rule = Callable[[dict[str, int], Config], tuple[int, str]]


def _per_head(values: dict[str, int], _: Config) -> tuple[int, str]:
    if values["heads"] < 1:
        raise SpecError(
            f"heads is {values['heads']}: the head width (hidden / heads) needs a positive "
            "number of heads"
        )
    if values["hidden"] % values["heads"]:
        raise SpecError(
            f"hidden size {values['hidden']} is not a multiple of {values['heads']} heads and "
            "the config has no head_dim"
        )
    return values["hidden"] // values["heads"], "hidden / heads"


def _no_gqa(values: dict[str, int], _: Config) -> tuple[int, str]:
    return values["heads"], "heads (no grouped-query attention)"


def _four_hidden(values: dict[str, int], _: Config) -> tuple[int, str]:
    return 4 * values["hidden"], "4 × hidden (the family's MLP ratio)"


def _falcon_kv(values: dict[str, int], config: Config) -> tuple[int, str]:
    if config.get("new_decoder_architecture") is True:
        raise SpecError("Falcon config with new_decoder_architecture needs 'num_kv_heads'")
    if config.get("multi_query") is True:
        return 1, "1 (multi_query: true)"
    return values["heads"], "heads (multi_query: false)"


def _mla_head_dim(values: dict[str, int], config: Config) -> tuple[int, str]:
    source = "config.json"
    nope, rope = (
        integer(config, "qk_nope_head_dim", source),
        integer(config, "qk_rope_head_dim", source),
    )
    if nope is None or rope is None:
        return _per_head(values, config)
    return nope + rope, "qk_nope_head_dim + qk_rope_head_dim (query/key head width)"


def _fixed(value: int, why: str) -> Rule:
    def rule(_values: dict[str, int], _config: Config) -> tuple[int, str]:
        return value, why

    return rule


@dataclass(frozen=True)
class Family:
    """How one architecture family names the spec's fields in ``config.json``."""

    label: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    keys: dict[str, tuple[str, ...]]
    gated: bool
    defaults: dict[str, Rule] = field(default_factory=dict)

    @property
    def moe(self) -> bool:
        """Whether the family is a mixture of experts (its keys in :data:`MOE_KEYS`)."""
        return self.model_types[0] in MOE_KEYS


_LLAMA_KEYS: dict[str, tuple[str, ...]] = {
    "blocks": ("num_hidden_layers",),
    "hidden": ("hidden_size",),
    "heads": ("num_attention_heads",),
    "head_dim": ("head_dim",),
    "kv_heads": ("num_key_value_heads",),
    "ffn_hidden": ("intermediate_size",),
    "vocab": ("vocab_size",),
    "seq_len": ("max_position_embeddings",),
}
_LLAMA_DEFAULTS: dict[str, Rule] = {"head_dim": _per_head, "kv_heads": _no_gqa}

FAMILIES: tuple[Family, ...] = (
    Family("Llama", ("llama",), ("LlamaForCausalLM",), _LLAMA_KEYS, True, _LLAMA_DEFAULTS),
    Family("Mistral", ("mistral",), ("MistralForCausalLM",), _LLAMA_KEYS, True, _LLAMA_DEFAULTS),
    Family("Qwen2", ("qwen2",), ("Qwen2ForCausalLM",), _LLAMA_KEYS, True, _LLAMA_DEFAULTS),
    Family("Mixtral", ("mixtral",), ("MixtralForCausalLM",), _LLAMA_KEYS, True, _LLAMA_DEFAULTS),
    Family(
        "Qwen2-MoE", ("qwen2_moe",), ("Qwen2MoeForCausalLM",), _LLAMA_KEYS, True, _LLAMA_DEFAULTS
    ),
    Family("OLMoE", ("olmoe",), ("OlmoeForCausalLM",), _LLAMA_KEYS, True, _LLAMA_DEFAULTS),
    Family(
        "DeepSeek-V2",
        ("deepseek_v2",),
        ("DeepseekV2ForCausalLM",),
        {**_LLAMA_KEYS, "head_dim": ()},
        True,
        {"head_dim": _mla_head_dim, "kv_heads": _no_gqa},
    ),
    Family(
        "DeepSeek-V3",
        ("deepseek_v3",),
        ("DeepseekV3ForCausalLM",),
        {**_LLAMA_KEYS, "head_dim": ()},
        True,
        {"head_dim": _mla_head_dim, "kv_heads": _no_gqa},
    ),
    Family(
        "DBRX",
        ("dbrx",),
        ("DbrxForCausalLM",),
        {
            "blocks": ("n_layers",),
            "hidden": ("d_model",),
            "heads": ("n_heads",),
            "head_dim": (),
            "kv_heads": ("attn_config.kv_n_heads",),
            "ffn_hidden": ("ffn_config.ffn_hidden_size",),
            "vocab": ("vocab_size",),
            "seq_len": ("max_seq_len",),
        },
        True,
        _LLAMA_DEFAULTS,
    ),
    Family(
        "Gemma",
        ("gemma", "gemma2"),
        ("GemmaForCausalLM", "Gemma2ForCausalLM"),
        _LLAMA_KEYS,
        True,
        _LLAMA_DEFAULTS,
    ),
    Family(
        "GPT-2",
        ("gpt2",),
        ("GPT2LMHeadModel", "GPT2Model"),
        {
            "blocks": ("n_layer",),
            "hidden": ("n_embd",),
            "heads": ("n_head",),
            "head_dim": (),
            "kv_heads": (),
            "ffn_hidden": ("n_inner",),
            "vocab": ("vocab_size",),
            "seq_len": ("n_positions", "n_ctx"),
        },
        False,
        {"head_dim": _per_head, "kv_heads": _no_gqa, "ffn_hidden": _four_hidden},
    ),
    Family(
        "GPT-NeoX",
        ("gpt_neox",),
        ("GPTNeoXForCausalLM",),
        {**_LLAMA_KEYS, "head_dim": (), "kv_heads": ()},
        False,
        {"head_dim": _per_head, "kv_heads": _no_gqa},
    ),
    Family(
        "OPT",
        ("opt",),
        ("OPTForCausalLM",),
        {**_LLAMA_KEYS, "head_dim": (), "kv_heads": (), "ffn_hidden": ("ffn_dim",)},
        False,
        {"head_dim": _per_head, "kv_heads": _no_gqa},
    ),
    Family(
        "BLOOM",
        ("bloom",),
        ("BloomForCausalLM",),
        {
            "blocks": ("n_layer", "num_hidden_layers"),
            "hidden": ("hidden_size", "n_embed"),
            "heads": ("n_head", "num_attention_heads"),
            "head_dim": (),
            "kv_heads": (),
            "ffn_hidden": (),
            "vocab": ("vocab_size",),
            "seq_len": ("seq_length",),
        },
        False,
        {
            "head_dim": _per_head,
            "kv_heads": _no_gqa,
            "ffn_hidden": _four_hidden,
            "seq_len": _fixed(2048, "2048 (BLOOM's training sequence length, arXiv:2211.05100)"),
        },
    ),
    Family(
        "Falcon",
        ("falcon", "RefinedWeb", "RefinedWebModel"),
        ("FalconForCausalLM", "RWForCausalLM"),
        {
            "blocks": ("num_hidden_layers", "n_layer"),
            "hidden": ("hidden_size",),
            "heads": ("num_attention_heads", "n_head"),
            "head_dim": (),
            "kv_heads": ("num_kv_heads",),
            "ffn_hidden": ("ffn_hidden_size",),
            "vocab": ("vocab_size",),
            "seq_len": ("max_position_embeddings",),
        },
        False,
        {
            "head_dim": _per_head,
            "kv_heads": _falcon_kv,
            "ffn_hidden": _four_hidden,
            "seq_len": _fixed(2048, "2048 (the transformers FalconConfig default)"),
        },
    ),
)

FIELDS = ("blocks", "hidden", "heads", "head_dim", "kv_heads", "ffn_hidden", "vocab", "seq_len")


def supported_architectures() -> str:
    """The supported ``model_type`` values, comma-separated (for messages)."""
    return ", ".join(t for f in FAMILIES for t in f.model_types)


def family_of(config: Config, source: str) -> Family:
    """The family of ``config`` by ``model_type`` (else ``architectures``); see module doc."""
    model_type = config.get("model_type")
    architectures = config.get("architectures")
    names = (
        [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
    )
    if model_type is None and not names:
        raise SpecError(
            f"{source}: not a Hugging Face {CONFIG_NAME}: it has neither 'model_type' nor "
            "'architectures'"
        )
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
        if model_type is None and any(a in family.architectures for a in names):
            return family
    what = f"model_type {model_type!r}" if model_type is not None else f"architectures {names}"
    raise SpecError(
        f"{source}: unknown architecture {what}; supported model_type values: "
        f"{supported_architectures()}"
    )
