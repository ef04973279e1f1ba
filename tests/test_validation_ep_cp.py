"""Published runs with expert or context parallelism in the validation set (issue 18): the
Llama 3 405B long-context row (Llama Team 2024, arXiv:2407.21783, Table 4: TP 8 × PP 16 ×
DP 8 × CP 16, 131,072 tokens, 380 TFLOP/s) and DeepSeek-V3's training run (DeepSeek-AI 2024,
arXiv:2412.19437, Sec. 3.1-3.2: 2,048 H800, PP 16, EP 64, ZeRO-1 DP 128)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from meshtune.catalog import load_profile
from meshtune.validation import ValidationSetError, load_validation_set, predict_row
from meshtune.validation.data import Run, palm_flops
from meshtune.validation.predict import load_profiles


def _run(run_id: str) -> Run:
    return next(r for s in load_validation_set() for r in s.runs if r.id == run_id)


def test_the_long_context_row_by_hand() -> None:
    run = _run("llama3_405b/16384gpus-cp16")
    assert (run.tp, run.pp, run.dp, run.cp) == (8, 16, 8, 16)
    assert run.split == "8 × 16 × 8 × CP 16"
    # 128 · 131072 tokens · (6 · 405e9 + 12 · 126 · 128 · 128 · 131072) = 9.5244e19 FLOP
    assert palm_flops(run) == pytest.approx(9.5244e19, rel=1e-4)
    assert run.step_s == pytest.approx(9.5244e19 / (16384 * 380e12), rel=1e-3)  # 15.30 s


def test_the_deepseek_row_predicts_the_catalog_model_with_its_experts() -> None:
    run = _run("deepseek_v3/2048gpus-ep64")
    assert run.split == "1 × 16 × 128 (EP 64)"
    spec = run.spec()
    assert spec.moe is not None and spec.mla is not None
    assert (spec.blocks, spec.hidden, spec.moe.experts, spec.seq_len) == (61, 7168, 256, 4096)
    assert run.hardware == "h800-80gb"
    # 1e12 tokens / (180e3 GPU-hours · 3600 s) per GPU; 15360 · 4096 tokens over 2048 GPUs
    assert run.step_s == pytest.approx(15360 * 4096 / (2048 * 1e12 / (180e3 * 3600)), rel=1e-3)


def test_the_pinned_cp_and_ep_reach_the_prediction() -> None:
    """The same row with CP or EP unpinned (1) is a different split, so a different step."""
    profiles = load_profiles()
    rows = (("llama3_405b/16384gpus-cp16", "cp"), ("deepseek_v3/2048gpus-ep64", "ep"))
    for run_id, field in rows:
        run = _run(run_id)
        pinned = predict_row(run, profiles).predicted_s
        if field == "cp":  # without CP the 16 ranks are data-parallel replicas
            other = run.model_copy(update={"cp": 1, "dp": run.dp * run.cp})
        else:
            other = run.model_copy(update={"ep": 1})
        assert pinned is not None and predict_row(other, profiles).predicted_s != pinned


def test_h800_is_the_h100_with_a_slower_nvlink() -> None:
    h100, h800 = load_profile("h100-8gpu-nodes"), load_profile("h800-8gpu-nodes")
    assert h800.peak_flops_per_s == h100.peak_flops_per_s
    assert h800.memory_bytes == h100.memory_bytes
    nvlink = {t.name: t for t in h800.tiers or ()}["nvlink"]
    h100_nvlink = {t.name: t for t in h100.tiers or ()}["nvlink"]
    assert nvlink.all_gather is not None and h100_nvlink.all_gather is not None
    assert nvlink.all_gather.bw_bytes_per_s == pytest.approx(
        h100_nvlink.all_gather.bw_bytes_per_s * 400 / 900, rel=1e-3
    )
    assert h800.tiers is not None and h100.tiers is not None
    assert h800.tiers[-1] == h100.tiers[-1]  # the network tier is the same


def _fields(**update: object) -> dict[str, object]:
    run = _run("llama3_405b/16384gpus-cp16")
    return run.model_dump() | update


def test_cp_and_ep_must_fit_the_split() -> None:
    with pytest.raises(ValidationError, match=r"tp·pp·dp·cp = 1024 ≠ chips 16384"):
        Run.model_validate(_fields(cp=1))
    with pytest.raises(ValidationError, match="ep 3 does not divide dp 8"):
        Run.model_validate(_fields(ep=3))


def test_a_catalog_model_of_another_shape_is_refused() -> None:
    run = Run.model_validate(_fields(catalog_model="deepseek-v3"))
    with pytest.raises(ValidationSetError, match="'deepseek-v3' has 61 blocks of hidden 7168"):
        run.spec()
    with pytest.raises(ValidationSetError, match="catalog_model 'no-such-model'"):
        Run.model_validate(_fields(catalog_model="no-such-model")).spec()
