"""The CLI's choice lists are the library's: every choice option of ``meshtune plan`` offers the
values of the step option it sets, and so do the plan file's and the validation rows' field
types, so that a value added to the step model cannot be missing from the CLI or from plan
files (all three are generated from the options record; held together here)."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest
from typer.testing import CliRunner

from meshtune.cli import app
from meshtune.cost.compute import PRECISIONS
from meshtune.plan import ClusterPlan, PlanLevels
from meshtune.step.cp import CP_COMMS
from meshtune.step.memory import RECOMPUTE_MODES
from meshtune.step.options import GradAccumulation
from meshtune.step.pipeline import SCHEDULES
from meshtune.step.work import ATTENTION_KINDS
from meshtune.validation.data import Run


def _literal_values(annotation: Any) -> set[str]:
    """The values of a ``Literal`` (inside ``Annotated`` or ``| None`` where it is)."""
    while get_args(annotation) and not isinstance(get_args(annotation)[0], str):
        annotation = get_args(annotation)[0]
    return set(get_args(annotation))


CHOICES: list[tuple[tuple[str, ...], str]] = [
    (RECOMPUTE_MODES, "recompute"),
    (ATTENTION_KINDS, "attention"),
    (get_args(GradAccumulation), "grad_accumulation"),
    (CP_COMMS, "cp_comm"),
    (SCHEDULES, "schedule"),
    (PRECISIONS, "precision"),
]


def _cli_choices(field: str) -> set[str]:
    """The choices ``meshtune plan`` offers for the option of ``field``, from the message that
    refuses another value."""
    flag = "--" + field.replace("_", "-")
    got = CliRunner().invoke(app, ["plan", "gpt3", "-n", "16", flag, "nonesuch"])
    assert got.exit_code == 2
    listed = re.search(r"'nonesuch' is not one of ((?:'[^']*',? ?)+)", " ".join(got.output.split()))
    assert listed is not None, got.output
    return set(re.findall(r"'([^']*)'", listed.group(1)))


@pytest.mark.parametrize(("library", "field"), CHOICES)
def test_cli_choices_are_the_step_options(library: tuple[str, ...], field: str) -> None:
    assert _cli_choices(field) == set(library)
    assert _literal_values(PlanLevels.model_fields[field].annotation) == set(library)
    assert _literal_values(ClusterPlan.model_fields[field].annotation) == set(library)
    assert _literal_values(Run.model_fields[field].annotation) == set(library)
