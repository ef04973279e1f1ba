"""Mixture-of-experts and MLA arithmetic (meshtune.model.moe, issue 18): hand-worked values for a
tiny model, and the published parameter counts of the shipped MoE models."""

from __future__ import annotations

import pytest
from moe_helpers import TINY, tiny
from pydantic import ValidationError

from meshtune.catalog import load_model
from meshtune.model.layers import fc_layers
from meshtune.model.moe import attention_parameters, parameter_counts, side_gemms
from meshtune.model.spec import ModelSpec
from meshtune.step.model import model_flops
from meshtune.step.work import attention_core, lm_head_flops


def test_tiny_parameters_by_hand() -> None:
    # attention 8·16 + 8·8 = 192; dense MLP 3·8·32 = 768; expert 3·8·6 = 144; shared
    # 3·8·12 = 288; router 8·4 = 32; embeddings 2·10·8 = 160; blocks: 1 dense + 3 MoE
    counts = parameter_counts(tiny())
    assert counts.total == 160 + (192 + 768) + 3 * (192 + 32 + 288 + 4 * 144) == 4384
    assert counts.active == 160 + (192 + 768) + 3 * (192 + 32 + 288 + 2 * 144) == 3520
    dense = ModelSpec.model_validate({k: v for k, v in TINY.items() if k != "moe"})
    assert parameter_counts(dense).total == parameter_counts(dense).active == 160 + 4 * 960
    assert counts.active_without_input_embedding == 3520 - 80


def test_which_blocks_are_moe() -> None:
    moe = tiny(dense_blocks_first=1, every=2).moe
    assert moe is not None
    assert [moe.is_moe_block(i) for i in range(6)] == [False, False, True, False, True, False]
    assert moe.moe_blocks(6) == 2
    assert tiny().moe is not None and tiny().moe.moe_blocks(4) == 3  # type: ignore[union-attr]


def test_expert_rows_by_hand() -> None:
    moe = tiny().moe
    assert moe is not None
    assert moe.shared_slots == 2.0  # one shared expert of width 12 = two routed widths of 6
    assert moe.expert_rows(10) == 10 * (2 + 2) == 40
    assert tiny(capacity_factor=1.25).moe.expert_rows(10) == 45  # type: ignore[union-attr]


def test_fc_layers_of_a_moe_block_are_grouped_one_expert_wide() -> None:
    # 12 tokens: 12 · (top 2 + 2 shared slots) = 48 rows over the mesh's GeMMs: at EP 1 the 4
    # routed experts and the shared expert's 2 routed widths, 6 GeMMs of 8 rows
    layers = {fc.name: fc for fc in fc_layers(tiny(), 1, 12)}
    up, down = layers["mlp_up"], layers["mlp_down"]
    assert (up.groups, up.tokens, up.in_features, up.out_features) == (6, 8, 8, 12)
    assert (down.groups, down.tokens, down.in_features, down.out_features) == (6, 8, 6, 8)
    assert up.w_elements == 8 * 12  # one expert's gate + up (width 6 each)
    assert up.flops_per_pass == 2 * 6 * 8 * 8 * 12 == 2 * 48 * 8 * 12  # the 48 rows' FLOPs
    assert (layers["qkv"].groups, layers["qkv"].tokens) == (1, 12)
    # EP 2: 2 routed + 2 shared widths = 4 GeMMs of 12 rows; EP 4: 3 of 16
    assert [(fc.groups, fc.tokens) for fc in fc_layers(tiny(), 1, 12, ep=2)][2:] == [(4, 12)] * 2
    assert [(fc.groups, fc.tokens) for fc in fc_layers(tiny(), 1, 12, ep=4)][2:] == [(3, 16)] * 2
    # rows that do not divide round up: 40 rows over 6 GeMMs are 7 each
    assert fc_layers(tiny(), 1, 10)[2].tokens == 7
    (router,) = side_gemms(tiny(), 10)
    assert (router.name, router.tokens, router.in_features, router.out_features) == (
        "router",
        10,
        8,
        4,
    )


