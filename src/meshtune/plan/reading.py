"""Reading a plan file: strict JSON, version 1 upgraded to version 2, then the models'
strict validation; and the registered algorithm, configuration and phase-1 layer a plan's layer
records."""

from __future__ import annotations

import json
from typing import Any

from pydantic import (
    ValidationError,
)

from meshtune._toml import describe_validation_error
from meshtune.algorithms.base import Algorithm
from meshtune.algorithms.registry import DEFAULT_ALGORITHM, REGISTRY
from meshtune.cost.config import Config
from meshtune.dataflow import (
    LayerDataflow,
    Stationary,
    layer_dataflow,
)
from meshtune.errors import MeshtuneError, PlanFileError
from meshtune.io import StrictJsonError, strict_json
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.plan.models import LayerPlan, Plan
from meshtune.plan.vocabulary import READABLE_VERSIONS


def upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 plan (MeshSlice only) in version-2 form. Total on any JSON object: a value
    not of version 1's shape (a layer that is not an object, slices that are not a mapping) is
    carried over as it is, for validation to name."""
    out = {**data, "schema_version": 2}
    if isinstance(data.get("inputs"), dict):
        inputs = {**data["inputs"], "algorithm": DEFAULT_ALGORITHM}
        model = inputs.get("model")
        if isinstance(model, dict) and "layers" in model:
            inputs["model"] = {("blocks" if k == "layers" else k): v for k, v in model.items()}
        out["inputs"] = inputs
    layers = data.get("layers") or []
    out["layers"] = [_upgrade_layer(x) for x in layers] if isinstance(layers, list) else layers
    candidates = data.get("candidates") or []
    if isinstance(candidates, list):
        candidates = [_upgrade_candidate(c) for c in candidates]
    out["candidates"] = candidates
    return out


def _upgrade_layer(layer: Any) -> Any:
    """A version-1 layer record in version-2 form (anything else as it is)."""
    if not isinstance(layer, dict):
        return layer
    new = {k: v for k, v in layer.items() if k not in ("slices", "slice_candidates")}
    slices = layer.get("slices")
    new["algorithm"] = DEFAULT_ALGORITHM
    new["config"] = {"slices": slices}
    tried = layer.get("slice_candidates") or []
    new["config_candidates"] = [{"slices": s} for s in tried] if isinstance(tried, list) else tried
    passes = layer.get("passes")
    if isinstance(passes, list):
        new["passes"] = [{**p, "iterations": slices} if isinstance(p, dict) else p for p in passes]
    return new


def _upgrade_candidate(candidate: Any) -> Any:
    """A version-1 candidate record in version-2 form (anything else as it is)."""
    if not isinstance(candidate, dict):
        return candidate
    slices = candidate.get("slices") or {}
    configs = (
        {name: {"slices": s} for name, s in slices.items()} if isinstance(slices, dict) else slices
    )
    rest = {k: v for k, v in candidate.items() if k != "slices"}
    return {**rest, "algorithm": DEFAULT_ALGORITHM, "configs": configs}


def recorded_layer(
    plan: Plan, layer: LayerPlan, error: type[MeshtuneError] = PlanFileError
) -> tuple[Algorithm, Config, LayerDataflow]:
    """The registered algorithm, configuration and full-size phase-1 layer a plan records.

    Raises ``error`` naming the layer for an unregistered algorithm, or a configuration that is
    not legal on the plan's mesh (with the legal ones).
    """
    algorithm = REGISTRY.get(layer.algorithm)
    if algorithm is None:
        raise error(
            f"layer {layer.name}: algorithm '{layer.algorithm}' is not registered; "
            f"known: {', '.join(REGISTRY)}"
        )
    mesh = plan.mesh.to_mesh()
    config = Config.of(**layer.config)
    # The block's fed_by links (which layer feeds which) come from the plan's model.
    fed_by = {fc.name: fc.fed_by for fc in fc_layers(plan.inputs.model, 1, 1)}.get(layer.name)
    fc = FcLayer(
        layer.name, layer.tokens, layer.in_features, layer.out_features, fed_by, layer.groups
    )
    full = layer_dataflow(fc, Stationary(layer.stationary), layer.transposed)
    legal, reason = algorithm.configs(full, mesh, plan.inputs.slice_block)
    if reason is not None or config not in legal:
        raise error(
            reason
            or f"layer {layer.name}: configuration {config.label} is not legal for "
            f"{algorithm.name} on {mesh.label} (legal: {'; '.join(c.label for c in legal)})"
        )
    return algorithm, config, full


def plan_json(text: str, source: str) -> dict[str, Any]:
    """A plan file's JSON object; :class:`PlanFileError` naming ``source`` when it is none.

    Strict JSON (:func:`meshtune.io.strict_json`): a key twice in one object, ``NaN`` /
    ``Infinity``, numbers beyond a float and deep nesting are refused.
    """
    try:
        data = strict_json(text)
    except json.JSONDecodeError as exc:
        raise PlanFileError(f"{source}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except StrictJsonError as exc:
        raise PlanFileError(f"{source}: invalid JSON: {exc}") from None
    except (RecursionError, ValueError):
        raise PlanFileError(f"{source}: JSON with out-of-range numbers or nesting") from None
    if not isinstance(data, dict):
        raise PlanFileError(f"{source}: a plan file holds a JSON object, not {type(data).__name__}")
    return data


def read_plan(text: str, source: str) -> Plan:
    """Parse a plan file's text (version 1 or 2); errors name ``source`` and the bad field.

    Types are strict (``"4"``, ``4.0`` and ``"true"`` are not the integer 4 or a flag), and
    every name is checked against its vocabulary (the fields' types). This is the schema only:
    commands read plans through :func:`meshtune.verify.run.load_plan`, which also applies verify's
    cheap structural checks.
    """
    data = plan_json(text, source)
    version = data.get("schema_version")
    if "schema_version" not in data:
        raise PlanFileError(f"{source}: no schema_version; is this a meshtune plan file?")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise PlanFileError(
            f"{source}: plan schema_version {version!r} is not supported (this meshtune reads "
            f"versions {readable})"
        )
    if version == 1:
        data = upgrade_v1(data)
    try:
        return Plan.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise PlanFileError(f"{source}: {describe_validation_error(exc)}") from None
