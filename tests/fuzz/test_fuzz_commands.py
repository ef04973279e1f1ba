"""Fuzz the commands added after the first fuzz suite (issue 6's contract, issue 7's commands).

`gemm`, `compare`, `timeline`, `export`, `run` (the JAX engine: without jax it must still answer
in one line), `models import` (seeded mutation of the hand-written Hugging Face configs in
tests/hf/configs/) and `plan`'s cluster and algorithm options, including `--check` against a
mutated committed plan. Same contract and style as :mod:`test_fuzz_cli`: seeded mutation of real
inputs, hypothesis (derandomized) over option values; ``MESHTUNE_FUZZ_CASES=N`` for more.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from fuzzlib import (
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
    violation,
)
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from meshtune.algorithms.registry import algorithm_names
from meshtune.catalog import load_model, load_profile
from meshtune.model.hf import read_hf_config, spec_toml
from meshtune.planner.make import make_plan

HF_CONFIGS = sorted((REPO / "tests" / "hf" / "configs").glob("*/config.json"))
COMMITTED_PLAN = REPO / "plans" / "gpt3-256.json"

SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ODD = ["0", "-1", "2.5", "1e3", "", "abc", "nan", "inf", HUGE, "99999999999999999999999"]
_ODD = st.one_of(st.sampled_from(ODD), st.integers(-(10**30), 10**30).map(str), st.text(max_size=8))


def _mostly(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Valid values about nine times in ten (so most cases get past parsing), odd otherwise."""
    return st.sampled_from(range(10)).flatmap(lambda i: valid if i else _ODD)


_SIZES = _mostly(
    st.one_of(st.sampled_from(["1", "8", "4096", "12288"]), st.integers(1, 1 << 16).map(str))
)
_COUNTS = _mostly(st.sampled_from(["1", "2", "4", "8", "3"]))
_ALGORITHMS = _mostly(
    st.one_of(
        st.sampled_from([*algorithm_names(), "auto"]),
        st.lists(st.sampled_from(algorithm_names()), min_size=1, max_size=3).map(",".join),
    )
)
_MESHES = _mostly(
    st.one_of(
        st.sampled_from(["4x4", "2x8", "8x2", "16x1", "1x16", "4x4x1", "0x4", "4x", "4x4x4"]),
        st.builds(lambda a, b: f"{a}x{b}", st.integers(0, 64), st.integers(0, 64)),
    )
)


def _writer(path: Path) -> Callable[[Case], None]:
    def write(case: Case) -> None:
        if case.data is not None:
            path.write_bytes(case.data)

    return write


@pytest.fixture(scope="module")
def small_plan() -> bytes:
    """A 4-chip GPT-3 plan of one mesh: every command on it answers in a fraction of a second."""
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), 4)
    return plan.to_json().encode()


# --------------------------------------------------------------------------- gemm


def test_gemm_option_values() -> None:
    failures: list[Failure] = []
    seen = 0

    @settings(SETTINGS, max_examples=cases(30))
    @given(
        sizes=st.tuples(_SIZES, _SIZES, _SIZES),
        chips=_mostly(st.sampled_from(["4", "16", "64", "256", "12"])),
        options=st.lists(
            st.one_of(
                st.tuples(st.just("--algorithms"), _ALGORITHMS),
                st.tuples(st.just("--reference"), _ALGORITHMS),
                st.tuples(st.just("--mesh"), _MESHES),
                st.tuples(
                    st.just("--dataflows"), _mostly(st.sampled_from(["OS", "LS,RS", "os", "OS,OS"]))
                ),
                st.tuples(st.just("--profile"), _mostly(st.sampled_from(["tpuv4", "h100"]))),
            ),
            max_size=3,
        ),
    )
    @example(sizes=("4096", "4096", "4096"), chips="256", options=[])
    @example(sizes=("1", "1", "1"), chips="16", options=[("--mesh", "4x4x4")])
    @example(sizes=(HUGE, "1", "1"), chips="4", options=[])
    @example(sizes=("1e30", "1", "1"), chips="4", options=[])
    @example(sizes=("8", "8", "8"), chips="16", options=[("--dataflows", "")])
    @example(sizes=("8", "8", "8"), chips="16", options=[("--algorithms", ",")])
    @example(sizes=("8", "8", "8"), chips="16", options=[("--reference", "cannon")])
    def one(sizes: tuple[str, str, str], chips: str, options: list[tuple[str, str]]) -> None:
        nonlocal seen
        seen += 1
        flat = [f"{k}={v}" for k, v in options]
        json = ["--json"] if seen % 2 else []
        # options first, then "--": a size may start with "-"
        args = ["gemm", f"--chips={chips}", *flat, *json, "--", *sizes]
        failures.extend(check_all([Case(args, "")]))

    one()
    assert_none(failures, seen)


# --------------------------------------------------------------------------- compare


