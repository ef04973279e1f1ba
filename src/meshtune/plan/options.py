"""The step's options as files record them: pydantic fields generated from the record
(:class:`meshtune.step.options.StepOptions`), for the plan file's ``inputs.levels`` and
``cluster`` sections and the validation set's rows (:class:`meshtune.validation.data.Run`).

A file model that records step options subclasses :class:`OptionFields`; its class keywords
say how its file format writes them (the key order, which options every file states, what a
file without a key means). Each generated field has the option's type (its choices, its
bounds) and the option's default; its description is the option's :class:`~meshtune.step.
options.Knob` summary.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from meshtune.step.options import StepOptions, field_default, option_fields


class OptionFields(BaseModel):
    """A file record with one field per step option (:class:`StepOptions`), generated when a
    subclass is created, from its class keywords:

    ``order``: the record's first keys as its file format writes them, declared fields and
    options together, up to its last option (the declared fields it does not name follow, in
    their order); an option it does not list (newer than the format) comes after the last
    option it lists, or after the declared fields;
    ``exclude``: options the record does not store;
    ``required``: options every file states (no default);
    ``missing``: what a file without an option's key means, where the file format says other
    than the option's default (files written before the option existed);
    ``descriptions``: the file format's description of an option, where it is not the
    option's summary (``None``: none).
    """

    stored_options: ClassVar[tuple[str, ...]] = ()
    """The options a subclass stores, in the record's order."""

    def __init_subclass__(
        cls,
        *,
        order: tuple[str, ...] = (),
        exclude: tuple[str, ...] = (),
        required: tuple[str, ...] = (),
        missing: Mapping[str, Any] | None = None,
        descriptions: Mapping[str, str | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        declared: dict[str, Any] = dict(inspect.get_annotations(cls))
        generated: dict[str, Any] = {}
        for f, annotation, about in option_fields(StepOptions):
            if f.name in exclude:
                continue
            if f.name in declared:
                raise TypeError(f"{cls.__name__} declares the option '{f.name}': exclude it")
            default = (missing or {}).get(f.name, field_default(f))
            description = (descriptions or {}).get(f.name, about.summary)
            setattr(
                cls,
                f.name,
                Field(description=description)
                if f.name in required
                else Field(default, description=description),
            )
            generated[f.name] = annotation
        cls.__annotations__ = _laid_out(declared, generated, order)
        cls.stored_options = tuple(generated)

    def option_values(self) -> dict[str, Any]:
        """The step options this record stores, by name."""
        return {name: getattr(self, name) for name in self.stored_options}

    @property
    def step_options(self) -> StepOptions:
        """The step options this record stores (those it excludes at their defaults)."""
        return StepOptions(**self.option_values())


def _laid_out(
    declared: dict[str, Any], generated: dict[str, Any], order: tuple[str, ...]
) -> dict[str, Any]:
    """The annotations of the ``declared`` and ``generated`` fields in ``order`` (the class
    docstring), the declared fields it does not name after them."""
    every = declared | generated
    if not order:
        return every
    unknown = [name for name in order if name not in every]
    if unknown:
        raise TypeError(f"the file order names fields the record does not have: {unknown}")
    options = [i for i, name in enumerate(order) if name in generated]
    at = options[-1] + 1 if options else len(order)
    newer = [name for name in generated if name not in order]
    rest = [name for name in declared if name not in order]
    return {name: every[name] for name in (*order[:at], *newer, *order[at:], *rest)}
