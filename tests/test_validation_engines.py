"""The engines' host time per block and micro-batch (meshtune.validation.engines): the step
model's term against its formula, the fit against hand-built data, the recorded value against
the fit of the shipped sweeps, and bad input."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.plan import Plan
from meshtune.planner.make import make_plan
from meshtune.search.levels import search_cluster
from meshtune.step.options import ClusterOptions, StepOptions
from meshtune.validation import engine_fit, engines
from meshtune.validation.data import ValidationSetError, load_validation_set
from meshtune.validation.predict import load_profiles, predict_row
from meshtune.verify.check import check_plan
from test_memory import TINY

HBM = {"hbm_bytes_per_s": 1e11}


def _step(profile: HardwareProfile, overhead: float, **pins: int) -> float:
    options = ClusterOptions(**pins, step=StepOptions(block_overhead_s=overhead))  # type: ignore[arg-type]
    result = search_cluster(
        TINY, profile, 16, batch=8, seq_len=32, options=options, meshes=[Mesh(2, 2)], top=1
    )
    return result.best.step.step_s


@pytest.mark.parametrize(
    ("pins", "slots_blocks"),
    [
        # 1F1B, TINY's 4 blocks on 2 stages: (m + pp − 1) · n = (2 + 1) · 2
        ({"dp": 2, "pp": 2, "micro_batches": 2, "vpp": 1, "zero": 0}, 6.0),
        # one stage: m · n = 2 · 4
        ({"dp": 4, "pp": 1, "micro_batches": 2, "vpp": 1, "zero": 1}, 8.0),
        # interleaved, v = 2: (m + (pp − 1)/v) · n = (4 + 1/2) · 2
        ({"dp": 2, "pp": 2, "micro_batches": 4, "vpp": 2, "zero": 0}, 9.0),
    ],
)
def test_overhead_adds_a_fixed_time_per_block_and_slot(
    make_profile: Callable[..., HardwareProfile], pins: dict[str, int], slots_blocks: float
) -> None:
    profile = make_profile(**HBM)
    c = 0.25
    assert _step(profile, c, **pins) - _step(profile, 0.0, **pins) == pytest.approx(
        slots_blocks * c, rel=1e-9
    )


def test_overhead_options_are_checked() -> None:
    for bad in (-1e-3, math.nan, math.inf):
        with pytest.raises(InfeasibleError, match="block_overhead_s"):
            ClusterOptions(step=StepOptions(block_overhead_s=bad))


def test_plans_record_the_overhead_and_check_rederives_it() -> None:
    gpt3, profile = load_model("gpt3"), load_profile("tpuv4")
    plain = make_plan(gpt3, profile, 256, cluster=ClusterOptions())
    slowed = make_plan(
        gpt3, profile, 256, cluster=ClusterOptions(step=StepOptions(block_overhead_s=1e-3))
    )
    assert slowed.inputs.levels is not None and plain.inputs.levels is not None
    assert slowed.inputs.levels.block_overhead_s == 1e-3
    assert plain.inputs.levels.block_overhead_s == 0.0
    assert slowed.cluster is not None and plain.cluster is not None
    assert slowed.cluster.step.step_s > plain.cluster.step.step_s
    verdict = check_plan(slowed, slowed.to_json(), "p.json", verify=False)
    assert verdict.ok, verdict.line()
    # A file that predates the field reads as 0.
    data = json.loads(plain.to_json())
    del data["inputs"]["levels"]["block_overhead_s"]
    assert Plan.model_validate(data).inputs.levels == plain.inputs.levels


def test_fit_recovers_slope_and_intercepts() -> None:
    # gap = a_s + c·x with c = 0.009 s, two sweeps with their own intercepts
    points = [
        ("a", 100.0, 5.0 + 0.9),
        ("a", 300.0, 5.0 + 2.7),
        ("b", 200.0, -1.0 + 1.8),
        ("b", 50.0, -1.0 + 0.45),
    ]
    fit = engine_fit.fit_overhead(points)
    assert fit.slope_s == pytest.approx(0.009)
    assert fit.intercepts_s == pytest.approx({"a": 5.0, "b": -1.0})
    assert fit.rms_s == pytest.approx(0.0, abs=1e-12)
    assert fit.runs == 4


def test_fit_hand_worked_least_squares() -> None:
    # one sweep, x = 0, 1, 2, gap = 0, 1, 3: slope Σ(x−1)(g−4/3)/Σ(x−1)² = 3/2, intercept −1/6
    fit = engine_fit.fit_overhead([("s", 0.0, 0.0), ("s", 1.0, 1.0), ("s", 2.0, 3.0)])
    assert fit.slope_s == pytest.approx(1.5)
    assert fit.intercepts_s["s"] == pytest.approx(-1 / 6)
    assert fit.rms_s == pytest.approx(math.sqrt((1 / 36 + 4 / 36 + 1 / 36) / 3))


@settings(max_examples=30, deadline=None)
@given(
    slope=st.floats(0.0, 0.1),
    a=st.floats(-50.0, 50.0),
    b=st.floats(-50.0, 50.0),
    xs=st.lists(st.floats(1.0, 5000.0), min_size=2, max_size=5, unique=True),
)
def test_fit_is_exact_on_exact_data(slope: float, a: float, b: float, xs: list[float]) -> None:
    points = [("a", x, a + slope * x) for x in xs] + [("b", xs[0], b + slope * xs[0])]
    fit = engine_fit.fit_overhead(points)
    assert fit.slope_s == pytest.approx(slope, abs=1e-9)
    assert fit.intercepts_s["a"] == pytest.approx(a, abs=1e-6)


def test_fit_needs_a_change_within_a_sweep() -> None:
    with pytest.raises(ValidationSetError, match="two micro-batch counts"):
        engine_fit.fit_overhead([("a", 100.0, 1.0), ("b", 200.0, 2.0)])


def test_recorded_overhead_is_the_fit_of_its_sweeps() -> None:
    """engines.toml holds what measure_engine gives (to its 0.1 ms rounding): a change of the
    step model that moves the fit must re-record it, with the validation figures."""
    runs = {r.id: r for s in load_validation_set() for r in s.runs}
    for key, engine in engines.load_engines().engines.items():
        fit = engine_fit.measure_engine(key, load_profiles(), runs)
        assert fit.runs == len(engine_fit.load_sweeps(engine.fitted_on).runs)
        assert engine.block_overhead_ms == pytest.approx(fit.slope_s * 1e3, abs=0.051), (
            f"validation/engines/engines.toml: {key} block_overhead_ms should be "
            f"{fit.slope_s * 1e3:.1f} (the fit of {engine.fitted_on})"
        )


def test_validation_runs_name_known_engines() -> None:
    known = set(engines.load_engines().engines)
    used = {r.engine for s in load_validation_set() for r in s.runs} - {None}
    assert used and used <= known


def test_unknown_engine_names_the_run() -> None:
    run = next(r for s in load_validation_set(sources=["bloom176b"]) for r in s.runs)
    bad = run.model_copy(update={"engine": "pytorch-eager"})
    with pytest.raises(ValidationSetError, match=f"{run.id}: unknown engine 'pytorch-eager'"):
        predict_row(bad, load_profiles())


def test_engine_sweeps_are_outside_the_validation_set() -> None:
    """The sweeps measure the engine; the validation runs test it: no run is in both."""
    validated = {
        (r.layers, r.hidden, r.tp, r.pp, r.dp, r.micro_batch, r.step_s)
        for s in load_validation_set()
        for r in s.runs
    }
    for engine in engines.load_engines().engines.values():
        for row in engine_fit.load_sweeps(engine.fitted_on).runs:
            key = (row.layers, row.hidden, row.tp, row.pp, row.dp, row.micro_batch, row.step_s)
            assert key not in validated


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[engines.x]\nblock_overhead_ms = -1\nfitted_on = 'a'\nderivation = 'b'\n",
        "[engines.x]\nblock_overhead_ms = 1\n",
        "[engines.x\nblock_overhead_ms = 1",
    ],
)
def test_bad_engines_file_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    folder = tmp_path / "validation" / engines.ENGINES_DIR
    folder.mkdir(parents=True)
    (folder / "engines.toml").write_text(text)
    monkeypatch.setenv("MESHTUNE_VALIDATION_DIR", str(tmp_path / "validation"))
    engines.load_engines.cache_clear()
    try:
        with pytest.raises(ValidationSetError, match=r"engines\.toml"):
            engines.load_engines()
    finally:
        engines.load_engines.cache_clear()


def test_bad_sweep_file_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = (engines.engines_dir() / "bloom-mbs-sweeps.toml").read_text()
    folder = tmp_path / "validation" / engines.ENGINES_DIR
    folder.mkdir(parents=True)
    monkeypatch.setenv("MESHTUNE_VALIDATION_DIR", str(tmp_path / "validation"))
    for text in (
        shipped[: len(shipped) // 2],  # truncated mid-table
        shipped.replace("micro_batch = 1", "micro_batch = 0", 1),
        shipped.replace("step_s = 143.31", "step_s = 'fast'", 1),
        "citation = 'x'\n",
    ):
        (folder / "s.toml").write_text(text)
        with pytest.raises(ValidationSetError, match=r"s\.toml"):
            engine_fit.load_sweeps("s")
    with pytest.raises(ValidationSetError, match=r"missing\.toml"):
        engine_fit.load_sweeps("missing")


def test_validate_json_names_each_runs_engine() -> None:
    from meshtune.validation.report import validate

    doc = json.loads(validate(sources=["bloom176b", "korthikanti2022"]).to_json())
    engine = {r["source"]: r["engine"] for r in doc["runs"]}
    assert engine == {"bloom176b": "bigscience-megatron-deepspeed", "korthikanti2022": None}


def test_plan_cli_names_an_engine(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    args = ["plan", "gpt3", "--chips", "256", "--no-alternatives"]
    engine = ["--engine", "bigscience-megatron-deepspeed"]
    result = CliRunner().invoke(app, [*args, *engine, "-o", str(out)])
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate_json(out.read_text())
    assert plan.cluster is not None and plan.cluster.block_overhead_s == pytest.approx(8.9e-3)
    assert check_plan(plan, out.read_text(), str(out)).ok
    shown = CliRunner().invoke(app, [*args, *engine])
    assert "engine host time 8.9 ms per block and micro-batch" in " ".join(shown.output.split())
    for bad, message in (
        (["--engine", "nope"], "--engine: unknown engine 'nope'; known: bigscience"),
        ([*engine, "--mesh-only"], "drop --mesh-only"),
    ):
        result = CliRunner().invoke(app, [*args, *bad])
        assert result.exit_code == 2 and message in result.output, result.output
        assert "Traceback" not in result.output