def test_compare_option_values() -> None:
    failures: list[Failure] = []
    seen = 0

    @settings(SETTINGS, max_examples=cases(12))
    @given(
        chips=_mostly(st.sampled_from(["4,8", "4", "8,4", "4,4", "16", "4,,8", ","])),
        options=st.lists(
            st.one_of(
                st.tuples(st.sampled_from(["--batch", "--seq", "--at"]), _COUNTS),
                st.tuples(st.sampled_from(["--algorithms", "--reference"]), _ALGORITHMS),
                st.tuples(st.just("--mesh"), _MESHES),
                st.tuples(
                    st.just("--view"),
                    _mostly(st.sampled_from(["scaling", "breakdown", "gemms", "shapes", "slices"])),
                ),
                st.tuples(st.just("--strong"), st.none()),
            ),
            max_size=3,
        ),
    )
    @example(chips="4,8", options=[("--at", "16")])
    @example(chips="4,8", options=[("--batch", "0"), ("--strong", None)])
    @example(chips="4", options=[("--seq", HUGE)])
    @example(chips=HUGE, options=[])
    def one(chips: str, options: list[tuple[str, str | None]]) -> None:
        nonlocal seen
        seen += 1
        flat = [f"{k}={v}" if v is not None else k for k, v in options]
        args = ["compare", "gpt3", f"--chips={chips}", *flat, "--json"]
        failures.extend(check_all([Case(args, "")]))

    one()
    assert_none(failures, seen)


def test_compare_plot_onto_odd_paths(tmp_path: Path) -> None:
    """--plot onto a folder, an existing file, a missing folder: one line, exit 2."""
    folder = tmp_path / "folder"
    folder.mkdir()
    existing = tmp_path / "exists.png"
    existing.write_bytes(b"x")
    targets = [folder, existing, tmp_path / "missing" / "out.png", tmp_path / "out.txt"]
    all_cases = [
        Case(["compare", "gpt3", "--chips", "4", "--plot", str(t)], f"--plot {t.name}")
        for t in targets
    ]
    assert_none(check_all(all_cases), len(all_cases))


# --------------------------------------------------------------------------- plan files


# fuzzlib hides the JAX engine from in-process cases: `run` reads, checks and sizes the plan,
# then answers in one line where it would compile (tests/engines runs the engine).
PLAN_FILE_COMMANDS = ("timeline", "export", "run", "check")


def _plan_commands(rng: random.Random, plan: Path, out: Path) -> list[str]:
    """One of timeline / export / run / check on ``plan`` with odd options."""
    kind = rng.choice(["timeline", *PLAN_FILE_COMMANDS])
    if kind == "timeline":
        extra = rng.choice(
            [[], ["--layer", "qkv"], ["--layer", "nope"], ["--width", rng.choice(ODD)], ["--step"]]
        )
        extra += rng.choice([[], ["-o", str(out), "--force"], ["-o", "-"]])
    elif kind == "export":
        target = rng.choice(["jax", "torch", "megatron", "maxtext", "torchtitan", "deepspeed"])
        extra = rng.choice([[], ["--to", target], ["-o", str(out), "--force"]])
    elif kind == "check":
        extra = rng.choice([[], ["--json"], ["--no-verify"]])
    else:
        extra = rng.choice(
            [
                [],
                ["--size", "full"],
                ["--dtype", "bfloat16", "--repeat", rng.choice(ODD)],
                ["--seed", "-1"],
                ["--engine", "numpy"],
                ["--distributed", "--num-processes", "0"],
            ]
        )
    return [kind, str(plan), *extra]


def test_timeline_export_run_with_a_mutated_plan(tmp_path: Path, small_plan: bytes) -> None:
    rng = random.Random("plan-file-commands")
    target, out = tmp_path / "plan.json", tmp_path / "out"
    all_cases = [
        Case(_plan_commands(rng, target, out), "unchanged 4-chip plan", small_plan)
        for _ in range(4)
    ]
    for _ in range(cases(80)):
        data, how = mutate(rng, small_plan, json_mutators())
        all_cases.append(Case(_plan_commands(rng, target, out), how, data))
    assert_none(check_all(all_cases, _writer(target)), len(all_cases))


def test_plan_file_commands_on_stdin_and_odd_paths(tmp_path: Path, small_plan: bytes) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    all_cases = [
        Case([command, "-"], "plan on stdin", stdin=small_plan) for command in PLAN_FILE_COMMANDS
    ]
    all_cases += [
        Case([command, str(path)], f"plan at {path.name}")
        for command in ("timeline", "export", "run")
        for path in (folder, tmp_path / "missing.json")
    ]
    assert_none(check_all(all_cases), len(all_cases))


# --------------------------------------------------------------------------- models import


@pytest.mark.parametrize("source", HF_CONFIGS, ids=lambda p: p.parent.name)
def test_models_import_a_mutated_hf_config(source: Path, tmp_path: Path) -> None:
    rng = random.Random(f"hf:{source.parent.name}")
    target = tmp_path / "config.json"
    out = tmp_path / "model.toml"
    original = source.read_bytes()
    all_cases = []
    for _ in range(cases(8)):
        data, how = mutate(rng, original, json_mutators())
        extra = rng.choice([[], ["-o", str(out), "--force"], ["--name", "x"]])
        all_cases.append(Case(["models", "import", str(target), *extra], how, data))
    assert_none(check_all(all_cases, _writer(target)), len(all_cases))


