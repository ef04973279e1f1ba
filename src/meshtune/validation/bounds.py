"""``validation/bounds.toml``: what ``meshtune validate`` measured, recorded in one small file.

* ``[recorded]``: MAPE, median, max, the 90 % interval and the run count the current step model
  reaches; the regression guard (:func:`meshtune.validation.report.regressions`) fails when
  ``validate`` measures worse figures, or figures that no longer match.
* ``[goals]``: the target figures the step model is held to (docs/validation.md says which it
  meets).
* ``[validated_range.<profile>]``: per catalog profile, the [min, max] chip count and FC
  parameter count of the runs validated on it. ``meshtune plan`` reads them to say whether a
  plan lies inside the validated range without parsing the validation set; the same guard fails
  when they no longer equal what the validation set gives.

Every ``meshtune plan`` loads this module (:mod:`meshtune.validation.confidence`), so it reads
one small file and imports nothing the plan does not already import.
"""

# No ``from __future__ import annotations`` in this module: pydantic would then evaluate every
# field's annotation from its string when each model class is created, on every start-up of
# ``meshtune plan``. A method annotation naming a class not yet defined is quoted.

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from meshtune._toml import load_model_file
from meshtune.model.layers import fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.step.memory import block_parameters
from meshtune.units import FROZEN
from meshtune.validation.folder import BOUNDS_STEM, ValidationSetError, validation_dir

INTERVAL_COVERAGE = 0.9
"""The share of validated runs a prediction interval covers."""


class Recorded(BaseModel):
    """The figures the current model reaches (the regression guard's baseline), percent."""

    model_config = FROZEN

    mape_pct: float = Field(ge=0)
    median_pct: float = Field(ge=0)
    max_pct: float = Field(ge=0)
    interval90_pct: float = Field(
        ge=0, description="Half-width covering 90 % of the runs (the plan report prints it)."
    )
    runs: int = Field(gt=0, description="Runs predicted when the figures were recorded.")
    tolerance_pct: float = Field(ge=0, description="Allowed worsening, percentage points.")


class Goals(BaseModel):
    """The target figures the step model is held to (``[goals]``; docs/validation.md says
    which it meets), percent / correlation."""

    model_config = FROZEN

    mape_pct: float = Field(ge=0)
    korthikanti2022_mape_pct: float = Field(ge=0)
    max_pct: float = Field(ge=0)
    bloom_spearman: float = Field(ge=-1, le=1)


class ValidatedRange(BaseModel):
    """The [min, max] chip count and FC parameter count of the runs validated on one profile."""

    model_config = FROZEN

    chips: tuple[int, int] = Field(description="[fewest, most] chips of a validated run.")
    fc_parameters: tuple[int, int] = Field(
        description="[smallest, largest] FC parameter count of a validated run's model."
    )

    @model_validator(mode="after")
    def _ordered(self) -> "ValidatedRange":
        for name in ("chips", "fc_parameters"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise ValueError(f"{name} must be [min, max] with 0 < min <= max, not {[lo, hi]}")
        return self

    def toml(self, profile: str) -> str:
        """The table as ``bounds.toml`` holds it (what a stale-range message asks to paste)."""
        return (
            f"[validated_range.{profile}]\n"
            f"chips = [{self.chips[0]}, {self.chips[1]}]\n"
            f"fc_parameters = [{self.fc_parameters[0]}, {self.fc_parameters[1]}]\n"
        )


class Bounds(BaseModel):
    """``validation/bounds.toml``: recorded figures, goals and validated ranges."""

    model_config = FROZEN

    recorded: Recorded
    goals: Goals
    validated_range: dict[str, ValidatedRange] = Field(
        description="Per catalog profile, the range its validated runs cover."
    )


def load_bounds(folder: Path | None = None) -> Bounds:
    """Read ``validation/bounds.toml`` (from ``folder``, default the shipped validation set)."""
    path = (folder if folder is not None else validation_dir()) / f"{BOUNDS_STEM}.toml"
    return load_model_file(path, Bounds, ValidationSetError)


def fc_parameters(model: ModelSpec) -> int:
    """FC weights of the model (blocks · Σ in · out; embeddings left out): its size for the
    validated-range check."""
    return int(model.blocks * block_parameters(fc_layers(model, 1, 1)))


@dataclass(frozen=True)
class ValidatedPoint:
    """What the range check needs of one validated run: the catalog profile it is predicted
    with, its chip count and its model's :func:`fc_parameters`."""

    profile: str
    chips: int
    parameters: int


def validated_ranges(points: Iterable[ValidatedPoint]) -> dict[str, ValidatedRange]:
    """Per profile, the [min, max] chips and FC parameters of ``points`` (profiles sorted)."""
    by_profile: dict[str, list[ValidatedPoint]] = {}
    for point in points:
        by_profile.setdefault(point.profile, []).append(point)
    return {
        name: ValidatedRange(
            chips=(min(p.chips for p in same), max(p.chips for p in same)),
            fc_parameters=(min(p.parameters for p in same), max(p.parameters for p in same)),
        )
        for name, same in sorted(by_profile.items())
    }


@dataclass(frozen=True)
class RangeCheck:
    """Whether a plan is inside the validated range, and each way it is not."""

    inside: bool
    reasons: tuple[str, ...]


def in_validated_range(
    model: ModelSpec, profile: str, chips: int, ranges: Mapping[str, ValidatedRange]
) -> RangeCheck:
    """Whether a plan of ``model`` on ``chips`` chips of ``profile`` lies inside what the
    validation set covers: the profile was validated, and the chip count and FC parameter
    count lie within the [min, max] of the runs validated on that profile (``ranges``, e.g.
    :attr:`Bounds.validated_range` or :func:`validated_ranges`)."""
    found = ranges.get(profile)
    if found is None:
        return RangeCheck(
            False, (f"profile '{profile}' has no validated runs ({', '.join(sorted(ranges))} do)",)
        )
    reasons = []
    lo, hi = found.chips
    if not lo <= chips <= hi:
        reasons.append(f"{chips:,} chips is outside the validated {lo:,}–{hi:,}")
    size = fc_parameters(model)
    plo, phi = found.fc_parameters
    if not plo <= size <= phi:
        reasons.append(
            f"{size / 1e9:.1f}B FC parameters is outside the validated "
            f"{plo / 1e9:.1f}B–{phi / 1e9:.1f}B"
        )
    return RangeCheck(not reasons, tuple(reasons))
