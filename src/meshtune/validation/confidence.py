"""How far to trust a plan's step time: the prediction interval that the validation set
supports, and whether the plan lies inside the range that was validated.

Cheap by design, for every ``meshtune plan``: it reads ``validation/bounds.toml`` alone and
predicts nothing. The interval and the validated ranges are the ones ``meshtune validate``
measured, recorded there; :func:`meshtune.validation.report.regressions` fails (in the test
suite and in ``validate --check``) when they no longer match what ``validate`` measures, so the
numbers printed here stay the measured ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from meshtune.model.spec import ModelSpec
from meshtune.validation.bounds import (
    INTERVAL_COVERAGE,
    RangeCheck,
    in_validated_range,
    load_bounds,
)


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
    ``profile``, from the ``bounds.toml`` of the validation set in ``folder`` (default: the
    shipped one)."""
    bounds = load_bounds(folder)
    return Confidence(
        interval=bounds.recorded.interval90_pct / 100,
        coverage=INTERVAL_COVERAGE,
        runs=bounds.recorded.runs,
        range=in_validated_range(model, profile, chips, bounds.validated_range),
    )
