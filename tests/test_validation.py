"""The validation set, its FLOP conventions, the statistics and ``meshtune validate``.

The hand-worked conversions cite the source rows: SC'21 Table 1 GPT 1.7B (Narayanan et al.
2021, eq. 3) and Korthikanti et al. 2022 Table 5 GPT 22B (eq. 7, MFU 41.5 %, 1.10 s).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.validation import (
    ValidationReport,
    ValidationSetError,
    in_validated_range,
    load_validation_set,
    predict_row,
    prediction_interval,
    spearman,
    validate,
)
from meshtune.validation.bounds import (
    ValidatedPoint,
    ValidatedRange,
    fc_parameters,
    load_bounds,
    validated_ranges,
)
from meshtune.validation.confidence import step_confidence
from meshtune.validation.data import (
    Run,
    Source,
    megatron_flops,
    narayanan_eq3_flops,
    published_step_s,
    validation_dir,
)
from meshtune.validation.predict import HARDWARE_PROFILES, Prediction, load_profiles
from meshtune.validation.report import markdown_table, regressions
from meshtune.validation.stats import GroupAgreement, average_ranks, ordered_pairs, summarize

DOCS = Path(__file__).resolve().parents[1] / "docs" / "validation.md"
BEGIN = "<!-- BEGIN meshtune validate --markdown -->\n"
END = "<!-- END meshtune validate --markdown -->"


@pytest.fixture(scope="module")
def sources() -> list[Source]:
    return load_validation_set()


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return validate()


def _run(sources: list[Source], run_id: str) -> Run:
    return next(r for s in sources for r in s.runs if r.id == run_id)


# --------------------------------------------------------------------------- the data


def test_every_file_loads_and_every_run_cites_its_source(sources: list[Source]) -> None:
    assert {s.key for s in sources} >= {
        "korthikanti2022",
        "narayanan2021",
        "smith2022_mtnlg",
        "bloom176b",
        "llama3_405b",
        "megatron_readme_2024",
    }
    for source in sources:
        assert source.citation and source.verified_against and source.convention
        for run in source.runs:
            assert run.id.startswith(f"{source.key}/")
            assert any(word in run.where for word in ("Table", "Sec.", "section", "abstract", " @"))
            run.spec()  # every field the predictor needs builds a model spec
            assert run.hardware in HARDWARE_PROFILES
        for gap in source.not_expressible:
            assert gap.reason and gap.where and gap.id.startswith(f"{source.key}/")


def test_the_required_runs_are_all_there(sources: list[Source]) -> None:
    runs = [r for s in sources for r in s.runs]

    def count(prefix: str, where: str = "") -> int:
        return sum(1 for r in runs if r.id.startswith(prefix) and where in r.where)

    assert count("korthikanti2022/", "Table 5") == 8
    assert count("narayanan2021/", "Table 1") == 10
    assert count("narayanan2021/zero3-", "Table 2") == 6
    assert count("smith2022_mtnlg/") == 3
    assert count("bloom176b/production") == 1
    assert count("bloom176b/r") == 17
    assert count("llama3_405b/") == 3
    assert count("deepseek_v3/") == 1
    assert count("megatron_readme_2024/") == 9
    assert len({r.csv_row for r in runs}) == len(runs)


def test_unstated_fields_are_searched_not_invented(sources: list[Source]) -> None:
    h100 = _run(sources, "megatron_readme_2024/70b")
    assert h100.micro_batch is None and h100.recompute is None and h100.sp is None
    assert set(h100.unstated) == {"micro_batch", "recompute", "sp", "vpp"}


def test_sc21_table1_takes_micro_batch_and_interleaving_from_the_authors_script(
    sources: list[Source],
) -> None:
    # NVIDIA/Megatron-LM examples/sc21/run_table_1.sh: MBS, and v = layers / (PP · layers per
    # virtual stage) where --num-layers-per-virtual-pipeline-stage is given (145B: 80 / (8·5)).
    small = _run(sources, "narayanan2021/1.7b")
    assert small.micro_batch == 16 and small.vpp == 1 and small.unstated == []
    assert small.sp is False and small.grad_overlap  # SC'21 predates SP; --DDP-impl torch
    interleaved = _run(sources, "narayanan2021/145.6b")
    assert (interleaved.micro_batch, interleaved.vpp) == (2, 2) and interleaved.unstated == []
    assert not interleaved.grad_overlap  # --DDP-impl local: reduced after the backward pass
    table1 = [
        r
        for s in sources
        for r in s.runs
        if r.id.startswith("narayanan2021/") and "zero3" not in r.id and "ptdp" not in r.id
    ]
    assert len(table1) == 10
    for run in table1:
        assert run.micro_batch is not None and run.vpp is not None, run.id
        assert run.layers % (run.pp * run.vpp) == 0, run.id
        assert (run.global_batch // run.dp) % run.micro_batch == 0, run.id


def test_sc21_table2_ptdp_splits_follow_from_the_model_parallel_size(
    sources: list[Source],
) -> None:
    # Table 2 states model-parallel sizes 96 (175B) and 280 (530B) only. 280 = TP 8 · PP 35 is the
    # one factorisation with TP | 128 heads within an 8-GPU node and PP | 105 layers (even split),
    # Table 1's run of that model; 96 = 8 · 12 is the paper's own 175B run
    # (examples/sc21/run_figure_12.sh: 2 layers per virtual stage, v = 96 / (12 · 2) = 4).
    ptdp = sorted(
        (r for s in sources for r in s.runs if r.id.startswith("narayanan2021/ptdp-")),
        key=lambda r: (r.layers, r.chips),
    )
    assert [(r.chips, r.tp, r.pp, r.dp, r.vpp) for r in ptdp] == [
        (384, 8, 12, 4, 4),
        (768, 8, 12, 8, 4),
        (1536, 8, 12, 16, 4),
        (560, 8, 35, 2, 3),
        (1120, 8, 35, 4, 3),
        (2240, 8, 35, 8, 3),
    ]
    splits_280 = [
        (tp, 280 // tp)
        for tp in (1, 2, 4, 8)
        if 280 % tp == 0 and 128 % tp == 0 and 105 % (280 // tp) == 0
    ]
    assert splits_280 == [(8, 35)]
    for run in ptdp:
        assert run.tp * run.pp * run.dp == run.chips and run.micro_batch == 1, run.id
        assert run.layers % (run.pp * run.vpp) == 0 and run.unstated == [], run.id


def test_every_step_follows_from_the_stated_measure(sources: list[Source]) -> None:
    for run in (r for s in sources for r in s.runs):
        if run.measure == "iteration_time_s":
            assert run.step_s == run.measured, run.id
        else:
            assert published_step_s(run) == pytest.approx(run.step_s, rel=5e-4), run.id


def test_sc21_eq3_conversion_by_hand(sources: list[Source]) -> None:
    # GPT 1.7B: l 24, h 2304, B 512, s 2048, V 51,200, 32 GPUs at 137 TFLOP/s (Table 1).
    # 96·512·2048·24·2304² = 2,415,919,104 · 5,308,416 = 1.28247e16;
    # 1 + 2048/13824 + 51200/884736 = 1 + 0.148148 + 0.057870 = 1.206019;
    # F = 1.54668e16 FLOP; step = F / (32 · 137e12) = 3.5280 s.
    flops = narayanan_eq3_flops(512, 2048, 24, 2304, 51200)
    assert flops == pytest.approx(2_415_919_104 * 5_308_416 * 1.2060185, rel=1e-6)
    assert flops == pytest.approx(1.54668e16, rel=1e-5)
    run = _run(sources, "narayanan2021/1.7b")
    assert published_step_s(run) == pytest.approx(3.5280, abs=5e-4)


def test_korthikanti_mfu_conversion_by_hand(sources: list[Source]) -> None:
    # GPT 22B, selective recompute: l 48, h 6144, B 4, s 2048, V 51,200, 8 GPUs, MFU 41.5 %.
    # Eq. 7: 72·4·2048·48·6144² = 28,311,552 · 37,748,736 = 1.068719e15;
    # 1 + 2048/36864 + 51200/3538944 = 1 + 0.055556 + 0.014468 = 1.070023 → F = 1.143553e15;
    # step = F / (8 · 0.415 · 312e12) = 1.143553e15 / 1.03584e15 = 1.1040 s (Table 5: 1.10 s).
    run = _run(sources, "korthikanti2022/22b-sel")
    assert megatron_flops(run) == pytest.approx(28_311_552 * 37_748_736 * 1.0700231, rel=1e-6)
    as_mfu = run.model_copy(
        update={"measure": "mfu_pct", "measured": 41.5, "flop_formula": "megatron"}
        | {"peak_tflops": 312.0}
    )
    assert published_step_s(as_mfu) == pytest.approx(1.1040, abs=5e-4)
    assert published_step_s(as_mfu) == pytest.approx(run.step_s, rel=0.005)


def test_a_bad_run_is_one_error_naming_the_file_and_field(tmp_path: Path) -> None:
    good = (validation_dir() / "korthikanti2022.toml").read_text(encoding="utf-8")
    (tmp_path / "broken.toml").write_text(good.replace("dp = 1\n", "dp = 2\n", 1))
    with pytest.raises(ValidationSetError, match=r"broken\.toml: .*tp·pp·dp"):
        load_validation_set(tmp_path)
    with pytest.raises(ValidationSetError, match="unknown source 'nope'; known sources: broken"):
        load_validation_set(tmp_path, sources=["nope"])


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("measured = 1.42\n", "measured = inf\n", "field 'runs.0.measured': should be a finite"),
        ("hidden = 6144\n", f"hidden = {2**41}\n", "runs.0': its model: field 'hidden'"),
        ("hidden = 6144\n", f"hidden = {2**40}\n", "runs.0': its model: the QKV width"),
    ],
)
def test_a_users_validation_file_is_checked_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str, message: str
) -> None:
    good = (validation_dir() / "korthikanti2022.toml").read_text(encoding="utf-8")
    (tmp_path / "mine.toml").write_text(good.replace(old, new, 1), encoding="utf-8")
    monkeypatch.setenv("MESHTUNE_VALIDATION_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["validate"])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1, result.output
    assert result.output.startswith("meshtune: error: ") and "mine.toml: " in result.output
    assert message in result.output


def test_the_folder_is_found_like_the_catalogs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (validation_dir() / "korthikanti2022.toml").is_file()
    monkeypatch.setenv("MESHTUNE_VALIDATION_DIR", str(tmp_path))
    assert validation_dir() == tmp_path
    with pytest.raises(ValidationSetError, match="known sources: \\(none\\)"):
        load_validation_set(sources=["korthikanti2022"])


def test_a_run_id_may_appear_once(tmp_path: Path) -> None:
    text = (validation_dir() / "llama3_405b.toml").read_text(encoding="utf-8")
    (tmp_path / "a.toml").write_text(text)
    (tmp_path / "b.toml").write_text(text)
    with pytest.raises(ValidationSetError, match="b: run id 'llama3_405b/8192gpus-cp1' appears"):
        load_validation_set(tmp_path)


# --------------------------------------------------------------------------- statistics


def test_ordered_pairs_by_hand() -> None:
    # published 10 < 20 < 30; predicted 1, 3, 2: (10, 20) and (10, 30) in order, (20, 30) not.
    assert ordered_pairs([1.0, 3.0, 2.0], [10.0, 20.0, 30.0]) == (2, 3)
    assert ordered_pairs([2.0, 1.0], [5.0, 6.0]) == (0, 1)  # two runs: ρ is undefined, this not
    assert ordered_pairs([1.0, 1.0], [5.0, 6.0]) == (0, 1)  # a predicted tie does not agree
    assert ordered_pairs([1.0, 2.0], [5.0, 5.0]) == (0, 0)  # no published order to agree with
    agreement = GroupAgreement(2, None, 1, 1)
    assert (agreement.rho_text(), agreement.pairs_text()) == ("–", "1 / 1")
    with pytest.raises(ValueError, match="2 values against 1"):
        ordered_pairs([1.0, 2.0], [1.0])


@given(
    st.lists(st.floats(0.1, 100.0), min_size=2, max_size=8).flatmap(
        lambda xs: st.tuples(st.just(xs), st.permutations(xs))
    )
)
def test_ordered_pairs_of_a_ranking_with_itself_and_its_reverse(
    data: tuple[list[float], list[float]],
) -> None:
    published, other = data
    agree, pairs = ordered_pairs(published, published)
    assert agree == pairs
    reverse = [-x for x in published]
    assert ordered_pairs(reverse, published) == (0, pairs)
    agree_other, pairs_other = ordered_pairs(other, published)
    assert pairs_other == pairs and 0 <= agree_other <= pairs


def test_pairs_in_order_sum_over_groups_by_hand() -> None:
    base = load_validation_set(sources=["korthikanti2022"])[0].runs[0]

    def pred(group: str, published: float, predicted: float) -> Prediction:
        run = base.model_copy(update={"group": group, "step_s": published})
        return Prediction(run, "korthikanti2022", "p", predicted)

    # group a: published 1 < 2 < 3, predicted 1, 3, 2 → 2 of 3 pairs; group b: 1 of 1
    report = ValidationReport(
        (pred("a", 1, 1), pred("a", 2, 3), pred("a", 3, 2), pred("b", 1, 2), pred("b", 2, 3)),
        (),
    )
    assert GroupAgreement.total(report.groups().values()) == (5, None, 3, 4)
    assert markdown_table(report).rstrip().endswith("| all groups | 5 | – | 3 / 4 |")


def test_spearman_by_hand() -> None:
    # y ranks: 5→1, 6→2, 7→3.5, 8→5, 7→3.5; dx = (−2, −1, 0, 1, 2), dy = (−2, −1, .5, 2, .5):
    # Σ dx·dy = 4 + 1 + 0 + 2 + 1 = 8, Σ dx² = 10, Σ dy² = 9.5 → ρ = 8 / √95 = 0.82078.
    assert list(average_ranks([5, 6, 7, 8, 7])) == [1, 2, 3.5, 5, 3.5]
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [4, 4, 4]) is None  # no ranking to agree with
    assert spearman([1, 2], [1, 2]) is None


def test_summary_and_interval_by_hand() -> None:
    errors = [0.01, -0.02, 0.05, -0.10, 0.03, 0.20, -0.04, 0.08, 0.06, -0.07]
    s = summarize(errors)
    assert s is not None
    # |e| sorted: .01 .02 .03 .04 .05 .06 .07 .08 .10 .20 → mean 0.066, median 0.055.
    assert (s.n, s.mape_pct, s.median_pct, s.max_pct) == pytest.approx((10, 6.6, 5.5, 20.0))
    assert s.bias_pct == pytest.approx(2.0)  # Σ e = 0.20
    # 90 %: the ⌈9⌉th smallest |e| = 0.10; 50 %: the 5th = 0.05; 100 %: the largest.
    assert prediction_interval(errors) == pytest.approx(0.10)
    assert prediction_interval(errors, 0.5) == pytest.approx(0.05)
    assert prediction_interval(errors, 1.0) == pytest.approx(0.20)
    with pytest.raises(ValueError, match="no validated errors"):
        prediction_interval([])
    with pytest.raises(ValueError, match="coverage"):
        prediction_interval(errors, 0.0)


def test_in_validated_range() -> None:
    gpt3 = load_model("gpt3")
    size = fc_parameters(gpt3)  # 96 · 12·12288² = 173,946,175,488
    assert size == 96 * 12 * 12288**2
    points = [
        ValidatedPoint("a100", 4096, 2 * size),
        ValidatedPoint("h100", 8, size),
        ValidatedPoint("a100", 64, size // 2),
        ValidatedPoint("a100", 128, size),
    ]
    ranges = validated_ranges(points)
    assert ranges == {
        "a100": ValidatedRange(chips=(64, 4096), fc_parameters=(size // 2, 2 * size)),
        "h100": ValidatedRange(chips=(8, 8), fc_parameters=(size, size)),
    }
    assert in_validated_range(gpt3, "a100", 1024, ranges).inside
    assert in_validated_range(gpt3, "a100", 4096, ranges).inside  # the ends are inside
    out = in_validated_range(gpt3, "a100", 8192, ranges)
    assert not out.inside and "8,192 chips is outside the validated 64–4,096" in out.reasons[0]
    small = in_validated_range(load_model("llama2-70b"), "a100", 64, ranges)
    assert not small.inside and "FC parameters" in small.reasons[0]
    other = in_validated_range(gpt3, "tpuv4", 64, ranges)
    assert not other.inside
    assert other.reasons == ("profile 'tpuv4' has no validated runs (a100, h100 do)",)


def test_a_validated_range_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="chips must be \\[min, max\\]"):
        ValidatedRange(chips=(64, 8), fc_parameters=(1, 2))
    with pytest.raises(ValueError, match="fc_parameters"):
        ValidatedRange(chips=(8, 8), fc_parameters=(0, 2))


# --------------------------------------------------------------------------- predictions


def test_every_expressible_run_is_predicted(report: ValidationReport) -> None:
    assert report.predictions and all(p.predicted_s is not None for p in report.predictions)
    assert report.not_expressible
    llama = next(p for p in report.predictions if p.run.id == "llama3_405b/8192gpus-cp1")
    assert "over capacity in meshtune's memory model" in llama.note
    assert report.interval() == pytest.approx(prediction_interval(report.errors()))
    points = report.validated_points()
    assert {p.profile for p in points} == set(HARDWARE_PROFILES.values())
    assert len(points) == len(report.predictions)


def test_over_capacity_takes_the_unstated_mode_needing_least_memory(
    report: ValidationReport,
) -> None:
    # SC'21's 530B ZeRO-3 run at 640 GPUs fits no recompute mode in meshtune's memory model;
    # the run did fit, so without the check the least-memory mode (full) is priced, not the
    # fastest (none, which needs over a TB per chip).
    zero3 = next(p for p in report.predictions if p.run.id == "narayanan2021/zero3-530b-640")
    assert zero3.run.zero3 and zero3.run.recompute is None
    assert "over capacity" in zero3.note and zero3.recompute == "full"


def test_the_pinned_split_is_the_published_one(sources: list[Source]) -> None:
    run = _run(sources, "korthikanti2022/175b-sel")
    prediction = predict_row(run, load_profiles())
    assert prediction.micro_batches == 64  # batch 64, DP 1, micro-batch 1: pinned
    assert prediction.recompute == "selective"
    assert prediction.error == pytest.approx(prediction.predicted_s / 13.75 - 1)  # type: ignore[operator]


def test_unknown_hardware_or_profile_override_is_an_error(sources: list[Source]) -> None:
    run = _run(sources, "korthikanti2022/22b-sel")
    with pytest.raises(ValidationSetError, match="no profile for hardware 'a100-80gb'"):
        predict_row(run, {"h100-80gb": load_profile("h100-8gpu-nodes")})
    with pytest.raises(ValidationSetError, match="unknown hardware 'tpu'"):
        load_profiles({"tpu": "tpuv4"})


def test_errors_did_not_regress(report: ValidationReport) -> None:
    # The regression guard of issue 19: recorded figures in validation/bounds.toml.
    assert regressions(report, load_bounds()) == []


def test_a_stale_recorded_interval_or_run_count_is_a_regression(report: ValidationReport) -> None:
    bounds = load_bounds()
    recorded = bounds.recorded
    stale = bounds.model_copy(
        update={
            "recorded": recorded.model_copy(
                update={"interval90_pct": recorded.interval90_pct + 5, "runs": recorded.runs + 1}
            )
        }
    )
    found = regressions(report, stale)
    assert len(found) == 2
    assert "recorded 90 % interval" in found[0] and "runs predicted" in found[1]


def test_a_stale_validated_range_is_a_regression_naming_the_tables(
    report: ValidationReport,
) -> None:
    bounds = load_bounds()
    ranges = dict(bounds.validated_range)
    a100 = ranges["a100-80gb-8gpu-nodes"]
    ranges["a100-80gb-8gpu-nodes"] = a100.model_copy(update={"chips": (8, 4096)})
    found = regressions(report, bounds.model_copy(update={"validated_range": ranges}))
    assert len(found) == 1 and "validated ranges are stale" in found[0]
    assert f"[validated_range.a100-80gb-8gpu-nodes]\nchips = [8, {a100.chips[1]}]" in found[0]
    missing = {k: v for k, v in bounds.validated_range.items() if k != "h800-8gpu-nodes"}
    assert regressions(report, bounds.model_copy(update={"validated_range": missing}))


def test_plan_confidence_is_the_recorded_interval_and_the_range_check() -> None:
    bounds = load_bounds()
    gpt3 = load_model("gpt3")
    inside = step_confidence(gpt3, "a100-80gb-8gpu-nodes", 1024)
    assert inside.interval == bounds.recorded.interval90_pct / 100
    assert inside.runs == bounds.recorded.runs and inside.range.inside
    assert inside.describe().endswith("this plan is inside the validated range")
    tpu = step_confidence(gpt3, "tpuv4", 256)
    assert not tpu.range.inside and "profile 'tpuv4' has no validated runs" in tpu.describe()
    huge = step_confidence(gpt3, "a100-80gb-8gpu-nodes", 65536)
    assert huge.range.reasons == ("65,536 chips is outside the validated 8–3,360",)


def test_the_docs_table_is_the_command_output(report: ValidationReport) -> None:
    text = DOCS.read_text(encoding="utf-8")
    committed = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    assert committed == markdown_table(report), (
        "docs/validation.md is stale: paste `meshtune validate --markdown` between its markers"
    )


# --------------------------------------------------------------------------- the CLI


def test_cli_json_parses_and_has_the_stable_keys(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", "--json", "--source", "korthikanti2022"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "meshtune.validate/1"
    assert list(doc) == [
        "schema",
        "tp_algorithm",
        "profiles",
        "summary",
        "per_source",
        "groups",
        "interval",
        "runs",
        "not_expressible",
    ]
    assert {r["source"] for r in doc["runs"]} == {"korthikanti2022"}
    assert len(doc["runs"]) == 10 and doc["summary"]["runs"] == 10
    assert {n["source"] for n in doc["not_expressible"]} == {"korthikanti2022"}


def test_cli_tables_markdown_and_check(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", "--check"])
    assert result.exit_code == 0, result.stderr
    assert "llama3_405b" in result.stdout and "8192gpus-cp1" in result.stdout
    assert "90 % of the predicted" in result.stdout
    # The runs table reads at 80 columns: every run named whole on one line, in UTF-8 and in
    # the ASCII fallback (where rich's own ASCII box would widen it past 80 and cut its edge).
    for encoding in ("utf-8", "ascii"):
        narrow = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1"}, charset=encoding).invoke(
            app, ["validate", "--source", "bloom176b"]
        )
        assert narrow.exit_code == 0, narrow.stderr
        lines = narrow.stdout.splitlines()
        assert max(map(len, lines)) <= 80, encoding
        row = next(line for line in lines if "r48-l106h12288a128-tp4pp12mbs2" in line)
        assert row.rstrip().endswith("%"), (encoding, row)
        assert "|" not in narrow.stdout.split("Error figures")[0], encoding  # laid-out box kept
    subset = runner.invoke(app, ["validate", "--source", "llama3_405b", "--check"])
    assert subset.exit_code == 2 and "drop --source and --profile" in subset.stderr
    markdown = runner.invoke(app, ["validate", "--markdown", "--source", "bloom176b"])
    assert markdown.exit_code == 0 and "| bloom-0228-70x14336 | 5 |" in markdown.stdout


def test_cli_bad_source_or_profile_is_one_line(runner: CliRunner) -> None:
    for args in (["--source", "nope"], ["--profile", "a100-80gb"], ["--profile", "x=tpuv4"]):
        result = runner.invoke(app, ["validate", *args])
        assert result.exit_code == 2, args
        assert result.stderr.startswith("meshtune: error: ") and result.stderr.count("\n") == 1


def test_cli_plot(runner: CliRunner, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "v.png"
    result = runner.invoke(app, ["validate", "--source", "llama3_405b", "--plot", str(target)])
    assert result.exit_code == 0, result.stderr
    assert target.read_bytes().startswith(b"\x89PNG")
    again = runner.invoke(app, ["validate", "--source", "llama3_405b", "--plot", str(target)])
    assert again.exit_code == 2  # no overwrite without --force


# --------------------------------------------------------------------------- GPU profiles


@pytest.mark.parametrize(
    ("name", "effective", "hbm"),
    [
        ("a100-80gb-8gpu-nodes", 242.7e12, 2.039e12),
        ("a100-80gb-jean-zay", 242.7e12, 2.039e12),
        ("a100-sxm4-nvswitch", 271.2e12, 1.555e12),
        ("h100-8gpu-nodes", 711.1e12, 3.35e12),
    ],
)
def test_gpu_profiles_carry_achieved_compute_and_hbm(
    name: str, effective: float, hbm: float
) -> None:
    profile = load_profile(name)
    assert profile.effective_flops_per_s == effective < profile.peak_flops_per_s
    assert profile.hbm_bytes_per_s == hbm
    assert any("MAMF" in s for s in profile.sources)


def test_h100_gemm_curve_by_hand() -> None:
    # issue #79 of zzc0721/torch-performance-test-data: n = 2048 reaches 676.59 TFLOP/s,
    # 676.59 / 794.5 = 0.8516 at 2·2048³ = 1.718e10 FLOPs; n = 1024: 176.62 / 794.5 = 0.2223.
    curve = load_profile("h100-8gpu-nodes").gemm_efficiency
    assert curve is not None and curve.overhead_s == 0.0
    assert curve.efficiency(2 * 2048**3) == pytest.approx(0.8516)
    assert curve.efficiency(2 * 1024**3) == pytest.approx(0.2223)
    assert curve.efficiency(1e3) == pytest.approx(0.2223)  # held below the curve


def test_the_plan_report_states_the_validated_interval(runner: CliRunner) -> None:
    result = runner.invoke(app, ["plan", "gpt3", "--chips", "256"])
    assert result.exit_code == 0, result.stderr
    assert "published runs meshtune validate predicts; this plan is outside the validated" in (
        " ".join(result.stdout.split())
    )
    mesh_only = runner.invoke(app, ["plan", "gpt3", "--chips", "256", "--mesh-only"])
    assert mesh_only.exit_code == 0 and "validated" not in mesh_only.stdout


def test_bloom_topology_benchmarks_rank_as_published() -> None:
    """Issue 19's rank goal on BLOOM's 2022-02-28 topology benchmarks taken as one group (17
    runs of four model shapes): Spearman ρ of predicted against published step ≥ 0.8
    (docs/validation.md gives the figure and the per-shape groups)."""
    profiles = load_profiles()
    runs = [
        r
        for s in load_validation_set(sources=["bloom176b"])
        for r in s.runs
        if r.group is not None and r.group.startswith("bloom-0228")
    ]
    predicted = [predict_row(r, profiles).predicted_s or 0.0 for r in runs]
    assert len(runs) == 17
    assert spearman(predicted, [r.step_s for r in runs]) >= 0.8
