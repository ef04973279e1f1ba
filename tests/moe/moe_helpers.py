"""The tiny MoE model the tests of tests/moe work by hand."""

from __future__ import annotations

from typing import Any

from meshtune.model.spec import ModelSpec

TINY: dict[str, Any] = {
    "name": "tiny",
    "display_name": "tiny MoE",
    "source": "hand-worked",
    "blocks": 4,
    "hidden": 8,
    "heads": 2,
    "head_dim": 4,
    "kv_heads": 1,
    "ffn_hidden": 32,
    "mlp": "swiglu",
    "vocab": 10,
    "seq_len": 16,
    "moe": {
        "experts": 4,
        "top_k": 2,
        "expert_ffn_hidden": 6,
        "shared_experts": 1,
        "shared_ffn_hidden": 12,
        "dense_blocks_first": 1,
    },
}


def tiny(**moe: Any) -> ModelSpec:
    """The tiny MoE model: 4 blocks (the first dense), h 8, 4 experts of width 6, top 2, one
    shared expert of width 12 (two routed widths)."""
    return ModelSpec.model_validate(TINY | {"moe": TINY["moe"] | moe})
