"""The plan: the autotuner's frozen, versioned result, and the function that makes one.

A :class:`Plan` echoes its inputs (the whole model spec, the profile's name and content hash,
chips, batch, sequence length, dataflow mode, requested algorithm, shape restriction), names the
chosen mesh, and for every FC layer records the algorithm and its configuration (e.g. the slice
count S), the phase-1 dataflows and sharding, and the predicted time of each pass split into
prologue / steady state / epilogue and hidden / exposed communication.

``PLAN_SCHEMA_VERSION`` changes whenever a field changes meaning or is removed. Version 2 added
the algorithm and its configuration per layer (version 1 had MeshSlice's ``slices`` and
``slice_candidates``, and the model's ``blocks`` were called ``layers``); :func:`read_plan`
still reads version-1 files, as MeshSlice plans.

The package, along its seams (this module names the public API; import from here):

* :mod:`~meshtune.plan.vocabulary`: the schema version, size limits and the closed vocabularies
  of a plan file's names;
* :mod:`~meshtune.plan.models`: :class:`Plan` and its parts (the plan file's models);
* :mod:`~meshtune.plan.reading`: :func:`read_plan` (strict JSON, version 1 upgraded) and
  :func:`recorded_layer`;
* :mod:`~meshtune.planner.records`: the records of search results (a layer's choice, a mesh
  candidate, the inputs, a cluster candidate's step fields);
* :mod:`~meshtune.planner.make`: :func:`make_plan` and the search of the requested algorithm(s);
* :mod:`~meshtune.planner.cluster`: a cluster plan's assembly from the cluster search.
"""

from __future__ import annotations

from meshtune.plan.models import (
    ClusterCandidatePlan,
    ClusterPlan,
    LayerPlan,
    MemoryPlan,
    MeshCandidate,
    MeshShape,
    PassPlan,
    Plan,
    PlanInputs,
    PlanLevels,
    StepPlan,
    plan_json_schema,
    plan_numbers,
)
from meshtune.plan.reading import plan_json, read_plan, recorded_layer, upgrade_v1
from meshtune.plan.vocabulary import (
    AUTO,
    FORMULAS,
    KNOB_PATTERN,
    MAX_DIMENSION,
    MAX_TOP,
    NAME_PATTERN,
    PLAN_SCHEMA_VERSION,
    READABLE_VERSIONS,
    AlgorithmName,
    CatalogName,
    Dimension,
    Knob,
    KnobConfig,
    LayerName,
    MeshLabel,
    Sharding,
    Tensor,
    catalog_name,
)

__all__ = [
    "AUTO",
    "FORMULAS",
    "KNOB_PATTERN",
    "MAX_DIMENSION",
    "MAX_TOP",
    "NAME_PATTERN",
    "PLAN_SCHEMA_VERSION",
    "READABLE_VERSIONS",
    "AlgorithmName",
    "CatalogName",
    "ClusterCandidatePlan",
    "ClusterPlan",
    "Dimension",
    "Knob",
    "KnobConfig",
    "LayerName",
    "LayerPlan",
    "MemoryPlan",
    "MeshCandidate",
    "MeshLabel",
    "MeshShape",
    "PassPlan",
    "Plan",
    "PlanInputs",
    "PlanLevels",
    "Sharding",
    "StepPlan",
    "Tensor",
    "catalog_name",
    "plan_json",
    "plan_json_schema",
    "plan_numbers",
    "read_plan",
    "recorded_layer",
    "upgrade_v1",
]