def test_mla_widths_and_parameters_by_hand() -> None:
    spec = ModelSpec.model_validate(
        {k: v for k, v in TINY.items() if k != "moe"}
        | {"head_dim": 6, "kv_heads": 2}
        | {"mla": {"q_lora_rank": 4, "kv_lora_rank": 3, "rope_head_dim": 2, "v_head_dim": 5}}
    )
    assert spec.qkv_width == 4 + 3 + 2  # query latent, KV latent, RoPE key
    assert spec.attention_width == 2 * 5
    ups = {g.name: (g.in_features, g.out_features) for g in side_gemms(spec, 1)}
    assert ups == {"q_up": (4, 2 * 6), "kv_up": (3, 2 * (6 - 2 + 5))}
    assert attention_parameters(spec) == 8 * 9 + 10 * 8 + 4 * 12 + 3 * 18 == 254
    with pytest.raises(ValidationError, match=r"mla.rope_head_dim \(6\) must be below head_dim"):
        ModelSpec.model_validate(
            spec.model_dump() | {"mla": spec.model_dump()["mla"] | {"rope_head_dim": 6}}
        )


def test_model_flops_are_six_times_active_parameters_per_token() -> None:
    """Mixtral (every block MoE): FC + router FLOPs = 6 · T · (active − embeddings)."""
    spec = load_model("mixtral-8x7b")
    batch, seq = 2, 128
    tokens = batch * seq
    flops = model_flops(spec, batch, seq, fc_layers(spec, batch, seq))
    attention = spec.blocks * attention_core(spec, batch, seq, 1, 0, kind="plain").flops
    head = lm_head_flops(spec, batch, seq, 1)
    active = parameter_counts(spec).active - 2 * spec.vocab * spec.hidden
    assert flops - attention - head == pytest.approx(6 * tokens * active, rel=1e-12)


def test_moe_validation_names_the_field() -> None:
    with pytest.raises(ValidationError, match=r"top_k \(5\) must be at most experts \(4\)"):
        tiny(top_k=5)
    with pytest.raises(ValidationError, match="no MoE block among 4 blocks"):
        tiny(dense_blocks_first=4)
    with pytest.raises(ValidationError, match="capacity_factor"):
        tiny(capacity_factor=0.5)


# model -> (published total, published active, whether the publisher counts the input embedding
# among the active parameters, source)
PUBLISHED = {
    "mixtral-8x7b": (46.7e9, 12.9e9, True, "Mistral AI release of Mixtral: 46.7B, 12.9B active"),
    "qwen1.5-moe": (14.3e9, 2.7e9, True, "Qwen1.5-MoE-A2.7B model card: 14.3B, 2.7B activated"),
    "deepseek-v3": (
        671e9,
        36.6e9,
        False,
        "deepseek-ai/DeepSeek-V3 README_WEIGHTS.md, main model: total 671B, activation "
        "parameters 36.6B including 0.9B for the output head (the abstract's 37B, rounded)",
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_moe_models_match_their_published_parameter_counts(name: str) -> None:
    total, active, with_input_embedding, _source = PUBLISHED[name]
    counts = parameter_counts(load_model(name))
    assert counts.total == pytest.approx(total, rel=0.01)
    counted = counts.active if with_input_embedding else counts.active_without_input_embedding
    assert counted == pytest.approx(active, rel=0.01)


def test_deepseek_v3_active_parameters_leave_out_the_input_embedding() -> None:
    """Regression: both embeddings counted give 37.55B, 1.5 % above the published 37B; DeepSeek
    counts the output head (0.93B) but not the input embedding (README_WEIGHTS.md), which gives
    36.62B against its 36.6B, and rounds to the abstract's 37B."""
    spec = load_model("deepseek-v3")
    counts = parameter_counts(spec)
    assert counts.total == 671_025_397_760
    assert counts.active == 37_551_276_032
    assert counts.input_embedding == 129_280 * 7_168 == 926_679_040
    assert counts.active_without_input_embedding == 36_624_596_992
    assert round(counts.active_without_input_embedding / 1e9) == 37
