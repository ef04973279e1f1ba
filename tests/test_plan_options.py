"""The step options as files record them (meshtune.plan.options): the fields generated from the
record, laid out in a file format's order, with its values for missing keys."""

from __future__ import annotations

from dataclasses import fields

import pytest

from meshtune.plan import ClusterPlan, PlanLevels
from meshtune.plan.options import OptionFields
from meshtune.plan.vocabulary import CLUSTER_FILE_ORDER, LEVELS_FILE_ORDER
from meshtune.step.options import StepOptions
from meshtune.units import FROZEN
from meshtune.validation.data import Run

OPTIONS = [f.name for f in fields(StepOptions)]


def test_sections_record_every_option_in_the_file_order() -> None:
    # the schema-2 keys first, an option newer than the format after them
    newer = [name for name in OPTIONS if name not in LEVELS_FILE_ORDER]
    assert list(PlanLevels.model_fields) == [*LEVELS_FILE_ORDER, *newer]
    assert list(ClusterPlan.model_fields)[: len(CLUSTER_FILE_ORDER) + len(newer)] == [
        *CLUSTER_FILE_ORDER,
        *newer,
    ]
    assert PlanLevels.stored_options == ClusterPlan.stored_options == tuple(OPTIONS)
    # a validation row states its own recompute (or none) and engine, and no headroom
    assert set(Run.stored_options) == set(OPTIONS) - {"recompute", "headroom", "block_overhead_s"}
    assert Run.model_fields["fp32_grads"].is_required()
    assert not Run.model_fields["schedule"].is_required()


def test_a_file_without_an_option_reads_as_its_format_says() -> None:
    # levels written before headroom and fp32_grads were recorded were planned without either;
    # an option newer than those keys reads at the record's default
    levels = PlanLevels.model_validate({})
    assert levels.step_options == StepOptions(headroom=0.0, fp32_grads=False)
    assert ClusterPlan.model_fields["attention"].default == "plain"
    assert ClusterPlan.model_fields["recompute"].is_required()


def test_an_option_the_order_does_not_list_follows_the_last_it_lists() -> None:
    class Section(OptionFields, order=("first", "recompute", "headroom", "last")):
        model_config = FROZEN

        first: int = 0
        last: int = 0
        after: int = 0

    newer = [name for name in OPTIONS if name not in ("recompute", "headroom")]
    assert list(Section.model_fields) == [
        "first",
        "recompute",
        "headroom",
        *newer,
        "last",
        "after",
    ]
    assert Section(headroom=0.5).step_options == StepOptions(headroom=0.5)


def test_a_declared_option_must_be_excluded() -> None:
    with pytest.raises(TypeError, match="declares the option 'dropout'"):

        class Clash(OptionFields):
            model_config = FROZEN

            dropout: bool = True

    with pytest.raises(TypeError, match="does not have"):

        class Unknown(OptionFields, order=("nonesuch",)):
            model_config = FROZEN
