"""From a model spec to the FC GeMMs of one block (meshtune.model.layers)."""

from __future__ import annotations

import pytest

from meshtune.catalog import catalog_names, load_model
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.model.spec import ModelSpec


def shapes(layers: tuple[FcLayer, ...]) -> dict[str, tuple[int, int]]:
    return {layer.name: (layer.in_features, layer.out_features) for layer in layers}


def test_gpt3_fc_layers(gpt3: ModelSpec) -> None:
    # MeshSlice §4.4 / design.md: QKV h → 3h, attention out h → h, MLP up h → 4h, down 4h → h.
    layers = fc_layers(gpt3, batch=128, seq_len=2048)
    assert [layer.name for layer in layers] == ["qkv", "attn_out", "mlp_up", "mlp_down"]
    assert shapes(layers) == {
        "qkv": (12288, 36864),
        "attn_out": (12288, 12288),
        "mlp_up": (12288, 49152),
        "mlp_down": (49152, 12288),
    }


def test_llama3_70b_gqa_and_swiglu() -> None:
    spec = load_model("llama3-70b")
    layers = shapes(fc_layers(spec, batch=1, seq_len=8192))
    # GQA: (heads + 2 · kv_heads) · head_dim = (64 + 2·8) · 128 = 10240
    assert layers["qkv"] == (8192, (64 + 2 * 8) * 128) == (8192, 10240)
    # attention output consumes heads · head_dim = 64 · 128 = 8192
    assert layers["attn_out"] == (8192, 8192)
    # SwiGLU fuses gate and up: 2 · 28672 = 57344; down takes the ffn width back to h
    assert layers["mlp_up"] == (8192, 2 * 28672)
    assert layers["mlp_down"] == (28672, 8192)


def test_attention_width_need_not_equal_hidden(gpt3: ModelSpec) -> None:
    spec = gpt3.model_copy(update={"heads": 64, "kv_heads": 64, "head_dim": 256, "hidden": 8192})
    layers = shapes(fc_layers(spec, batch=1, seq_len=16))
    assert layers["qkv"] == (8192, 3 * 64 * 256)
    assert layers["attn_out"] == (64 * 256, 8192)


@pytest.mark.parametrize(("batch", "seq_len"), [(1, 1), (128, 2048), (3, 4096)])
def test_tokens_are_batch_times_sequence(gpt3: ModelSpec, batch: int, seq_len: int) -> None:
    for layer in fc_layers(gpt3, batch, seq_len):
        assert layer.tokens == batch * seq_len


def test_fed_by_links_attention_and_mlp(gpt3: ModelSpec) -> None:
    fed_by = {layer.name: layer.fed_by for layer in fc_layers(gpt3, 1, 2048)}
    assert fed_by == {"qkv": None, "attn_out": "qkv", "mlp_up": None, "mlp_down": "mlp_up"}


def test_element_counts_and_flops() -> None:
    layer = FcLayer("l", tokens=6, in_features=4, out_features=5, fed_by=None)
    assert (layer.x_elements, layer.w_elements, layer.y_elements) == (6 * 4, 4 * 5, 6 * 5)
    assert layer.flops_per_pass == 2 * 6 * 4 * 5


@pytest.mark.parametrize("name", catalog_names("models"))
def test_every_model_gives_four_positive_layers(name: str) -> None:
    spec = load_model(name)
    layers = fc_layers(spec, batch=2, seq_len=spec.seq_len)
    assert len(layers) == 4
    for layer in layers:
        assert min(layer.tokens, layer.in_features, layer.out_features) > 0
    # the block returns to the residual width
    assert layers[1].out_features == layers[3].out_features == spec.hidden
