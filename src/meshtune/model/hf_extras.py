"""What a Hugging Face ``config.json`` says beyond the dense FC widths: the training sequence
length, mixture of experts, and the keys that change a plan but that meshtune does not model.

* **Sequence length.** ``max_position_embeddings`` is the longest context a released model
  supports, often after RoPE scaling (Llama 3.1: 131,072 = 8 × the 8,192 of pre-training,
  Llama Team 2024, arXiv:2407.21783, §3.4), not the length it was trained at. The default
  ``seq_len`` is therefore ``rope_scaling.original_max_position_embeddings`` when the config
  has it (the pre-scaling length), with a warning; the supported context is kept as the spec's
  ``context_len`` note. Without it, ``max_position_embeddings`` is used, with a warning that
  it may not be the training length. Either way ``plan --seq`` chooses the length planned.
* **Mixture of experts** (:class:`~meshtune.model.spec.MoeSpec`): the routed experts, top-k, expert
  width, shared experts and which blocks are MoE, per family naming (:data:`MOE_KEYS`).
  A dense family's config carrying an expert count is refused, never imported as dense.
* **Ignored keys** (:func:`ignored_keys`): every key present that changes the step of a real
  run and that the spec cannot hold, each with what the plan assumes instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from meshtune.errors import SpecError, printable

Config = Mapping[str, Any]

EXPERT_COUNT_KEYS = (
    "num_local_experts",
    "n_routed_experts",
    "num_experts",
    "moe_num_experts",
    "ffn_config.moe_num_experts",
)
"""Keys that give a config's number of routed experts, in any family's naming."""


@dataclass(frozen=True)
class MoeKeys:
    """How one MoE family names :class:`~meshtune.model.spec.MoeSpec`'s fields (``None``: absent,
    the field's default applies). ``shared_width`` gives the total width of the shared experts
    (Qwen2-MoE's one shared expert); ``shared_count`` their number (DeepSeek's)."""

    experts: str
    top_k: str
    expert_ffn_hidden: str
    shared_count: str | None = None
    shared_width: str | None = None
    dense_blocks_first: str | None = None
    every: str | None = None


MOE_KEYS: dict[str, MoeKeys] = {
    "mixtral": MoeKeys("num_local_experts", "num_experts_per_tok", "intermediate_size"),
    "qwen2_moe": MoeKeys(
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        shared_width="shared_expert_intermediate_size",
        every="decoder_sparse_step",
    ),
    "olmoe": MoeKeys("num_experts", "num_experts_per_tok", "intermediate_size"),
    "deepseek_v2": MoeKeys(
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        shared_count="n_shared_experts",
        dense_blocks_first="first_k_dense_replace",
        every="moe_layer_freq",
    ),
}
MOE_KEYS["deepseek_v3"] = MOE_KEYS["deepseek_v2"]
MOE_KEYS["dbrx"] = MoeKeys(
    "ffn_config.moe_num_experts", "ffn_config.moe_top_k", "ffn_config.ffn_hidden_size"
)


def lookup(config: Config, key: str) -> Any:
    """``config[key]``, where a dotted ``key`` reads into nested objects (DBRX's
    ``ffn_config.moe_num_experts``); ``None`` when any part is absent."""
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def integer(config: Config, key: str, source: str) -> int | None:
    """The integer at ``key`` (:func:`lookup`), ``None`` if absent; :class:`SpecError` naming
    the key for anything but an integer."""
    value = lookup(config, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{source}: '{key}' must be an integer, got {json.dumps(value)}")
    return value


def refuse_hidden_experts(config: Config, family_label: str, source: str) -> None:
    """Raise :class:`SpecError` when a dense family's config holds more than one expert (a
    relabelled MoE config would otherwise be planned as a dense model, its experts ignored)."""
    for key in EXPERT_COUNT_KEYS:
        value = lookup(config, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            raise SpecError(
                f"{source}: '{key}' is {value}: a mixture-of-experts config, but its model_type "
                f"names the dense {family_label} family; set model_type to one of the MoE "
                f"families ({', '.join(MOE_KEYS)})"
            )


def read_required(
    config: Config, keys: Mapping[str, str], *, prefix: str, what: str, source: str
) -> tuple[dict[str, int], dict[str, str]]:
    """``{field: integer}`` read from ``config[keys[field]]`` and ``{prefix.field: "config key
    '…'"}``; :class:`SpecError` naming every missing key (``what`` names the config)."""
    fields: dict[str, int] = {}
    provenance: dict[str, str] = {}
    missing = []
    for field, key in keys.items():
        value = integer(config, key, source)
        if value is None:
            missing.append(f"'{key}' ({prefix}.{field})")
        else:
            fields[field], provenance[f"{prefix}.{field}"] = value, f"config key '{key}'"
    if missing:
        raise SpecError(f"{source}: {what} is missing {', '.join(missing)}")
    return fields, provenance


def moe_fields(
    config: Config, model_type: str, source: str
) -> tuple[dict[str, int], dict[str, str]]:
    """The :class:`~meshtune.model.spec.MoeSpec` fields of an MoE family's config and, per field,
    the key it came from. Raises :class:`SpecError` naming the missing keys."""
    keys = MOE_KEYS[model_type]
    fields, provenance = read_required(
        config,
        {"experts": keys.experts, "top_k": keys.top_k, "expert_ffn_hidden": keys.expert_ffn_hidden},
        prefix="moe",
        what=f"{model_type} config",
        source=source,
    )
    for field, optional in (
        ("shared_experts", keys.shared_count),
        ("dense_blocks_first", keys.dense_blocks_first),
        ("every", keys.every),
    ):
        value = integer(config, optional, source) if optional else None
        if value is not None:
            fields[field], provenance[f"moe.{field}"] = value, f"config key '{optional}'"
    width = integer(config, keys.shared_width, source) if keys.shared_width else None
    if width:  # one shared expert of that width (Qwen2-MoE); 0 or absent: none
        fields["shared_experts"], fields["shared_ffn_hidden"] = 1, width
        provenance["moe.shared_ffn_hidden"] = f"config key '{keys.shared_width}'"
    return fields, provenance


MLA_KEYS = {
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}
""":class:`~meshtune.model.spec.MlaSpec` field -> DeepSeek-V2 / V3 config key."""


def mla_fields(config: Config, source: str) -> tuple[dict[str, int], dict[str, str]]:
    """The :class:`~meshtune.model.spec.MlaSpec` fields of a config with ``kv_lora_rank`` (else
    none) and their keys; a null ``q_lora_rank`` (DeepSeek-V2-Lite) is 0, no query latent.
    Raises :class:`SpecError` naming the missing keys."""
    if integer(config, "kv_lora_rank", source) is None:
        return {}, {}
    if config.get("q_lora_rank", 0) is None:  # DeepSeek-V2-Lite: no query latent
        config = {**config, "q_lora_rank": 0}
    return read_required(config, MLA_KEYS, prefix="mla", what="MLA config", source=source)


@dataclass(frozen=True)
class SequenceChoice:
    """The default ``seq_len``, where it came from, the supported context and the warning."""

    seq_len: int
    how: str
    context_len: int | None
    warning: str


def sequence_length(config: Config, key: str, value: int, source: str) -> SequenceChoice:
    """The default ``seq_len`` of a config whose length key ``key`` holds ``value`` (module
    docstring): the pre-scaling length when ``rope_scaling`` names it, else ``value``."""
    scaling = config.get("rope_scaling")
    original = None
    if isinstance(scaling, Mapping):
        original = integer(scaling, "original_max_position_embeddings", f"{source}: rope_scaling")
    if original is not None and 0 < original < value:
        return SequenceChoice(
            original,
            "config key 'rope_scaling.original_max_position_embeddings'",
            value,
            f"seq_len {original:,} is the pre-scaling context "
            f"(rope_scaling.original_max_position_embeddings); the model supports {value:,} "
            f"after RoPE scaling ('{key}', kept as context_len); plan a longer context "
            "with --seq",
        )
    return SequenceChoice(
        value,
        f"config key '{key}'",
        None,
        f"seq_len {value:,} is '{key}', the longest context the model supports, which may "
        "not be the length it was trained at; choose the planned length with --seq",
    )


SHOWN_CHARS = 60  # an ignored key's value is shown up to this many characters

# key -> what the plan assumes instead
_IGNORED: dict[str, str] = {
    "sliding_window": "sliding-window attention: priced as full causal attention",
    "attn_logit_softcapping": "attention logit soft-capping: not priced (element-wise)",
    "final_logit_softcapping": "final logit soft-capping: not priced (element-wise)",
    "tie_word_embeddings": "tied embeddings: input and output embeddings counted separately",
    "rope_scaling": "RoPE scaling: changes only the supported context (see seq_len)",
    "num_nextn_predict_layers": "multi-token prediction modules: not counted",
    "topk_group": "node-limited routing: the all-to-all is priced as unrestricted routing",
    "mlp_only_layers": "blocks listed as dense among MoE blocks: priced as MoE blocks",
    "quantization_config": "quantized weights: the profile's operand width is used",
}


def _matters(key: str, value: Any, config: Config) -> bool:
    if value is None or value is False or value == [] or value == 0:
        return False
    if key == "sliding_window":  # Qwen2 writes a window it does not use
        return config.get("use_sliding_window") is not False
    return True


WINDOW_FAMILIES = ("Mistral", "Mixtral")
"""Families whose ``sliding_window`` applies in every block (Jiang et al. 2023, Mistral 7B §2);
others (Gemma 2's alternating local and global layers, Qwen2's ``max_window_layers``) keep it
listed as ignored."""


def sliding_window(config: Config, family_label: str, source: str) -> int | None:
    """The window a :data:`WINDOW_FAMILIES` config sets (a positive integer), else None;
    raises :class:`SpecError` for a window that is not a whole number."""
    if family_label not in WINDOW_FAMILIES or not _matters(
        "sliding_window", config.get("sliding_window"), config
    ):
        return None
    return integer(config, "sliding_window", source)


def ignored_keys(config: Config, *, read: frozenset[str] = frozenset()) -> dict[str, str]:
    """{key = value: what the plan assumes instead} for every plan-affecting key of ``config``
    meshtune does not model (unset, false, zero or empty values are left out), less the keys
    the importer ``read`` into the spec."""
    return {
        f"{key} = {_shown(config[key])}": why
        for key, why in _IGNORED.items()
        if key in config and key not in read and _matters(key, config[key], config)
    }


def _shown(value: Any) -> str:
    text = printable(json.dumps(value, sort_keys=True))
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
