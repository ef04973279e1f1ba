"""Every command that prints a file-sourced string, on files whose free text is hostile (issue 38).

A model's ``display_name``, a profile's ``description`` (also one written by ``calibrate
--description``), a validation run's ``id`` and text, and the names of the files themselves carry
terminal escapes (OSC 52 sets the clipboard, CSI clears the screen), BEL, a C1 CSI, and rich
markup (``[/x]`` closes a tag that was never opened, ``[bold]`` opens one). Every output form of
every command must show them as text: no raw control byte but newline and tab on stdout or stderr
(:func:`fuzzlib.raw_control`), no traceback, exit code 0, 1 or 2, JSON still JSON.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from fuzzlib import REPO, Case, Outcome, assert_none, check_all, runner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.errors import printable
from meshtune.planner.make import make_plan

HOSTILE = "\x1b]52;c;aGk=\x07\x1b[2J\x1b[H\x9b31m\x08\r [/x] [bold]loud\x00 \\[/x]"
"""Control and escape characters, and markup, in one free-text value."""
TOML_HOSTILE = json.dumps(HOSTILE)
"""``HOSTILE`` as a TOML basic string (JSON's escapes are TOML's for these characters)."""
NAME = "evil"
"""The catalog name of the hostile model and profile (a plan records it; it must be a name)."""
STEM = "evil\x1b[2J\x07[bold]"
"""The stem of the files given by path: the plan and the log."""


HF_CONFIG = sorted((REPO / "tests" / "hf" / "configs").glob("*/config.json"))[0]


def _replace(text: str, key: str, value: str) -> str:
    """``text`` with the first ``key = ...`` line's value replaced by ``value``."""
    return re.sub(rf"(?m)^{key} = .*$", lambda _: f"{key} = {value}", text, count=1)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Catalog folders, a plan, a calibration log and a Hugging Face config, all hostile."""
    root = tmp_path_factory.mktemp("hostile")
    models, profiles, validation = root / "models", root / "profiles", root / "validation"
    for folder in (models, profiles, validation, root / "written"):
        folder.mkdir()
    model = (REPO / "models" / "gpt3.toml").read_text(encoding="utf-8")
    (models / f"{NAME}.toml").write_text(
        _replace(model, "display_name", TOML_HOSTILE), encoding="utf-8"
    )
    profile = (REPO / "profiles" / "tpuv4.toml").read_text(encoding="utf-8")
    (profiles / f"{NAME}.toml").write_text(
        _replace(profile, "description", TOML_HOSTILE), encoding="utf-8"
    )
    runs = (REPO / "validation" / "smith2022_mtnlg.toml").read_text(encoding="utf-8")
    inner = TOML_HOSTILE[1:-1]
    runs = re.sub(r'(?m)^id = "(.*)"$', lambda m: f'id = "{m[1]}{inner}"', runs)
    for key in ("where", "notes", "derivation", "citation", "model"):
        runs = re.sub(rf'(?m)^{key} = "', lambda m: f"{m[0]}{inner}", runs)
    (validation / "smith2022_mtnlg.toml").write_text(runs, encoding="utf-8")
    shutil.copy(REPO / "validation" / "bounds.toml", validation / "bounds.toml")
    plan = make_plan(
        load_model(models / f"{NAME}.toml"), load_profile(profiles / f"{NAME}.toml"), 4
    )
    plan_file = root / f"{STEM}.json"
    plan_file.write_text(plan.to_json(), encoding="utf-8")
    hf = json.loads(
        (REPO / "tests" / "hf" / "configs").glob("*/config.json").__next__().read_text()
    )
    hf["_name_or_path"] = HOSTILE
    (root / "config.json").write_text(json.dumps(hf), encoding="utf-8")
    log = REPO / "tests" / "calibrate" / "samples" / "nccl_all_gather_2ranks.log"
    shutil.copy(log, root / f"{STEM}.log")
    return {
        "root": root,
        "written": root / "written",
        "models": models,
        "profiles": profiles,
        "validation": validation,
        "plan": plan_file,
        "model": models / f"{NAME}.toml",
        "profile": profiles / f"{NAME}.toml",
        "log": root / f"{STEM}.log",
        "hf": root / "config.json",
    }


def _succeeds(outcome: Outcome) -> str | None:
    """The command ran (exit 0, or 1: a check that found a difference); ``--json``'s is JSON."""
    if outcome.exit_code not in (0, 1):
        return f"exit {outcome.exit_code}: {outcome.stderr[:300]!r}"
    return None


