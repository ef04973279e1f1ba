"""The measurement of an engine's host time per block and micro-batch from runs outside the
validation set (:mod:`meshtune.validation.engines` says what it prices and how it is fitted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from meshtune._toml import load_model_file
from meshtune.hardware.profile import HardwareProfile
from meshtune.units import FROZEN
from meshtune.validation.data import Run
from meshtune.validation.engines import engines_dir, load_engines
from meshtune.validation.folder import ValidationSetError

PROBE_S = 1e-3
"""The overhead (seconds) whose effect on a prediction gives the sensitivity ``x``: small
enough not to change any choice the predictor makes within a pinned run."""


class SweepRun(BaseModel):
    """One run of a sweep: the template run's fields with these replaced."""

    model_config = FROZEN

    sweep: str = Field(min_length=1, description="Runs of one model and split.")
    where: str = Field(min_length=1, description="Table and date in the source.")
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    dp: int = Field(gt=0)
    micro_batch: int = Field(gt=0)
    global_batch: int = Field(gt=0)
    step_s: float = Field(gt=0, description="Seconds per iteration as published.")
    memory_gb: float | None = Field(default=None, gt=0, description="As published.")


class Excluded(BaseModel):
    """A published run of the same tables left out of the fit, and why."""

    model_config = FROZEN

    where: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class Sweeps(BaseModel):
    """A sweep file: where the runs come from, the validation run whose configuration they
    share (everything but the fields a :class:`SweepRun` gives), and the runs."""

    model_config = FROZEN

    key: str
    citation: str = Field(min_length=1)
    engine: str = Field(min_length=1)
    template: str = Field(min_length=1, description="Id of a validation run.")
    template_note: str = Field(min_length=1)
    runs: list[SweepRun] = Field(min_length=2)
    excluded: list[Excluded] = Field(default_factory=list)


@dataclass(frozen=True)
class OverheadFit:
    """``gap = a_sweep + c · x`` fitted over the sweep runs: ``slope_s`` is ``c``,
    ``intercepts_s`` the ``a`` of each sweep, ``rms_s`` the residuals' root mean square."""

    slope_s: float
    intercepts_s: dict[str, float]
    rms_s: float
    runs: int


def load_sweeps(stem: str) -> Sweeps:
    """``validation/engines/<stem>.toml``."""
    path = engines_dir() / f"{stem}.toml"
    return load_model_file(path, Sweeps, ValidationSetError, key=path.stem)


def sweep_runs(sweeps: Sweeps, template: Run) -> list[Run]:
    """Each sweep run as a validation :class:`Run`: ``template`` with the run's shape, split,
    batch and step, its engine cleared (the fit needs the prediction without the overhead)."""
    runs = []
    for i, row in enumerate(sweeps.runs):
        update = row.model_dump(exclude={"sweep", "where", "memory_gb"})
        runs.append(
            template.model_copy(
                update={
                    **update,
                    "id": f"{sweeps.key}/{row.sweep}-mbs{row.micro_batch}-{i}",
                    "kv_heads": row.heads,
                    "ffn_hidden": 4 * row.hidden,
                    "chips": row.tp * row.pp * row.dp,
                    "measured": row.step_s,
                    "engine": None,
                    "group": None,
                }
            )
        )
    return runs


def fit_overhead(points: Sequence[tuple[str, float, float]]) -> OverheadFit:
    """Least squares of ``gap = a_sweep + c · x`` over ``(sweep, x, gap_s)`` points: one
    intercept per sweep, one shared slope. Raises :class:`ValidationSetError` when no sweep
    has two different ``x`` (the slope is then undetermined)."""
    sweeps = sorted({sweep for sweep, _, _ in points})
    design = np.zeros((len(points), len(sweeps) + 1))
    gaps = np.array([gap for _, _, gap in points], dtype=float)
    for row, (sweep, x, _) in enumerate(points):
        design[row, sweeps.index(sweep)] = 1.0
        design[row, -1] = x
    if np.linalg.matrix_rank(design) < design.shape[1]:
        raise ValidationSetError(
            "the sweeps do not determine a slope: each needs runs at two micro-batch counts"
        )
    coef, *_ = np.linalg.lstsq(design, gaps, rcond=None)
    residuals = gaps - design @ coef
    return OverheadFit(
        slope_s=float(coef[-1]),
        intercepts_s={sweep: float(a) for sweep, a in zip(sweeps, coef[:-1], strict=True)},
        rms_s=float(np.sqrt(np.mean(residuals**2))),
        runs=len(points),
    )


def measure_engine(
    engine: str, profiles: Mapping[str, HardwareProfile], templates: Mapping[str, Run]
) -> OverheadFit:
    """Fit ``engine``'s overhead on its sweeps (module docstring); ``templates`` maps run ids
    to validation runs (the sweep file's template must be among them)."""
    from meshtune.validation.predict import predict_row

    record = load_engines().engines.get(engine)
    if record is None:
        raise ValidationSetError(f"unknown engine '{engine}'")
    sweeps = load_sweeps(record.fitted_on)
    if sweeps.template not in templates:
        raise ValidationSetError(
            f"{sweeps.key}: template '{sweeps.template}' is not a validation run"
        )
    points = []
    for row, run in zip(sweeps.runs, sweep_runs(sweeps, templates[sweeps.template]), strict=True):
        base = predict_row(run, profiles).predicted_s
        probed = predict_row(run, profiles, block_overhead_s=PROBE_S).predicted_s
        if base is None or probed is None:
            raise ValidationSetError(f"{run.id}: not predictable")
        points.append((row.sweep, (probed - base) / PROBE_S, run.step_s - base))
    return fit_overhead(points)
