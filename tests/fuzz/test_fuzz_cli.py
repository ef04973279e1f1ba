"""Fuzz every command's entry point with mutated real inputs (issue 6, acceptance).

Seeded mutation (random bytes, truncations, edited values, deleted keys, huge numbers, wrong
types, deep nesting) of the files the other tests use: the checked-in plan, each calibrate log
sample, every model and profile TOML; hypothesis for option values. Every case must keep the
contract of :mod:`fuzzlib` (exit 0/1/2, no traceback, one stderr line on exit 2, bounded CPU).

The seeds are fixed, so the default run is the same every time; ``MESHTUNE_FUZZ_CASES=N`` runs N
cases per target. A failure prints the command and the mutated input that broke the contract.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuzzlib import (
    CASE_CPU_SECONDS,
    HUGE,
    REPO,
    Case,
    Failure,
    assert_none,
    cases,
    check_all,
    json_mutators,
    mutate,
    run,
    toml_mutators,
    violation,
)
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from meshtune.catalog import load_model, load_profile
from meshtune.planner.make import make_plan

MODELS = sorted((REPO / "models").glob("*.toml"))
PROFILES = sorted((REPO / "profiles").glob("*.toml"))
SAMPLES = sorted((REPO / "tests" / "calibrate" / "samples").iterdir())
REAL_PLAN = REPO / "plans" / "gpt3-256.json"


def _writer(path: Path) -> Callable[[Case], None]:
    def write(case: Case) -> None:
        assert case.data is not None
        path.write_bytes(case.data)

    return write


# --------------------------------------------------------------------------- plan


@pytest.mark.parametrize("source", MODELS, ids=lambda p: p.stem)
def test_plan_with_a_mutated_model_file(source: Path, tmp_path: Path) -> None:
    rng = random.Random(f"plan-model:{source.name}")
    target = tmp_path / source.name
    original = source.read_bytes()
    all_cases = []
    for _ in range(cases(40)):
        data, how = mutate(rng, original, toml_mutators())
        chips = rng.choice(["8", "16", "64", "256"])
        extra = rng.choice([[], ["--json"], ["--top", "2"]])
        args = ["plan", "--model-file", str(target), "--chips", chips, *extra]
        all_cases.append(Case(args, how, data))
    assert_none(check_all(all_cases, _writer(target)), len(all_cases))


@pytest.mark.parametrize("source", PROFILES, ids=lambda p: p.stem)
def test_plan_with_a_mutated_profile(source: Path, tmp_path: Path) -> None:
    rng = random.Random(f"plan-profile:{source.name}")
    target = tmp_path / source.name
    original = source.read_bytes()
    all_cases = []
    for _ in range(cases(50)):
        data, how = mutate(rng, original, toml_mutators())
        args = ["plan", "gpt3", "--chips", rng.choice(["8", "256"]), "--profile", str(target)]
        all_cases.append(Case(args, how, data))
    assert_none(check_all(all_cases, _writer(target)), len(all_cases))


def test_catalogs_with_a_mutated_file(tmp_path: Path) -> None:
    """`models`, `profiles` and `plan NAME` over catalogs that hold one mutated file."""
    rng = random.Random("catalogs")
    models, profiles = tmp_path / "models", tmp_path / "profiles"
    models.mkdir()
    profiles.mkdir()
    (models / "gpt3.toml").write_bytes((REPO / "models" / "gpt3.toml").read_bytes())
    (profiles / "tpuv4.toml").write_bytes((REPO / "profiles" / "tpuv4.toml").read_bytes())
    env = {"MESHTUNE_MODELS_DIR": str(models), "MESHTUNE_PROFILES_DIR": str(profiles)}
    all_failures: list[Failure] = []
    total = 0
    for _ in range(cases(150)):
        kind = rng.choice(["models", "profiles"])
        source = rng.choice(MODELS if kind == "models" else PROFILES)
        data, how = mutate(rng, source.read_bytes(), toml_mutators())
        folder = models if kind == "models" else profiles
        target = folder / "mutant.toml"
        if kind == "models":
            args = rng.choice([["models"], ["plan", "mutant", "-n", "8"]])
        else:
            args = rng.choice([["profiles"], ["plan", "gpt3", "-n", "8", "-p", "mutant"]])
        case = Case(args, f"{folder.name}/mutant.toml from {source.name}: {how}", data, env=env)
        all_failures += check_all([case], _writer(target))
        total += 1
    assert_none(all_failures, total)


_OPTION_VALUES = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["0", "-1", "1", "2.5", "1e3", "", "abc", HUGE, "99999999999999999999999"]),
    st.text(max_size=12),
)
_FUZZ_SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_plan_option_values() -> None:
    failures: list[Failure] = []
    seen = 0

    @settings(_FUZZ_SETTINGS, max_examples=cases(100))
    @given(
        option=st.sampled_from(["--chips", "--batch", "--seq", "--top", "--shapes", "--dataflow"]),
        value=_OPTION_VALUES,
        model=st.sampled_from(["gpt3", "llama3-405b", "megatron-nlg"]),
    )
    @example(option="--chips", value="99999999999999999999999", model="gpt3")
    @example(option="--chips", value=str(10**16), model="gpt3")
    def one(option: str, value: str, model: str) -> None:
        nonlocal seen
        seen += 1
        args = ["plan", model, "--chips", "256", f"{option}={value}"]
        failures.extend(check_all([Case(args, f"{option}={value[:60]!r}")]))

    one()
    assert_none(failures, seen)


def test_schema_names() -> None:
    failures: list[Failure] = []

    @settings(_FUZZ_SETTINGS, max_examples=cases(40))
    @given(name=st.one_of(st.sampled_from(["plan", "model", "profile", "PLAN", ""]), st.text()))
    def one(name: str) -> None:
        failures.extend(check_all([Case(["schema", name], f"name {name!r}")]))

    one()
    assert_none(failures, cases(40))


# --------------------------------------------------------------------------- verify


@pytest.fixture(scope="module")
def small_plan() -> bytes:
    """A 4-chip GPT-3 plan from the planner: verifies in tens of milliseconds."""
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), 4)
    return plan.to_json().encode()


def _layer0(field: str, value: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["layers"][0][field] = value(doc["layers"][0][field])

    return edit


# The plan edits issue 6 reported (items 2 and 3), run before the random ones.
ISSUE6_PLAN_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "a layer with 2 passes": _layer0("passes", lambda passes: passes[:2]),
    "a layer with 4 passes": _layer0("passes", lambda passes: [*passes, passes[0]]),
    "negative in_features": _layer0("in_features", lambda v: -v),
    "negative out_features": _layer0("out_features", lambda v: -v),
    "zero tokens": _layer0("tokens", lambda v: 0),
    "negative tokens": _layer0("tokens", lambda v: -v),
    "in_features 1e30": _layer0("in_features", lambda v: 1e30),
}


def _verify_cases(rng: random.Random, original: bytes, count: int, path: Path) -> list[Case]:
    all_cases = []
    for what, edit in ISSUE6_PLAN_EDITS.items():
        doc = json.loads(original)
        edit(doc)
        all_cases.append(Case(["verify", "-"], what, stdin=json.dumps(doc).encode()))
    nested = original.replace(
        b'"candidates": [', b'"candidates": ' + b"[" * 5000 + b"]" * 5000 + b', "x": [', 1
    )
    huge = original.replace(b'"schema_version": 1', b'"schema_version": ' + HUGE.encode(), 1)
    all_cases += [
        Case(["verify", "-"], "deeply nested JSON", stdin=nested),
        Case(["verify", "-"], "a 5000-digit integer", stdin=huge),
    ]
    for _ in range(count):
        data, how = mutate(rng, original, json_mutators())
        if rng.random() < 0.25:
            all_cases.append(Case(["verify", "-"], how, stdin=data))
        else:
            extra = rng.choice([[], ["--json"]])
            all_cases.append(Case(["verify", str(path), *extra], how, data))
    return all_cases


def _write_if_file(path: Path) -> Callable[[Case], None]:
    def write(case: Case) -> None:
        if case.data is not None:
            path.write_bytes(case.data)

    return write


def test_verify_a_mutated_checked_in_plan(tmp_path: Path) -> None:
    # every mutant that still parses runs the full 256-chip verification (about 0.6 s)
    target = tmp_path / "plan.json"
    all_cases = _verify_cases(
        random.Random("verify-real"), REAL_PLAN.read_bytes(), cases(30), target
    )
    assert_none(check_all(all_cases, _write_if_file(target)), len(all_cases))


def test_verify_a_mutated_small_plan(tmp_path: Path, small_plan: bytes) -> None:
    target = tmp_path / "plan.json"
    all_cases = _verify_cases(random.Random("verify-small"), small_plan, cases(200), target)
    assert_none(check_all(all_cases, _write_if_file(target)), len(all_cases))


def test_verify_option_values(tmp_path: Path, small_plan: bytes) -> None:
    target = tmp_path / "plan.json"
    target.write_bytes(small_plan)
    failures: list[Failure] = []

    @settings(_FUZZ_SETTINGS, max_examples=cases(100))
    @given(option=st.sampled_from(["--seed", "--max-chips"]), value=_OPTION_VALUES)
    @example(option="--seed", value="-1")
    @example(option="--max-chips", value="0")
    @example(option="--max-chips", value="-1")
    def one(option: str, value: str) -> None:
        case = Case(["verify", str(target), f"{option}={value}"], f"{option}={value[:60]!r}")
        failures.extend(check_all([case]))

    one()
    assert_none(failures, cases(100))


def test_verify_random_stdin() -> None:
    failures: list[Failure] = []

    @settings(_FUZZ_SETTINGS, max_examples=cases(80))
    @given(data=st.binary(max_size=512))
    def one(data: bytes) -> None:
        failures.extend(check_all([Case(["verify", "-"], "hypothesis bytes", stdin=data)]))

    one()
    assert_none(failures, cases(80))


# --------------------------------------------------------------------------- calibrate

_CALIBRATE_OPTIONS = ["--axis-map", "both", "--ranks", "4", "--op", "all_gather", "--base", "tpuv4"]


@pytest.mark.parametrize("source", SAMPLES, ids=lambda p: p.name)
def test_calibrate_a_mutated_log(source: Path, tmp_path: Path) -> None:
    rng = random.Random(f"calibrate:{source.name}")
    target = tmp_path / source.name
    original = source.read_bytes()
    # issue 6 item 5: one time of 1e-300 (the first time column of the data lines)
    tiny = re.sub(
        rb"(?m)^(\s*\d+\s+\d+\s+\S+\s+\S+\s+-?\d+\s+)\S+", rb"\g<1>1e-300", original, count=1
    )
    all_cases = [Case(["calibrate", str(target), *_CALIBRATE_OPTIONS], "a time of 1e-300", tiny)]
    for _ in range(cases(40)):
        data, how = mutate(rng, original, toml_mutators())
        extra = rng.choice([[], ["--json"], ["--strict"]])
        all_cases.append(Case(["calibrate", str(target), *_CALIBRATE_OPTIONS, *extra], how, data))
    assert_none(check_all(all_cases, _writer(target)), len(all_cases))


def test_calibrate_option_values(tmp_path: Path) -> None:
    log = REPO / "tests" / "calibrate" / "samples" / "nccl_all_gather_2ranks.log"
    failures: list[Failure] = []
    seen = 0

    @settings(_FUZZ_SETTINGS, max_examples=cases(50))
    @given(
        option=st.sampled_from(
            [
                "--peak-flops",
                "--effective-flops",
                "--bytes-per-element",
                "--slice-block",
                "--min-bytes",
                "--ranks",
                "--axis-map",
                "--op",
            ]
        ),
        value=st.one_of(_OPTION_VALUES, st.sampled_from(["inf", "nan", "-inf", "1e-300"])),
        write=st.booleans(),
    )
    @example(option="--peak-flops", value="inf", write=True)
    @example(option="--peak-flops", value="-1", write=False)
    def one(option: str, value: str, write: bool) -> None:
        nonlocal seen
        seen += 1
        out = tmp_path / f"case{seen}.toml"
        args = ["calibrate", str(log), "--axis-map", "both", "--base", "tpuv4", f"{option}={value}"]
        failures.extend(check_all([Case([*args, *(["-o", str(out)] if write else [])], "")]))

    one()
    assert_none(failures, seen)


def test_the_contract_catches_a_traceback() -> None:
    """The checker itself: an uncaught error and a two-line exit 2 are both reported."""
    result, seconds, _ = run(Case(["plan", "gpt3", "--chips", "256"], "none"))
    assert violation(result, seconds) is None
    result.exception = ValueError("boom")
    assert violation(result, seconds) == "uncaught ValueError: boom"
    result.exception = None
    over = CASE_CPU_SECONDS + 2.5
    assert violation(result, over) == f"took {over:.2f} CPU s (bound {CASE_CPU_SECONDS:g} s)"
    result.notes.append("plan.json was replaced without --force")
    assert violation(result, 0.1) == "plan.json was replaced without --force"
