"""The CLI's choice lists are the library's: every ``--option`` Enum of ``meshtune plan`` has the
values of the step option it sets, and so do the plan file's field types, so that a value added
to the step model cannot be missing from the CLI or from plan files (typer needs Enum classes,
pydantic Literals: the three are written separately and held together here)."""

from __future__ import annotations

from enum import Enum
from typing import Any, get_args

import pytest

from meshtune.cli import plan as cli_plan
from meshtune.cost.compute import PRECISIONS
from meshtune.plan import PlanLevels
from meshtune.step import option_fields
from meshtune.step.cp import CP_COMMS
from meshtune.step.memory import RECOMPUTE_MODES
from meshtune.step.options import GRAD_ACCUMULATIONS
from meshtune.step.pipeline import SCHEDULES
from meshtune.step.work import ATTENTION_KINDS


def _literal_values(annotation: Any) -> set[str]:
    """The values of a ``Literal`` (inside ``Annotated`` where it is)."""
    while get_args(annotation) and not isinstance(get_args(annotation)[0], str):
        annotation = get_args(annotation)[0]
    return set(get_args(annotation))


CHOICES: list[tuple[type[Enum], tuple[str, ...], str]] = [
    (cli_plan.RecomputeOption, RECOMPUTE_MODES, "recompute"),
    (cli_plan.AttentionOption, ATTENTION_KINDS, "attention"),
    (cli_plan.GradAccumulationOption, GRAD_ACCUMULATIONS, "grad_accumulation"),
    (cli_plan.CpCommOption, CP_COMMS, "cp_comm"),
    (cli_plan.ScheduleOption, SCHEDULES, "schedule"),
    (cli_plan.PrecisionOption, PRECISIONS, "precision"),
]


@pytest.mark.parametrize(("option", "library", "field"), CHOICES)
def test_cli_choices_are_the_step_options(
    option: type[Enum], library: tuple[str, ...], field: str
) -> None:
    assert {member.value for member in option} == set(library)
    assert _literal_values(PlanLevels.model_fields[field].annotation) == set(library)


def test_option_field_types_are_the_step_options() -> None:
    assert _literal_values(option_fields.GradAccumulationField) == set(GRAD_ACCUMULATIONS)
    assert _literal_values(option_fields.CpCommField) == set(CP_COMMS)
    assert _literal_values(option_fields.ScheduleField) == set(SCHEDULES)
    assert _literal_values(option_fields.PrecisionField) == set(PRECISIONS)
