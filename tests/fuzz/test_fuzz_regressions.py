"""The crashes and hangs the command fuzzing found, one case each (they failed before the fix).

Issue 20's classes (hostile strings in exported code, special files, long names, a plan's
profile read as a file, a layer's configuration under another algorithm) have one case each
below.

- `models import` of a GPT-2 config with ``"n_head": 0``: ZeroDivisionError in meshtune/model/hf.py
  (head width = hidden / heads); now one line naming the field and its value.
- `gemm 5040 5040 5040 --chips 5040` took 4 s (`--chips 720720`: minutes): Wang's and SUMMA's
  cost built lists of u = ring / S repeated shifts or blocks per configuration,
  O(ring × divisors) per mesh. The cost of u repeats is now u times one (``stage(..., times=u)``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from fuzzlib import REPO, Case, run, violation
from planfuzz import HOSTILE, _small, clean_export, export_oracle, special_files

from meshtune.catalog import load_profile
from meshtune.cost.schedule import parallel_time, shift, stage
from meshtune.hardware.links import CollectiveKind


def test_hf_config_with_zero_heads(tmp_path: Path) -> None:
    config = json.loads((REPO / "tests" / "hf" / "configs" / "gpt2" / "config.json").read_text())
    config["n_head"] = 0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    result, seconds, _ = run(Case(["models", "import", str(path)], "n_head 0"))
    assert violation(result, seconds) is None
    assert result.exit_code == 2
    assert "heads is 0" in result.stderr


def test_gemm_on_a_highly_composite_chip_count_answers_quickly() -> None:
    args = ["gemm", "--chips", "5040", "--algorithms", "wang,summa", "--", "5040", "5040", "5040"]
    result, seconds, _ = run(Case(args, "5040 chips (60 divisors)"))
    assert violation(result, seconds) is None
    assert result.exit_code == 0


def test_stage_of_repeated_comms_is_the_stage_of_the_repeated_list() -> None:
    """``stage(g, comms, times=u)`` prices what ``stage(g, comms * u)`` priced, with the
    shifts overlapped and not."""
    base = load_profile("tpuv4")
    for overlapped in (base.overlapped, [CollectiveKind.ALL_GATHER]):
        profile = base.model_copy(update={"overlapped": overlapped})
        one = shift(0, 8, 4096.0)
        for g in (0.0, 1e-6, 1e-3):
            for u in (1, 3, 8):
                want = stage(g, one * u, profile)
                assert math.isclose(stage(g, one, profile, times=u), want, rel_tol=1e-12)
                assert math.isclose(
                    u * parallel_time(one, profile), parallel_time(one * u, profile), rel_tol=1e-12
                )


# --------------------------------------------------------------------------- issue 20 classes

SMALL_PLAN = REPO / "plans" / "gpt3-256.json"


def _plan_with(tmp_path: Path, edit: Any, name: str = "plan.json") -> Path:
    doc = json.loads(SMALL_PLAN.read_text(encoding="utf-8"))
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _contract(case: Case) -> tuple[str | None, int]:
    result, seconds, _ = run(case)
    return violation(result, seconds), result.exit_code


@pytest.mark.parametrize("label", ["apostrophe", "backslash", "newline", "rich-link"])
def test_export_of_a_hostile_layer_name_compiles(tmp_path: Path, label: str) -> None:
    """A layer name is written into the module unescaped (a string literal, a function name)."""
    path = _plan_with(tmp_path, lambda d: d["layers"][0].update(name=HOSTILE[label]))
    clean = list(clean_export(SMALL_PLAN.read_bytes()))
    case = Case(["export", str(path)], label, expect=export_oracle(clean, None))
    assert _contract(case)[0] is None


@pytest.mark.parametrize("label", ["triple-quote", "code-in-docstring", "bad-escape", "nul"])
def test_export_of_a_hostile_profile_name_adds_no_code(tmp_path: Path, label: str) -> None:
    """inputs.profile goes into the module docstring unescaped: '\"\"\"' ends it early."""
    path = _plan_with(tmp_path, lambda d: d["inputs"].update(profile=HOSTILE[label]))
    clean = list(clean_export(SMALL_PLAN.read_bytes()))
    case = Case(["export", str(path)], label, expect=export_oracle(clean, None))
    assert _contract(case)[0] is None


def test_export_of_a_plan_file_with_a_hostile_name_adds_no_code(tmp_path: Path) -> None:
    """The plan file's name goes into the module docstring unescaped."""
    name = HOSTILE["code-in-docstring"] + ".json"
    path = _plan_with(tmp_path, lambda d: None, name)
    clean = list(clean_export(SMALL_PLAN.read_bytes()))
    assert _contract(Case(["export", str(path)], "", expect=export_oracle(clean, None)))[0] is None


