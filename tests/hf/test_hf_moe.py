"""Hugging Face configs read right (issue 18 item 5): the default sequence length, the keys a
plan ignores, mixture-of-experts families and MLA keys (meshtune.model.hf_extras)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshtune.catalog import load_model
from meshtune.cli import app
from meshtune.errors import SpecError
from meshtune.model.hf import read_hf_config, spec_from_config, spec_toml
from meshtune.model.hf_extras import ignored_keys
from meshtune.model.layers import fc_layers

CONFIGS = Path(__file__).resolve().parent / "configs"

# folder -> (family, blocks, experts, top_k, expert width, shared experts, shared width,
# dense blocks first, seq_len, context_len), worked by hand from the public configs.
MOE = {
    "mixtral-8x7b": ("Mixtral", 32, 8, 2, 14336, 0, 14336, 0, 32768, None),
    "qwen1.5-moe-a2.7b": ("Qwen2-MoE", 24, 60, 4, 1408, 1, 5632, 0, 8192, None),
    "deepseek-v2": ("DeepSeek-V2", 60, 160, 6, 1536, 2, 1536, 1, 4096, 163840),
    "deepseek-v3": ("DeepSeek-V3", 61, 256, 8, 2048, 1, 2048, 3, 4096, 163840),
    "dbrx": ("DBRX", 40, 16, 4, 10752, 0, 10752, 0, 32768, None),
    "olmoe-1b-7b": ("OLMoE", 16, 64, 8, 1024, 0, 1024, 0, 4096, None),
}

# shipped catalog model -> its config folder (same FC layers, same MoE and MLA fields)
SHIPPED = {
    "mixtral-8x7b": "mixtral-8x7b",
    "deepseek-v3": "deepseek-v3",
    "qwen1.5-moe": "qwen1.5-moe-a2.7b",
}


def test_every_moe_config_folder_is_covered() -> None:
    folders = {p.name for p in CONFIGS.iterdir() if p.is_dir()}
    assert {f for f in folders if read_hf_config(CONFIGS / f).spec.moe is not None} == set(MOE)


def _config(folder: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / folder / "config.json").read_text())
    return data


def _error(config: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        spec_from_config(config, name="x", source="x.json")
    return str(info.value)


@pytest.mark.parametrize("folder", sorted(MOE))
def test_moe_config_gives_the_hand_worked_experts(folder: str) -> None:
    got = read_hf_config(CONFIGS / folder)
    spec, moe = got.spec, got.spec.moe
    assert moe is not None
    values = (
        got.family,
        spec.blocks,
        moe.experts,
        moe.top_k,
        moe.expert_ffn_hidden,
        moe.shared_experts,
        moe.shared_width,
        moe.dense_blocks_first,
        spec.seq_len,
        spec.context_len,
    )
    assert values == MOE[folder]
    assert got.provenance["moe.experts"].startswith("config key '")


@pytest.mark.parametrize("model", sorted(SHIPPED))
def test_config_of_a_shipped_moe_model_gives_its_spec(model: str) -> None:
    imported = load_model(CONFIGS / SHIPPED[model] / "config.json")
    shipped = load_model(model)
    assert (imported.moe, imported.mla, imported.seq_len) == (
        shipped.moe,
        shipped.mla,
        shipped.seq_len,
    )
    assert fc_layers(imported, 2, 512) == fc_layers(shipped, 2, 512)


def test_mla_keys_are_read() -> None:
    got = read_hf_config(CONFIGS / "deepseek-v3")
    mla = got.spec.mla
    assert mla is not None
    assert (mla.q_lora_rank, mla.kv_lora_rank, mla.rope_head_dim, mla.v_head_dim) == (
        1536,
        512,
        64,
        128,
    )
    assert got.spec.head_dim == 192  # 128 non-RoPE + 64 RoPE query/key dims
    # the fused down projection: query latent 1536 + KV latent 512 + RoPE key 64
    assert got.spec.qkv_width == 2112
    assert got.spec.attention_width == 128 * 128
    config = _config("deepseek-v2") | {"q_lora_rank": None}  # DeepSeek-V2-Lite: no query latent
    lite = spec_from_config(config, name="lite", source="x.json").spec
    assert lite.mla is not None and lite.mla.q_lora_rank == 0
    assert lite.qkv_width == 128 * 192 + 512 + 64
    del config["v_head_dim"]
    assert _error(config) == "x.json: MLA config is missing 'v_head_dim' (mla.v_head_dim)"


def test_the_pre_scaling_length_is_the_default_with_a_warning() -> None:
    got = read_hf_config(CONFIGS / "llama3.1-405b")
    assert (got.spec.seq_len, got.spec.context_len) == (8192, 131072)
    assert got.provenance["seq_len"] == (
        "config key 'rope_scaling.original_max_position_embeddings'"
    )
    assert got.warnings == (
        "seq_len 8,192 is the pre-scaling context (rope_scaling.original_max_position_"
        "embeddings); the model supports 131,072 after RoPE scaling "
        "('max_position_embeddings', kept as context_len); plan a longer context with --seq",
    )
    assert "rope_scaling = " in next(iter(got.ignored))


def test_a_length_without_scaling_is_used_with_a_warning() -> None:
    got = read_hf_config(CONFIGS / "qwen2-7b")
    assert (got.spec.seq_len, got.spec.context_len) == (131072, None)
    assert (
        "may not be the length it was trained at; choose the planned length with --seq"
        in (got.warnings[0])
    )
    assert got.ignored == {}  # Qwen2's sliding_window is off (use_sliding_window false)


def test_a_bad_original_length_names_the_key() -> None:
    config = _config("llama3.1-405b")
    config["rope_scaling"]["original_max_position_embeddings"] = "8k"
    assert "'original_max_position_embeddings' must be an integer" in _error(config)


def test_every_ignored_plan_affecting_key_is_listed() -> None:
    config = _config("gemma-7b") | {
        "sliding_window": 4096,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "tie_word_embeddings": True,
        "rope_scaling": {"type": "linear", "factor": 2.0},
    }
    got = spec_from_config(config, name="g", source="x.json")
    assert list(got.ignored) == [
        "sliding_window = 4096",
        "attn_logit_softcapping = 50.0",
        "final_logit_softcapping = 30.0",
        "tie_word_embeddings = true",
        'rope_scaling = {"factor": 2.0, "type": "linear"}',
    ]
    assert got.ignored["sliding_window = 4096"].startswith("sliding-window attention")
    # unset, false, null values are not "ignored"
    quiet = config | {"sliding_window": None, "tie_word_embeddings": False, "rope_scaling": None}
    quiet |= {"attn_logit_softcapping": None, "final_logit_softcapping": None}
    assert ignored_keys(quiet) == {}
    assert [k.split(" = ")[0] for k in ignored_keys(_config("deepseek-v3"))] == [
        "rope_scaling",
        "num_nextn_predict_layers",
        "topk_group",
    ]


def test_a_long_ignored_value_is_cut() -> None:
    got = ignored_keys({"rope_scaling": {"x" * 100: 1}})
    (key,) = got
    assert key.endswith("…") and len(key) == len("rope_scaling = ") + 60


@pytest.mark.parametrize(
    ("model_type", "key"),
    [
        ("mistral", "num_local_experts"),
        ("llama", "n_routed_experts"),
        ("qwen2", "num_experts"),
    ],
)
def test_a_dense_family_with_experts_is_refused(model_type: str, key: str) -> None:
    config = _config("mistral-7b") | {"model_type": model_type, key: 8}
    message = _error(config)
    assert message.startswith(f"x.json: '{key}' is 8: a mixture-of-experts config, but its ")
    assert "mixtral" in message
    # one expert is a dense MLP
    assert spec_from_config(config | {key: 1}, name="x", source="x.json").spec.moe is None


def test_a_moe_config_missing_its_expert_keys_names_them() -> None:
    config = _config("mixtral-8x7b")
    del config["num_local_experts"], config["num_experts_per_tok"]
    assert _error(config) == (
        "x.json: mixtral config is missing 'num_local_experts' (moe.experts), "
        "'num_experts_per_tok' (moe.top_k)"
    )


def test_a_moe_config_that_does_not_validate_names_the_field() -> None:
    config = _config("mixtral-8x7b") | {"num_experts_per_tok": 9}
    assert "top_k (9) must be at most experts (8)" in _error(config)
    config = _config("deepseek-v3") | {"first_k_dense_replace": 61}
    assert "no MoE block among 61 blocks" in _error(config)
    config = _config("dbrx")
    config["ffn_config"]["moe_top_k"] = "4"
    assert "'ffn_config.moe_top_k' must be an integer" in _error(config)


def test_moe_spec_toml_round_trips(tmp_path: Path) -> None:
    for folder in MOE:
        got = read_hf_config(CONFIGS / folder)
        path = tmp_path / f"{folder}.toml"
        path.write_text(spec_toml(got.spec, got.provenance, got.warnings), encoding="utf-8")
        assert load_model(path) == got.spec.model_copy(update={"name": folder})


def test_dense_specs_dump_as_before() -> None:
    assert set(load_model("gpt3").model_dump()) == {
        "name",
        "display_name",
        "source",
        "blocks",
        "hidden",
        "heads",
        "head_dim",
        "kv_heads",
        "ffn_hidden",
        "mlp",
        "vocab",
        "seq_len",
    }


def test_import_prints_warnings_and_ignored_keys(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "ds.toml"
    got = runner.invoke(app, ["models", "import", str(CONFIGS / "deepseek-v3"), "-o", str(out)])
    assert got.exit_code == 0, got.output
    warnings = [line for line in got.stderr.splitlines() if line.startswith("meshtune: warning")]
    assert warnings[0].startswith("meshtune: warning: seq_len 4,096 is the pre-scaling context")
    assert any("ignored num_nextn_predict_layers = 1" in w for w in warnings)
    assert "moe.experts" in got.stdout  # the provenance table
    text = out.read_text(encoding="utf-8")
    assert "# note: seq_len 4,096 is the pre-scaling context" in text
    assert load_model(out).moe == load_model("deepseek-v3").moe


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(2**39, 2**45),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(
        st.sampled_from(["original_max_position_embeddings", "factor"]),
        st.integers(-2, 2**20),
        max_size=2,
    ),
)
_KEYS = [
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "intermediate_size",
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "rope_scaling",
    "max_position_embeddings",
    "sliding_window",
    "ffn_config",
    "attn_config",
]


@given(
    folder=st.sampled_from(sorted(MOE)),
    changes=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4),
)
def test_any_value_of_a_moe_or_mla_key_is_a_spec_or_a_spec_error(
    folder: str, changes: dict[str, Any]
) -> None:
    """The importer on MoE / MLA / RoPE keys of any JSON value: a spec or one SpecError."""
    config = _config(folder) | changes
    try:
        got = spec_from_config(config, name="x", source="x.json")
    except SpecError as exc:
        assert "\n" not in str(exc)
    else:  # a MoE family's spec always has its experts; a context note is past seq_len
        assert got.spec.moe is not None
        assert got.spec.context_len is None or got.spec.context_len > got.spec.seq_len
