"""Structure-aware plan fuzzing, hostile strings and special files (issue 20, fuzz acceptance).

Every command that reads a plan (`verify`, `timeline`, `export`, `run` up to where it would
compile, `plan --check`) gets mutants of real plans made by :mod:`planfuzz`: swapped layers,
another algorithm's configuration, inconsistent dataflows and shardings, contradicting cluster
sections, huge numbers, wrong types, duplicate / deleted / added keys, hostile strings. Every
command that reads a file gets the special files. Same contract as the other fuzz tests
(:mod:`fuzzlib`), plus: an `export` that succeeds prints Python that compiles, with the clean
plan's top-level statements; an output file named without --force keeps its bytes.

Seeds are fixed; ``MESHTUNE_FUZZ_CASES=N`` runs N mutants per target. tests/fuzz/campaign.py
runs the same generators at scale.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from fuzzlib import Case, assert_none, cases, check_all
from planfuzz import (
    HOSTILE,
    PLAN_COMMANDS,
    Base,
    bases,
    clean_export,
    export_oracle,
    hostile_path_cases,
    plan_case,
    special_file_cases,
    writer,
)

# The string fields whose text reaches a terminal, a trace file or a generated module.
STRING_FIELDS = [
    ("inputs", "model", "display_name"),
    ("inputs", "model", "name"),
    ("inputs", "model", "source"),
    ("inputs", "profile"),
    ("inputs", "algorithm"),
    ("tool_version",),
    ("layers", 0, "name"),
    ("layers", 1, "passes", 0, "formula"),
]


@pytest.fixture(scope="module")
def all_bases(tmp_path_factory: pytest.TempPathFactory) -> list[Base]:
    return bases(tmp_path_factory.mktemp("bases"))


def test_structure_aware_mutants_of_every_plan(tmp_path: Path, all_bases: list[Base]) -> None:
    rng = random.Random("plan-structure")
    small = [b for b in all_bases if b.chips <= 16]
    all_cases = [plan_case(rng, rng.choice(small), tmp_path) for _ in range(cases(150))]
    all_cases += [plan_case(rng, b, tmp_path) for b in all_bases if b.chips > 16]
    assert_none(check_all(all_cases, writer(tmp_path)), len(all_cases))


def _with(text: bytes, path: tuple[str | int, ...], value: str) -> bytes:
    doc = json.loads(text)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(doc).encode()


def test_hostile_strings_in_plan_fields(tmp_path: Path, all_bases: list[Base]) -> None:
    """Each hostile string in a string field through every command that prints or generates
    code; `export`'s module compiles and has the clean plan's top-level statements."""
    rng = random.Random("hostile-strings")
    base = next(b for b in all_bases if b.name == "small-meshslice")
    clean = list(clean_export(base.text))
    plan = tmp_path / "plan.json"
    all_cases = []
    for label, text in HOSTILE.items():
        for command in PLAN_COMMANDS:
            field = rng.choice(STRING_FIELDS)
            data = _with(base.text, field, text)
            how = f"{'.'.join(map(str, field))} = hostile {label}"
            args = (
                ["plan", *base.derive, "--check", str(plan)]
                if command == "check"
                else [command, str(plan)]
            )
            expect = export_oracle(clean, None) if command == "export" else None
            all_cases.append(Case(args, how, data, kind=f"hostile:{label}", expect=expect))
    assert_none(check_all(all_cases, writer(tmp_path)), len(all_cases))


def test_hostile_plan_file_names(tmp_path: Path, all_bases: list[Base]) -> None:
    base = next(b for b in all_bases if b.name == "small-meshslice")
    all_cases = list(hostile_path_cases(tmp_path, base.text))
    assert_none(check_all(all_cases), len(all_cases))


def test_special_files_through_every_command(tmp_path: Path) -> None:
    all_cases = special_file_cases(tmp_path)
    assert_none(check_all(all_cases), len(all_cases))