@pytest.mark.parametrize("spec", [["tokens"], ["tokens", "in", "out"]])
def test_export_of_a_sharding_of_one_or_three_dimensions(tmp_path: Path, spec: list[str]) -> None:
    """ValueError (unpacking) in engines/export.py instead of one line naming the field."""
    path = _plan_with(tmp_path, lambda d: d["layers"][1]["sharding"].update(X=spec))
    assert _contract(Case(["export", str(path)], f"sharding X = {spec}")) == (None, 2)


@pytest.mark.parametrize("command", ["export", "check"])
def test_a_lone_surrogate_in_a_plan_string(tmp_path: Path, command: str) -> None:
    """UnicodeEncodeError when the string reaches stdout (export's docstring, --check's diff)."""
    path = _plan_with(tmp_path, lambda d: d["inputs"].update(profile="\ud800"))
    check = ["plan", "gpt3", "--chips", "256", "--mesh-only", "--check", str(path)]
    args = check if command == "check" else ["export", str(path)]
    assert _contract(Case(args, "inputs.profile = lone surrogate"))[0] is None


def test_a_plan_reader_on_a_fifo_with_no_writer(tmp_path: Path) -> None:
    """Blocks forever in open(); caught by the child's hang detector (60 s, the wall clock)."""
    fifo = special_files(tmp_path)["fifo"]
    assert _contract(Case(["verify", str(fifo)], "FIFO", child=True)) == (None, 2)


def test_a_plan_reader_on_dev_zero() -> None:
    """Reads without a size cap: MemoryError (the child's address space is capped at 2 GiB)."""
    assert _contract(Case(["timeline", "/dev/zero"], "/dev/zero", child=True)) == (None, 2)


@pytest.mark.parametrize(
    "args",
    [["plan", "--chips", "8", "--model-file"], ["calibrate"], ["models", "import"]],
    ids=["model-file", "calibrate", "models-import"],
)
def test_a_300_character_file_name(tmp_path: Path, args: list[str]) -> None:
    """OSError (ENAMETOOLONG) traceback from Path.is_file / is_dir in specs.py, hf.py and
    calibrate/detect.py; the plan readers already answer in one line."""
    path = tmp_path / ("n" * 300 + ".json")
    assert _contract(Case([*args, str(path)], "300-character name")) == (None, 2)


@pytest.mark.parametrize(("source", "renamed"), [("cannon", "collective"), ("meshslice", "cannon")])
def test_export_checks_each_layers_configuration(tmp_path: Path, source: str, renamed: str) -> None:
    """A layer relabelled with another algorithm: timeline, run and verify refuse its
    configuration (recorded_layer); export raised KeyError 'slices' (cannon's {} read as
    collective's) or exported the illegal configuration with exit 0 (S=64 as cannon)."""
    doc = json.loads(_small(source))
    doc["layers"][0]["algorithm"] = renamed
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert _contract(Case(["export", str(path)], f"layer 0: {source} -> {renamed}")) == (None, 2)


def test_a_plans_profile_field_is_not_read_as_a_file(tmp_path: Path) -> None:
    """inputs.profile = "/proc/kmsg": `timeline` opens it as a profile file and blocks forever
    (so do verify and run; any file the plan names is read). Run in a child: hang detector."""
    path = _plan_with(tmp_path, lambda d: d["inputs"].update(profile="/proc/kmsg"))
    case = Case(["timeline", str(path)], "inputs.profile = /proc/kmsg", child=True)
    assert _contract(case)[0] is None


def test_a_json_log_with_a_5000_digit_number(tmp_path: Path) -> None:
    """Campaign seed 27, case 2380: an rccl-tests JSON report whose bandwidth has 5,000 digits
    raised json's ValueError (integer string conversion limit) out of the table reader
    (calibrate/tabular.py)."""
    sample = REPO / "tests" / "calibrate" / "samples" / "rccl_reduce_scatter.json"
    text = sample.read_text(encoding="utf-8").replace("65.56", "9" * 5000, 1)
    assert "9" * 5000 in text
    path = tmp_path / "rccl.json"
    path.write_text(text, encoding="utf-8")
    assert _contract(Case(["calibrate", str(path), "--base", "tpuv4"], "5,000 digits"))[0] is None
