"""meshtune: an autotuner for 2D tensor parallelism (MeshSlice, ISCA 2025).

Library API (the CLI is a thin skin over it)::

    from meshtune import load_model, load_profile, make_plan
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), chips=256)
    plan.mesh.rows, plan.mesh.cols  # (32, 8)

Phase 1 (:mod:`meshtune.dataflow`), phase 2 (:mod:`meshtune.search`) and the pure cost
functions (:mod:`meshtune.cost`) are importable on their own; calibration from benchmark logs
lives in :mod:`meshtune.calibrate`.
"""

from __future__ import annotations

from meshtune._version import __version__
from meshtune.catalog import load_model, load_profile
from meshtune.errors import (
    InfeasibleError,
    LogFormatError,
    MeshtuneError,
    PlanFileError,
    ProfileError,
    SpecError,
    VerifyError,
)
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan, read_plan
from meshtune.planner.make import make_plan
from meshtune.search import search
from meshtune.step.options import ClusterOptions, StepOptions

__all__ = [
    "ClusterOptions",
    "HardwareProfile",
    "InfeasibleError",
    "LogFormatError",
    "MeshtuneError",
    "ModelSpec",
    "Plan",
    "PlanFileError",
    "ProfileError",
    "SpecError",
    "StepOptions",
    "VerifyError",
    "__version__",
    "load_model",
    "load_profile",
    "make_plan",
    "read_plan",
    "search",
]