def _json_on_stdout(outcome: Outcome) -> str | None:
    """:func:`_succeeds`, and stdout is JSON."""
    wrong = _succeeds(outcome)
    if wrong:
        return wrong
    try:
        json.loads(outcome.stdout)
    except ValueError as exc:
        return f"--json printed no JSON: {exc}"
    return None


def _cases(h: dict[str, Path]) -> list[Case]:
    catalogs = {
        "MESHTUNE_MODELS_DIR": str(h["models"]),
        "MESHTUNE_PROFILES_DIR": str(h["profiles"]),
    }
    runs = {"MESHTUNE_VALIDATION_DIR": str(h["validation"])}
    model, profile, plan, log = str(h["model"]), str(h["profile"]), str(h["plan"]), str(h["log"])
    pinned = ["--chips", "4", "--mesh-only"]
    fit = [log, "--axis-map", "0", "--op", "all_gather", "--base", NAME, "--description", HOSTILE]
    lines = [
        (catalogs, ["models"]),
        (catalogs, ["models", "import", str(h["hf"]), "-o", str(h["root"] / "hf.toml"), "--force"]),
        (catalogs, ["profiles"]),
        (catalogs, ["plan", NAME, "--profile", NAME, *pinned]),
        (catalogs, ["plan", "--model-file", model, "--profile", profile, *pinned]),
        (catalogs, ["plan", NAME, "--profile", NAME, *pinned, "--json"]),
        (catalogs, ["plan", NAME, "--profile", NAME, *pinned, "--check", plan]),
        (
            catalogs,
            ["plan", NAME, "--profile", NAME, *pinned, "--dataflow", "xstn", "--check", plan],
        ),
        (
            catalogs,
            ["plan", NAME, "--profile", NAME, *pinned, "-o", str(h["written"] / STEM), "--force"],
        ),
        (catalogs, ["compare", NAME, "--profile", NAME, "--chips", "4", "--view", "all"]),
        (catalogs, ["compare", NAME, "--profile", NAME, "--chips", "4", "--json"]),
        (catalogs, ["gemm", "256", "256", "256", "--chips", "4", "--profile", profile]),
        (catalogs, ["gemm", "256", "256", "256", "--chips", "4", "--profile", NAME, "--json"]),
        (runs, ["validate"]),
        (runs, ["validate", "--markdown"]),
        (runs, ["validate", "--json"]),
        (runs, ["validate", "--profile", f"a100-80gb={profile}"]),
        (catalogs, ["calibrate", *fit, "--source", HOSTILE]),
        (catalogs, ["calibrate", *fit, "--json"]),
        (catalogs, ["calibrate", *fit, "-o", str(h["written"] / "fitted.toml"), "--force"]),
        ({"MESHTUNE_PROFILES_DIR": str(h["written"])}, ["profiles"]),
        ({"MESHTUNE_PROFILES_DIR": str(h["written"]), "COLUMNS": "200"}, ["profiles"]),
        ({**catalogs, "COLUMNS": "200"}, ["models"]),
        (catalogs, ["check", plan]),
        (catalogs, ["check", plan, "--json"]),
        (catalogs, ["verify", plan]),
        (catalogs, ["verify", plan, "--json"]),
        (catalogs, ["verify", plan, "--profile", profile]),
        (catalogs, ["timeline", plan]),
        (catalogs, ["timeline", plan, "--profile", profile]),
        *((catalogs, ["export", plan, "--to", to]) for to in ("megatron", "maxtext", "torchtitan")),
        *((catalogs, ["export", plan, "--to", to]) for to in ("deepspeed", "jax")),
    ]
    return [
        Case(
            args,
            "hostile free text",
            env=env,
            expect=_json_on_stdout if "--json" in args else _succeeds,
        )
        for env, args in lines
    ]


def test_no_raw_control_byte_from_a_hostile_file(hostile: dict[str, Path]) -> None:
    all_cases = _cases(hostile)
    assert_none(check_all(all_cases), len(all_cases))


def test_free_text_is_shown_as_written_with_its_controls_escaped(hostile: dict[str, Path]) -> None:
    catalogs = {"MESHTUNE_MODELS_DIR": str(hostile["models"])}
    wide = runner().invoke(app, ["models"], env={**catalogs, "COLUMNS": "400"})
    assert wide.exit_code == 0, wide.output
    assert printable(HOSTILE) in wide.stdout  # every control escaped, the markup as written
    assert "\\x1b]52;c;aGk=\\x07" in wide.stdout and "[/x] [bold]loud" in wide.stdout
