"""The command line of the options record: one typer option per pinnable level of
:class:`~meshtune.step.options.ClusterOptions` and per field of
:class:`~meshtune.step.options.StepOptions` with a help line, generated from the fields (their
flag spelling, help line, default, the choices of a ``Literal`` type, the range of a number),
as torchtitan builds its command line from one config tree.

A command takes them as ``**options`` and :func:`with_options` gives it the parameters typer
reads (typer builds a command from its function's ``inspect.signature``, which honours
``__signature__``); :func:`step_options` and :func:`cluster_options` turn what was given into
the records.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import typer

from meshtune.step.options import (
    ClusterOptions,
    StepOptions,
    base_type,
    field_default,
    option_fields,
    option_flags,
)

F = TypeVar("F", bound=Callable[..., Any])


def option_parameters() -> list[inspect.Parameter]:
    """A keyword parameter per option with a flag, levels first, in the records' order."""
    parameters = []
    for record in (ClusterOptions, StepOptions):
        for f, annotation, about in option_fields(record):
            spelling = option_flags(f, annotation, about)
            if not spelling:
                continue
            option = typer.Option(
                field_default(f), *spelling, help=about.help, min=about.low, max=about.high
            )
            parameters.append(
                inspect.Parameter(
                    f.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=option,
                    annotation=base_type(annotation),
                )
            )
    return parameters


def with_options(*, before: str) -> Callable[[F], F]:
    """A decorator: the command's ``**options`` become :func:`option_parameters`, listed
    before its parameter ``before`` (where ``--help`` shows them)."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        at = [p.name for p in own].index(before)
        parameters = [*own[:at], *option_parameters(), *own[at:]]
        command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return command

    return decorate


def pinned_levels(given: Mapping[str, Any]) -> list[str]:
    """The levels the command line pins (those not at their default), by field name."""
    return [
        f.name
        for f, _, _ in option_fields(ClusterOptions)
        if f.name in given and given[f.name] != field_default(f)
    ]


def step_options(given: Mapping[str, Any], **fixed: Any) -> StepOptions:
    """The step options of the command line, with ``fixed`` (fields without a flag of their
    own, such as ``block_overhead_s`` from ``--engine``)."""
    flagged = {f.name: given[f.name] for f, _, _ in option_fields(StepOptions) if f.name in given}
    return StepOptions(**flagged, **fixed)


def cluster_options(given: Mapping[str, Any], step: StepOptions) -> ClusterOptions:
    """The search options of the command line: its levels around ``step``."""
    levels = {f.name: given[f.name] for f, _, _ in option_fields(ClusterOptions)}
    return ClusterOptions(**levels, step=step)
