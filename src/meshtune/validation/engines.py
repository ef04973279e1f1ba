"""Training engines' host time per block and micro-batch, measured on runs outside the set.

Some engines make the GPU wait for host work on every block of every micro-batch: eager
PyTorch issuing each kernel from Python, hooks around each module, and, where
``CUDA_LAUNCH_BLOCKING=1`` makes every launch wait for the kernel before it (BigScience's
production script sets it, ``tr11-176B-ml.slurm``), nothing of that host time hides behind
the GPU's. The step model prices it as ``block_overhead_s``
(:class:`~meshtune.step.options.StepOptions`): a fixed time added to each block's forward,
recompute and backward on the critical path, so a 1F1B step gains ``x · c`` with ``x = (m +
pp − 1) · n`` slots × blocks of the pace chip.

The value ``c`` of an engine is measured, not fitted to the validation rows:
``validation/engines/engines.toml`` records it, and the file named by its ``fitted_on`` holds
the runs it is measured on (published runs that are *not* in the validation set: micro-batch
sweeps of one model and split). :func:`measure_engine` predicts every sweep run with ``c = 0``
and fits ``gap = a_sweep + c · x`` by least squares, one intercept per sweep (a model and
split) and one slope shared by all: only the change of the gap *within* a sweep, as the
micro-batch count changes, decides ``c``; what the model misses per step (the same at every
micro-batch size of a sweep) stays in the intercepts and is reported, not priced.
``x`` is the model's own sensitivity to ``c`` (the step's change per second of overhead), so
no second copy of the pipeline's slot count is written here.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, Field

from meshtune._toml import load_model_file
from meshtune.units import FROZEN
from meshtune.validation.folder import ValidationSetError, validation_dir

ENGINES_DIR = "engines"
"""The sub-folder of ``validation/`` that holds ``engines.toml`` and the sweeps."""


class Engine(BaseModel):
    """One engine's measured host time per block and micro-batch."""

    model_config = FROZEN

    block_overhead_ms: float = Field(ge=0, description="Milliseconds per block and micro-batch.")
    fitted_on: str = Field(min_length=1, description="Stem of the sweep file it is measured on.")
    derivation: str = Field(min_length=1)


class Engines(BaseModel):
    """``validation/engines/engines.toml``: the engines by key."""

    model_config = FROZEN

    engines: dict[str, Engine]


def engines_dir() -> Path:
    """``validation/engines/`` of the shipped validation folder."""
    return validation_dir() / ENGINES_DIR


@cache
def load_engines() -> Engines:
    """The shipped ``engines.toml`` (read once)."""
    return load_model_file(engines_dir() / "engines.toml", Engines, ValidationSetError)


def engine_overhead_s(engine: str | None, *, where: str = "") -> float:
    """The host time per block and micro-batch of ``engine`` (seconds; 0 for None); an
    unknown key raises :class:`ValidationSetError` naming ``where`` and the known keys."""
    if engine is None:
        return 0.0
    engines = load_engines().engines
    if engine not in engines:
        raise ValidationSetError(
            f"{where or 'engine'}: unknown engine '{engine}'; known: {', '.join(engines)}"
        )
    return engines[engine].block_overhead_ms / 1e3
