"""Sliding-window attention (issue 18): a window w narrows the fused causal kernel's work to
``(s·w − w²/2) / s²`` of the s² query-key pairs (Jiang et al. 2023, Mistral 7B §2; each
query sees at most w keys), hand-worked; the plain path's cost and every spec without a
window are unchanged; Hugging Face import reads the window of the Mistral families."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from meshtune.catalog import load_model
from meshtune.model.hf import spec_from_config
from meshtune.model.spec import ModelSpec
from meshtune.step.work import attention_core, causal_fraction

CONFIGS = Path(__file__).resolve().parents[1] / "hf" / "configs"


def _config(folder: str) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((CONFIGS / folder / "config.json").read_text())
    return loaded


def test_causal_fraction_by_hand() -> None:
    assert causal_fraction(8192, None) == 0.5
    # (8192·4096 − 4096²/2) / 8192² = (33,554,432 − 8,388,608) / 67,108,864
    assert causal_fraction(8192, 4096) == 0.375
    # 32K tokens, Mistral 7B's 4K window: (32768·4096 − 4096²/2) / 32768² = 15/128
    assert causal_fraction(32768, 4096) == 15 / 128
    assert causal_fraction(1024, 4096) == 0.5  # a window past the sequence changes nothing


@given(s=st.integers(1, 1 << 20), w=st.integers(1, 1 << 20))
def test_the_window_never_adds_work(s: int, w: int) -> None:
    fraction = causal_fraction(s, w)
    assert 0 < fraction <= 0.5
    assert fraction <= causal_fraction(s, w + 1)


def test_fused_attention_follows_the_window_and_plain_does_not() -> None:
    full = load_model("llama2-70b")
    windowed = full.model_copy(update={"sliding_window": 4096})
    b, s, tp, e = 2, 32768, 8, 2
    # forward 4·b·H·s²·d / tp, times the causal share: 1/2 without a window, 15/128 with it
    whole = 4 * b * full.heads * s * s * full.head_dim / tp
    assert attention_core(full, b, s, tp, e).fwd_flops == whole / 2
    fused = attention_core(windowed, b, s, tp, e)
    assert fused.fwd_flops == whole * 15 / 128 and fused.bwd_flops == 2.5 * fused.fwd_flops
    plain = attention_core(windowed, b, s, tp, e, kind="plain")
    assert plain == attention_core(full, b, s, tp, e, kind="plain")
    assert plain.fwd_flops == whole


def test_a_spec_without_a_window_dumps_as_before() -> None:
    spec = load_model("mixtral-8x7b")
    assert spec.sliding_window is None and "sliding_window" not in spec.model_dump()
    windowed = spec.model_copy(update={"sliding_window": 4096})
    assert windowed.model_dump()["sliding_window"] == 4096
    assert ModelSpec.model_validate(windowed.model_dump()) == windowed


def test_import_reads_the_window_of_the_mistral_families() -> None:
    got = spec_from_config(_config("mistral-7b"), name="m", source="x.json")
    assert got.spec.sliding_window == 4096
    assert got.provenance["sliding_window"] == "config key 'sliding_window'"
    assert got.ignored == {}
    mixtral = spec_from_config(_config("mixtral-8x7b"), name="m", source="x.json")
    assert mixtral.spec.sliding_window is None  # "sliding_window": null
    # Gemma's window alternates with global layers: listed, not read
    gemma = spec_from_config(
        _config("gemma-7b") | {"sliding_window": 4096}, name="g", source="x.json"
    )
    assert gemma.spec.sliding_window is None
    assert gemma.ignored["sliding_window = 4096"].startswith("sliding-window attention")
