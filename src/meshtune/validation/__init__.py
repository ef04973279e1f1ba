"""Validation of the step model against published training runs (``meshtune validate``).

* :mod:`~meshtune.validation.data`: the ``validation/*.toml`` files and the FLOP conventions
  that turn each source's stated measure into a step time;
* :mod:`~meshtune.validation.predict`: :func:`predict_row`, the one row → prediction mapping;
* :mod:`~meshtune.validation.stats`: error figures, Spearman ρ and prediction intervals;
* :mod:`~meshtune.validation.bounds`: ``validation/bounds.toml`` (the recorded figures, goals
  and validated ranges) and the validated-range check;
* :mod:`~meshtune.validation.report`: :func:`validate`, the regression guard, JSON / Markdown /
  plot;
* :mod:`~meshtune.validation.confidence`: what a plan report says of its step,
  ``step_confidence(model, profile_name, chips)``: the recorded 90 % interval and the
  validated-range check, without predicting anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from meshtune._lazy import lazy_attributes

if TYPE_CHECKING:
    from meshtune.validation.bounds import RangeCheck, in_validated_range
    from meshtune.validation.data import Run, load_validation_set
    from meshtune.validation.folder import ValidationSetError
    from meshtune.validation.predict import Prediction, predict_row
    from meshtune.validation.report import ValidationReport, validate
    from meshtune.validation.stats import prediction_interval, spearman

# Public names resolve on first use (as in meshtune.calibrate), so that `meshtune plan`, which
# reads only meshtune.validation.confidence, does not import the predictor and the report.
_LAZY: dict[str, str] = {
    "RangeCheck": "meshtune.validation.bounds",
    "in_validated_range": "meshtune.validation.bounds",
    "Run": "meshtune.validation.data",
    "ValidationSetError": "meshtune.validation.folder",
    "load_validation_set": "meshtune.validation.data",
    "Prediction": "meshtune.validation.predict",
    "predict_row": "meshtune.validation.predict",
    "ValidationReport": "meshtune.validation.report",
    "validate": "meshtune.validation.report",
    "prediction_interval": "meshtune.validation.stats",
    "spearman": "meshtune.validation.stats",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "Prediction",
    "RangeCheck",
    "Run",
    "ValidationReport",
    "ValidationSetError",
    "in_validated_range",
    "load_validation_set",
    "predict_row",
    "prediction_interval",
    "spearman",
    "validate",
]
