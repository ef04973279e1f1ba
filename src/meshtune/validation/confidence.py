"""How far to trust a plan's step time (issue 19, item 9): the prediction interval that the
validation set supports, and whether the plan lies inside the range that was validated.

Cheap by design, for every ``meshtune plan``: it reads ``validation/*.toml`` and
``validation/bounds.toml`` and predicts nothing. The interval is the one ``meshtune validate``
measured, recorded in ``bounds.toml``; :func:`meshtune.validation.report.regressions` fails
(in the test suite and in ``validate --check``) when the recorded interval or run count no
longer matches what ``validate`` measures, so the number printed here stays the measured one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from meshtune.specs import ModelSpec
from meshtune.validation.data import Source, load_validation_set
from meshtune.validation.predict import HARDWARE_PROFILES
from meshtune.validation.report import load_bounds
from meshtune.validation.stats import (
    INTERVAL_COVERAGE,
    RangeCheck,
    ValidatedPoint,
    fc_parameters,
    in_validated_range,
)


def validated_points(sources: list[Source]) -> list[ValidatedPoint]:
    """Profile (the catalog profile its hardware is predicted with), chips and FC parameters of
    every expressible run."""
    return [
        ValidatedPoint(HARDWARE_PROFILES[run.hardware], run.chips, fc_parameters(run.spec()))
        for source in sources
        for run in source.runs
        if run.hardware in HARDWARE_PROFILES
    ]


@dataclass(frozen=True)
class Confidence:
    """The recorded interval (``interval``: half-width as a fraction of the step, covering
    ``coverage`` of ``runs`` validated runs) and the plan's range check."""

    interval: float
    coverage: float
    runs: int
    range: RangeCheck

    def describe(self) -> str:
        """One sentence for the report, e.g. ``±41 %: 90 % of 53 published runs ...``."""
        text = (
            f"step within ±{self.interval:.0%} for {self.coverage:.0%} of the {self.runs} "
            "published runs meshtune validate predicts"
        )
        if self.range.inside:
            return text + "; this plan is inside the validated range"
        return text + "; this plan is outside the validated range: " + "; ".join(self.range.reasons)


def step_confidence(
    model: ModelSpec, profile: str, chips: int, folder: Path | None = None
) -> Confidence:
    """The :class:`Confidence` of a plan of ``model`` on ``chips`` chips of the catalog profile
    ``profile``, from the validation set in ``folder`` (default: the shipped one)."""
    bounds = load_bounds(folder)
    points = validated_points(load_validation_set(folder))
    return Confidence(
        interval=bounds.recorded.interval90_pct / 100,
        coverage=INTERVAL_COVERAGE,
        runs=bounds.recorded.runs,
        range=in_validated_range(model, profile, chips, points),
    )
