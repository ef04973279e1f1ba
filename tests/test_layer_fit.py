"""The A100 profiles' effective rate is the least-squares fit to Korthikanti et al. 2022
Table 4's one-layer times (meshtune.validation.layer_fit), and stays so as the model changes."""

from __future__ import annotations

import pytest

from meshtune.catalog import load_profile
from meshtune.validation.layer_fit import (
    LAYER_22B,
    TABLE_4,
    fit_effective_rate,
    layer_ms,
    relative_errors,
)


def test_the_layer_is_the_22b_block() -> None:
    # Table 3: 22B = 48 layers of h 6144, 64 heads; one layer is 12·h² + 13·h parameters.
    assert LAYER_22B.blocks == 1 and LAYER_22B.hidden == 6144 and LAYER_22B.heads == 64
    assert LAYER_22B.head_dim * LAYER_22B.heads == LAYER_22B.hidden
    assert [row.measured_ms for row in TABLE_4] == [19.6, 19.0, 27.2, 20.9, 20.3]


@pytest.mark.parametrize("name", ["a100-80gb-8gpu-nodes", "a100-80gb-jean-zay"])
def test_a100_profiles_carry_the_fitted_rate(name: str) -> None:
    # Re-fit with the profile's own links and HBM: a step-model change that moves the fit by
    # more than 1 % must refit the profiles (and re-run `meshtune validate`) in the same commit.
    profile = load_profile(name)
    fitted = fit_effective_rate(profile)
    assert profile.effective_flops_per_s == pytest.approx(fitted, rel=0.01)
    assert any("Table 4" in source for source in profile.sources)


def test_the_fit_is_a_minimum_and_close() -> None:
    profile = load_profile("a100-80gb-8gpu-nodes")
    rate = fit_effective_rate(profile)

    def loss(r: float) -> float:
        trial = profile.model_copy(update={"effective_flops_per_s": r})
        return sum(e * e for e in relative_errors(trial))

    assert loss(rate) <= min(loss(rate * 0.97), loss(rate * 1.03))
    at_fit = profile.model_copy(update={"effective_flops_per_s": rate})
    assert max(abs(e) for e in relative_errors(at_fit)) < 0.05


def test_full_recompute_costs_more_than_selective() -> None:
    # The measured order (27.2 > 20.9 > 19.6 ms) holds in the model.
    profile = load_profile("a100-80gb-8gpu-nodes")
    none, _sp, full, selective, _sel_sp = (layer_ms(profile, row) for row in TABLE_4)
    assert full > selective > none


def test_h100_takes_the_a100_fraction_of_its_matmul_ceiling() -> None:
    # The H100 profile assumes the A100's fitted fraction of the best-shape MAMF (271.2 / 794.5
    # TFLOP/s, stas00/ml-engineering); a refit of the A100 moves the H100 with it.
    fraction = fit_effective_rate(load_profile("a100-80gb-8gpu-nodes")) / 271.2e12
    h100 = load_profile("h100-8gpu-nodes")
    assert h100.effective_flops_per_s == pytest.approx(fraction * 794.5e12, rel=0.01)