# --------------------------------------------------------------------------- plan options


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GPT-2 small as a model TOML (from its config.json): fits in memory on a few chips, so
    the cluster search runs."""
    imported = read_hf_config(REPO / "tests" / "hf" / "configs" / "gpt2" / "config.json")
    path = tmp_path_factory.mktemp("model") / "gpt2.toml"
    path.write_text(spec_toml(imported.spec), encoding="utf-8")
    return path


def test_plan_cluster_and_algorithm_options(small_model: Path) -> None:
    failures: list[Failure] = []
    seen = 0

    @settings(SETTINGS, max_examples=cases(35))
    @given(
        chips=_mostly(st.sampled_from(["8", "16", "64"])),
        options=st.lists(
            st.one_of(
                st.tuples(st.just("--algorithm"), _ALGORITHMS),
                st.tuples(st.sampled_from(["--dp", "--pp", "--micro-batches"]), _COUNTS),
                st.tuples(st.just("--mesh"), _MESHES),
                st.tuples(
                    st.just("--recompute"),
                    _mostly(st.sampled_from(["none", "selective", "full"])),
                ),
                st.tuples(
                    st.sampled_from(
                        [
                            "--zero1",
                            "--mesh-only",
                            "--json",
                            "--grad-all-reduce",
                            "--zero3-recompute-gather",
                        ]
                    ),
                    st.none(),
                ),
                st.tuples(st.sampled_from(["--batch", "--seq", "--zero"]), _COUNTS),
                st.tuples(st.just("--cp-comm"), _mostly(st.sampled_from(["ring", "all-gather"]))),
                st.tuples(st.just("--schedule"), _mostly(st.sampled_from(["1f1b", "dualpipe"]))),
                st.tuples(
                    st.just("--grad-accumulation"),
                    _mostly(st.sampled_from(["fused", "separate"])),
                ),
                st.tuples(st.just("--precision"), _mostly(st.sampled_from(["bf16", "fp8"]))),
                st.tuples(st.just("--profile"), st.sampled_from(["tpuv4", "h100-8gpu-nodes"])),
            ),
            max_size=4,
        ),
    )
    @example(chips="16", options=[("--algorithm", "auto"), ("--mesh-only", None)])
    @example(chips="16", options=[("--mesh", "4x4"), ("--mesh-only", None)])
    @example(chips="64", options=[("--dp", "4"), ("--pp", "4"), ("--zero1", None)])
    @example(chips="16", options=[("--micro-batches", HUGE)])
    @example(chips="16", options=[("--algorithm", "cannon"), ("--mesh", "2x8")])
    @example(chips="16", options=[("--pp", "13")])
    @example(chips="64", options=[("--zero", "3"), ("--zero3-recompute-gather", None)])
    @example(chips="64", options=[("--cp-comm", "all-gather"), ("--seq", "16384")])
    @example(chips="64", options=[("--schedule", "dualpipe"), ("--pp", "4")])
    @example(chips="16", options=[("--precision", "fp8"), ("--profile", "h100-8gpu-nodes")])
    @example(chips="16", options=[("--precision", "fp8")])  # tpuv4 has no FP8: one line, 2
    @example(chips="16", options=[("--precision", "fp8"), ("--mesh-only", None)])
    def one(chips: str, options: list[tuple[str, str | None]]) -> None:
        nonlocal seen
        seen += 1
        flat = [f"{k}={v}" if v is not None else k for k, v in options]
        args = ["plan", "--model-file", str(small_model), "--chips", chips, *flat]
        failures.extend(check_all([Case(args, "")]))

    one()
    assert_none(failures, seen)


def test_plan_check_with_a_mutated_committed_plan(tmp_path: Path) -> None:
    rng = random.Random("plan-check")
    target = tmp_path / "committed.json"
    original = COMMITTED_PLAN.read_bytes()
    base = ["plan", "gpt3", "--chips", "256", "--mesh-only", "--check", str(target)]
    all_cases = [Case(base, "unchanged", original)]
    for _ in range(cases(25)):
        data, how = mutate(rng, original, json_mutators())
        extra = rng.choice([[], [], ["--json"], ["--algorithm", "collective"]])
        all_cases.append(Case([*base, *extra], how, data))
    assert_none(check_all(all_cases, _writer(target)), len(all_cases))


def test_run_without_jax_answers_in_one_line(tmp_path: Path, small_plan: bytes) -> None:
    """Without the JAX engine, `run` of a good plan is one error line naming it."""
    target = tmp_path / "plan.json"
    target.write_bytes(small_plan)
    for args in (["run", str(target)], ["run", str(target), "--size", "full", "--json"]):
        result, seconds, _ = run(Case(args, "unchanged plan"))
        assert violation(result, seconds) is None
        assert result.exit_code == 2 and "jax" in result.stderr
