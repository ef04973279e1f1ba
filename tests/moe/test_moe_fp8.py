"""The MoE all-to-alls of FP8 training (DeepSeek-V3 §3.3.3: dispatch in FP8, combine in BF16)
worked by hand on the round profile and the tiny MoE model."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from moe_helpers import tiny

from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import fc_layers
from meshtune.step.moe import moe_block
from meshtune.step.precision import FP8_TILE_BYTES, dispatch_widths

FP8 = {"peak_flops_per_s": 4e12, "effective_flops_per_s": 2e12, "sources": ["round numbers"]}
A2A = {"t_launch_s": 10e-6, "t_sync_s": 1e-6, "bw_bytes_per_s": 1e9}


def test_fp8_dispatch_and_bf16_combine_by_hand(
    make_profile: Callable[..., HardwareProfile],
) -> None:
    profile = make_profile(fp8=FP8, all_to_all=A2A)
    assert dispatch_widths("bf16", 2) == (2, 2)
    assert dispatch_widths("fp8", 2) == (FP8_TILE_BYTES, 2)
    model = tiny()
    layers = fc_layers(model, 1, 10)
    bf16, fp8 = (
        moe_block(
            model,
            profile,
            layers,
            micro_batch=1,
            seq_len=10,
            tp=2,
            weight_shards=2,
            ep=2,
            precision=p,  # type: ignore[arg-type]
        )
        for p in ("bf16", "fp8")
    )
    # 10 tokens · top 2 · h 8 / tp 2 = 80 elements per chip, over 2 ranks (one round of half):
    # bf16 four all-to-alls of 160 B; FP8 two of 80·(1 + 4/128) = 82.5 B and two of 160 B.
    one = 10e-6 + 1e-6  # launch + one round's sync
    assert bf16.all_to_all_s == pytest.approx(4 * (one + 80 / 1e9))
    assert fp8.all_to_all_s == pytest.approx(2 * (one + 82.5 / 2 / 1e9) + 2 * (one + 80 / 1e9))
    # the router stays at the bf16 rate (DeepSeek-V3 §3.3.1: the gating keeps its precision)
    assert fp8.forward_s - fp8.all_to_all_s / 2 == pytest.approx(
        bf16.forward_s - bf16.all_to_all_s / 2
    )
