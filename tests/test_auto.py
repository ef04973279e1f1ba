"""``--algorithm auto``: only algorithms an engine runs (unless ``--all-algorithms``), tables
sorted by what they rank, and a progress line on slow searches (issue 14)."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

from meshtune.algorithms.registry import (
    REGISTRY,
    algorithm_names,
    auto_names,
    engine_names,
)
from meshtune.cli import app
from meshtune.engines.passes import SUPPORTED_ALGORITHMS
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import make_plan, requested_names
from meshtune.report.plan import candidates_table
from meshtune.report.progress import working


def test_auto_searches_what_an_engine_runs() -> None:
    assert engine_names() == SUPPORTED_ALGORITHMS
    assert set(engine_names()) == {"meshslice", "collective", "wang", "cannon", "1d_tp", "fsdp"}
    assert auto_names() == engine_names()
    assert auto_names(all_algorithms=True) == algorithm_names()
    assert requested_names("auto") == list(engine_names())
    assert requested_names("primepar") == ["primepar"]
    assert not REGISTRY["onesided"].engine


def test_auto_never_picks_an_algorithm_no_engine_runs(
    gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    plan = make_plan(gpt3, tpuv4, 16, algorithm="auto", top=20)
    assert {layer.algorithm for layer in plan.layers} <= set(engine_names())
    assert {c.algorithm for c in plan.candidates} <= set(engine_names())
    every = make_plan(gpt3, tpuv4, 16, algorithm="auto", top=20, all_algorithms=True)
    assert {c.algorithm for c in every.candidates} - set(engine_names())
    assert every.fc_time_s <= plan.fc_time_s


def test_the_candidates_table_is_sorted_by_fc_time(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    plan = make_plan(gpt3, tpuv4, 16, algorithm="auto", top=20)
    out = io.StringIO()
    Console(file=out, width=200).print(candidates_table(plan))
    order = [c.fc_time_s for c in sorted(plan.candidates, key=lambda c: c.fc_time_s)]
    assert order == sorted(c.fc_time_s for c in plan.candidates)
    rows = [line for line in out.getvalue().splitlines() if line.startswith("│")]
    ranks = [int(row.split("│")[1]) for row in rows]
    assert ranks == list(range(1, len(plan.candidates) + 1))
    first = sorted(plan.candidates, key=lambda c: c.fc_time_s)[0]
    assert first.algorithm in rows[0]


def test_working_stays_silent_off_a_terminal_and_on_quick_work() -> None:
    out = io.StringIO()
    with working("planning", console=Console(file=out)):
        pass
    assert out.getvalue() == ""
    terminal = Console(file=out, force_terminal=True)
    with working("planning", after_s=60, console=terminal):
        pass
    assert out.getvalue() == ""


def test_working_shows_its_message_on_slow_work() -> None:
    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True)
    with working("planning gpt3", after_s=0.0, console=terminal):
        time.sleep(0.5)
    assert "planning gpt3" in out.getvalue()


@pytest.mark.parametrize("extra", [[], ["--all-algorithms"]])
def test_plan_auto_cli(extra: list[str]) -> None:
    result = CliRunner().invoke(
        app, ["plan", "gpt3", "-n", "16", "--mesh-only", "-a", "auto", "--json", *extra]
    )
    assert result.exit_code == 0, result.output
    assert '"algorithm": "auto"' in result.stdout
