"""Fuzz the framework-configuration readers of ``meshtune plan --from`` (issue 15, item 2).

Seeded mutations of each exported file (every format's mutators, as the other fuzz targets)
run through the command (:mod:`fuzzlib`'s contract: exit 0/1/2, no traceback, one stderr line
on exit 2), and hypothesis text straight into each reader: a :class:`Setup` or a
:class:`SetupFileError`, nothing else.
"""

from __future__ import annotations

import contextlib
import random
import re
from pathlib import Path

import pytest
from fuzzlib import (
    HUGE,
    Case,
    assert_none,
    byte_mutators,
    cases,
    check_all,
    json_mutators,
    mutate,
    toml_mutators,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshtune.catalog import load_model, load_profile
from meshtune.errors import SetupFileError
from meshtune.export import READABLE, export_plan, read_setup
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions

_MUTATORS = {
    "megatron": byte_mutators,
    "maxtext": byte_mutators,
    "torchtitan": toml_mutators,
    "deepspeed": json_mutators,
}


def _exported(target: str) -> bytes:
    plan = make_plan(
        load_model("gpt3"), load_profile("tpuv4"), 256, cluster=ClusterOptions(pp=8, dp=4)
    )
    return export_plan(plan, target, "p.json").encode()


@pytest.mark.parametrize("target", READABLE)
def test_plan_from_a_mutated_file(target: str, tmp_path: Path) -> None:
    rng = random.Random(f"from:{target}")
    path = tmp_path / "setup"
    original = _exported(target)
    all_cases = []
    for _ in range(cases(12)):
        data, how = mutate(rng, original, _MUTATORS[target]())
        args = ["plan", "gpt3", "-n", "256", "--from", target, str(path), "--json"]
        all_cases.append(Case(args, how, data))

    def write(case: Case) -> None:
        assert case.data is not None
        path.write_bytes(case.data)

    assert_none(check_all(all_cases, write), len(all_cases))


_BARE_NUMBERS = [
    "²",
    "٣",
    "８",
    ".",
    ".e5",
    "+.",
    "-.",
    "._",
    "1_",
    "1e308",
    "-1e308",
    "1e400",
    "5e-324",
    "-1.0",
    "1.0",
    "0",
    "-1",
    "0x8",
    "0o7",
    "1e",
    "nan",
    ".inf",
    HUGE,
]
"""Hostile numbers as a file states them bare; each format also gets each of them quoted."""
_NUMBER = re.compile(r"(?<=[ =:])-?[0-9]+(?:\.[0-9]+)?(?=[\s,}\]])")


def _hostile_numbers(target: str) -> list[str]:
    """Each of :data:`_BARE_NUMBERS` as it can appear in ``target``'s format: bare and quoted
    (a Megatron argument is always text: bare only)."""
    if target == "megatron":
        return _BARE_NUMBERS
    return _BARE_NUMBERS + [f'"{n}"' for n in _BARE_NUMBERS if n != HUGE]


@pytest.mark.parametrize("target", READABLE)
def test_plan_from_with_hostile_numbers(target: str, tmp_path: Path) -> None:
    """Every number of an exported file, one at a time, replaced by a hostile one (issue 38):
    the command reads it or refuses it in one line, never a traceback."""
    rng = random.Random(f"numbers:{target}")
    path = tmp_path / "setup"
    original = _exported(target).decode()
    comment = re.compile(r"^#.*$", re.MULTILINE)
    skipped = [range(*c.span()) for c in comment.finditer(original)]
    spots = [m for m in _NUMBER.finditer(original) if not any(m.start() in c for c in skipped)]
    values = _hostile_numbers(target)
    all_cases = []
    for _ in range(cases(24)):
        spot, value = rng.choice(spots), rng.choice(values)
        data = original[: spot.start()] + value + original[spot.end() :]
        how = f"number at {spot.start()} ({spot[0]}) replaced by {value[:20]!r}"
        args = ["plan", "gpt3", "-n", "256", "--from", target, str(path), "--json"]
        all_cases.append(Case(args, how, data.encode()))

    def write(case: Case) -> None:
        assert case.data is not None
        path.write_bytes(case.data)

    assert_none(check_all(all_cases, write), len(all_cases))


@pytest.mark.parametrize("target", READABLE)
def test_readers_take_any_text(target: str) -> None:
    base = _exported(target).decode()

    @settings(
        max_examples=cases(150),
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(cut=st.integers(0, len(base)), noise=st.text(max_size=40))
    def one(cut: int, noise: str) -> None:
        with contextlib.suppress(SetupFileError):  # a Setup, or this error: nothing else
            read_setup(target, base[:cut] + noise + base[cut:], "f")

    one()
