"""MaxText: a plan as config overrides (flat YAML), and such a config read back.

Names are MaxText's (``src/maxtext/configs/base.yml``): ``ici_*_parallelism`` /
``dcn_*_parallelism`` per mesh axis, ``per_device_batch_size``, ``max_target_length``,
``num_pipeline_microbatches``, ``num_layers_per_pipeline_stage``, ``num_pipeline_repeats``,
``gradient_accumulation_steps``, ``remat_policy``, ``shard_optimizer_over_data``.

Levels go to mesh axes from the innermost out, as meshtune numbers chips (mesh axis 1, axis
0, CP, the EP ranks, pipeline stages, DP replicas; :mod:`meshtune.hardware.tiers` prices the EP
all-to-all over the ``ep · tp`` chips next to the TP mesh, the order Megatron-Core uses):
axis 1 on ``tensor``, axis 0 on ``tensor_sequence``, CP on ``context``
(``context_parallel_strategy`` ``ring`` or ``all_gather``, meshtune's ``cp_comm``), PP on
``stage`` (``ici_pipeline_parallelism``), DP on ``data`` (ZeRO 3: ``fsdp``) and, of DP, the EP
ranks on ``expert`` (MaxText shards every layer's batch over ``expert`` too, so its EP ranks
are DP replicas, as in meshtune). ``context`` and ``expert`` are written only when CP or EP
is above 1. Each level takes ICI while the profile's first tier (a slice, a node) has room
and DCN beyond; a profile without tiers is one ICI domain. A 2D TP plan also gets the
``logical_axis_rules`` that shard each weight and activation over ``tensor_sequence`` ×
``tensor`` as the plan's phase 1 does; MaxText's GSPMD runs those shardings as all-gather /
reduce-scatter GeMMs (meshtune's ``collective``), so MeshSlice's slicing is named as not
expressible, with meshtune's prediction for ``collective`` on the same mesh.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import cast

from meshtune.algorithms.registry import FRAMEWORK_TP_ALGORITHM, GSPMD_ALGORITHM
from meshtune.catalog import load_profile
from meshtune.errors import MeshtuneError
from meshtune.export.common import (
    MESH_ONLY_NOTE,
    Split,
    header,
    plan_split,
    predict,
    step_notes,
)
from meshtune.export.flatyaml import read_flat_yaml
from meshtune.export.setup import Setup, SetupReader, positive, whole, whole_or_auto
from meshtune.plan import LayerPlan, Plan, Tensor

NAME = "maxtext"
TITLE = "MaxText"

ROWS, COLS = "tensor_sequence", "tensor"
REMAT = {"none": "minimal_with_context", "selective": "minimal", "full": "full"}
_RECOMPUTE = {policy: mode for mode, policy in REMAT.items()}
# MaxText's logical names of each FC layer's weight dimensions (in, out) and activations.
_WEIGHT_NAMES = {
    "qkv": ("embed", "q_heads"),
    "attn_out": ("heads", "embed"),
    "mlp_up": ("embed", "mlp"),
    "mlp_down": ("mlp", "embed"),
}
_ACTIVATION_NAMES = {
    "qkv": ("activation_embed", "activation_heads"),
    "attn_out": ("activation_heads", "activation_embed"),
    "mlp_up": ("activation_embed", "activation_mlp"),
    "mlp_down": ("activation_mlp", "activation_embed"),
}
_AXES = ("data", "fsdp", "stage", "expert", "context", ROWS, COLS)
_PARALLELISM = {
    "data": "data",
    "fsdp": "fsdp",
    "expert": "expert",
    "stage": "pipeline",
    "context": "context",
    ROWS: ROWS,
    COLS: "tensor",
}
CP_STRATEGY = {"ring": "ring", "all-gather": "all_gather"}
_CP_COMM_OF = {strategy: comm for comm, strategy in CP_STRATEGY.items()}


def _ici_units(plan: Plan, notes: list[str]) -> int:
    """Chips of one ICI domain: the profile's first tier, or every chip without tiers."""
    try:
        tiers = load_profile(plan.inputs.profile).tiers
    except MeshtuneError:
        notes.append(f"profile '{plan.inputs.profile}' not in the catalog: every level on ICI")
        return plan.inputs.chips
    first = tiers[0].chips if tiers else None
    return first or plan.inputs.chips


def placement(split: Split, unit: int) -> dict[str, tuple[int, int]]:
    """(ICI, DCN) size of each MaxText mesh axis: levels fill an ICI domain of ``unit`` chips
    from the innermost (``tensor``) out, the rest of each level goes over DCN."""
    dp_axis = "fsdp" if split.zero == 3 else "data"
    sizes = {
        COLS: split.cols,
        ROWS: split.rows,
        "context": split.cp,
        "stage": split.pp,
        "expert": split.ep,
        dp_axis: split.dp // split.ep,
    }
    room, out = unit, {}
    for axis in (COLS, ROWS, "context", "expert", "stage", dp_axis):
        ici = math.gcd(sizes[axis], room)
        room //= ici
        out[axis] = (ici, sizes[axis] // ici)
    return {axis: out.get(axis, (1, 1)) for axis in _AXES}


def axis_rules(plan: Plan, notes: list[str]) -> list[tuple[str, str]]:
    """(logical name, mesh axis) for the plan's phase-1 sharding (module docstring); a name two
    layers shard differently keeps the first layer's axis, and the conflict is noted."""
    chosen: dict[str, tuple[str, str]] = {"activation_length": (ROWS, "tokens")}
    for layer in plan.layers:
        for tensor, names in (("W", _WEIGHT_NAMES), ("X", None), ("Y", None)):
            tensor = cast(Tensor, tensor)
            dims = layer.sharding[tensor]
            for dim, axis in zip(dims, (ROWS, COLS), strict=True):
                name = _logical(layer, tensor, dim, names)
                if name is None:
                    continue
                if name in chosen and chosen[name][0] != axis:
                    notes.append(
                        f"{layer.name}: {tensor} shards '{name}' over {axis}, but "
                        f"{chosen[name][1]} put it on {chosen[name][0]}; MaxText gives a logical "
                        "name one axis (XLA reshards this layer)"
                    )
                    continue
                chosen.setdefault(name, (axis, f"{layer.name} {tensor}"))
    return [(name, axis) for name, (axis, _) in chosen.items()]


def _logical(
    layer: LayerPlan, tensor: str, dim: str, names: dict[str, tuple[str, str]] | None
) -> str | None:
    """MaxText's logical name of dimension ``dim`` of ``tensor`` in ``layer`` (None: tokens)."""
    if dim == "tokens":
        return None
    table = names or _ACTIVATION_NAMES
    return table[layer.name][0 if dim == "in" else 1]


def _yaml(value: object) -> str:
    return json.dumps(value) if isinstance(value, str | bool) else str(value)


def render(plan: Plan, source: str) -> str:
    """The plan as MaxText config overrides (module docstring), flat YAML."""
    split = plan_split(plan)
    model = plan.inputs.model
    notes = [MESH_ONLY_NOTE] if split.mesh_only else []
    notes += step_notes(plan, split, "MaxText")
    one_d = split.cols == 1
    # a ring of P chips (P x 1) is 1D TP: MaxText's 'tensor' axis
    split_axes = replace(split, rows=1, cols=split.rows) if one_d else split
    places = placement(split_axes, _ici_units(plan, notes))
    used = {"expert": split.ep > 1, "context": split.cp > 1}
    axes = [axis for axis in _AXES if used.get(axis, True)]
    values: dict[str, object] = {}
    for net, at in (("ici", 0), ("dcn", 1)):
        for axis in axes:
            values[f"{net}_{_PARALLELISM[axis]}_parallelism"] = places[axis][at]
    if split.cp > 1:
        values["context_parallel_strategy"] = CP_STRATEGY[split.cp_comm]
    values["per_device_batch_size"] = split.batch / split.chips
    values["max_target_length"] = split.seq_len
    if split.pp > 1:
        values["num_pipeline_microbatches"] = split.micro_batches
        per_chunk = split.even_chunks()
        if per_chunk is None:
            notes.append(f"{split.blocks} layers do not split into {split.pp} x {split.vpp} chunks")
        else:
            values["num_layers_per_pipeline_stage"] = per_chunk
            values["num_pipeline_repeats"] = split.vpp
    else:
        values["gradient_accumulation_steps"] = split.micro_batches
    values["remat_policy"] = REMAT[split.recompute]
    if split.recompute == "none":
        notes.append("no recompute: MaxText's nearest remat_policy is minimal_with_context")
    values["shard_optimizer_over_data"] = split.zero in (1, 2)
    values["attention"] = "flash" if split.attention == "fused" else "dot_product"
    values |= {
        "base_num_decoder_layers": model.blocks,
        "base_emb_dim": model.hidden,
        "base_mlp_dim": model.ffn_hidden,
        "base_num_query_heads": model.heads,
        "base_num_kv_heads": model.kv_heads,
        "head_dim": model.head_dim,
        "vocab_size": model.vocab,
    }
    if model.moe is not None:
        values |= {
            "num_experts": model.moe.experts,
            "num_experts_per_tok": model.moe.top_k,
            "base_moe_mlp_dim": model.moe.expert_ffn_hidden,
        }
    lines = [f"{k}: {_yaml(v)}" for k, v in values.items()]
    if not one_d:
        rules = [
            (n, ["context", a] if n == "activation_length" and split.cp > 1 else [a])
            for n, a in axis_rules(plan, notes)
        ]
        batch = ["data", "fsdp"] + (["expert"] if split.ep > 1 else [])
        lines.append(f"mesh_axes: {json.dumps(axes)}")
        lines.append("logical_axis_rules: [")
        lines += [f"  [{json.dumps(n)}, {json.dumps(a)}]," for n, a in rules]
        lines.append(f'  ["activation_batch", {json.dumps(batch)}],')
        lines.append("]")
        lines.append(f"data_sharding: [{json.dumps(axes)}]")
    runs = FRAMEWORK_TP_ALGORITHM if one_d else GSPMD_ALGORITHM
    if split.algorithm != runs:
        nearest = replace(split, algorithm=runs)
        notes.append(
            f"MaxText's GSPMD runs {'1D TP' if one_d else 'all-gather / reduce-scatter 2D GeMMs'}"
            f", not {split.algorithm}; meshtune predicts {predict(plan, nearest)}"
        )
    head = [f"# {line}" for line in header(plan, split, source, "MaxText config overrides", notes)]
    return "\n".join(head + lines) + "\n"


# ---------------------------------------------------------------------------------- reading

_MODEL_KEYS = {
    "base_num_decoder_layers": "blocks",
    "base_emb_dim": "hidden",
    "base_mlp_dim": "ffn_hidden",
    "base_num_query_heads": "heads",
    "base_num_kv_heads": "kv_heads",
    "head_dim": "head_dim",
    "vocab_size": "vocab",
}
_ATTENTION = {
    "flash": "fused",
    "cudnn_flash_te": "fused",
    "dot_product": "plain",
    "autoselected": "",
}
_UNSUPPORTED = (
    "sequence",
    "context_autoregressive",
    "context_usp_ulysses",
    "autoregressive",
)


def read(text: str, source: str) -> Setup:
    """The split a MaxText config describes (:class:`Setup`): TP from ``tensor`` (axis 1) ×
    ``tensor_sequence`` (axis 0), PP from ``pipeline``, CP from ``context``, DP from ``data``
    × ``fsdp`` × ``expert`` and EP from ``expert`` (ICI × DCN each; ``-1`` (auto) counts as
    1); keys meshtune does not model are listed as unused."""
    reader = SetupReader(source, TITLE)
    values = dict(read_flat_yaml(text, source))

    auto: list[str] = []

    def size(name: str) -> int:
        total = 1
        for net in ("ici", "dcn"):
            key = f"{net}_{name}_parallelism"
            value = whole_or_auto(reader, key, values.pop(key, 1), -1)
            if value is None:
                auto.append(key)
            else:
                total *= value
        return total

    cols, rows, pp = size("tensor"), size("tensor_sequence"), size("pipeline")
    data, fsdp = size("data"), size("fsdp")
    ep, cp = size("expert"), size("context")
    strategy = reader.choice(
        "context_parallel_strategy", values.pop("context_parallel_strategy", None), _CP_COMM_OF
    )
    for key in ("num_experts", "num_experts_per_tok", "base_moe_mlp_dim"):
        values.pop(key, None)  # implied by the model (docs/export.md)
    for name in _UNSUPPORTED:
        reader.unsupported(f"{name} parallelism", size(name))
    model = {field: values.pop(key, None) for key, field in _MODEL_KEYS.items()}
    model = {k: None if v is None else whole(reader, k, v) for k, v in model.items()}
    per_device = values.pop("per_device_batch_size", None)
    if per_device is not None:
        per_device = positive(reader, "per_device_batch_size", per_device)
    micro = values.pop("num_pipeline_microbatches", None)
    accumulation = values.pop("gradient_accumulation_steps", None)
    micro_batches = (
        None if micro is None else whole_or_auto(reader, "num_pipeline_microbatches", micro, -1)
    )
    if accumulation is not None:
        micro_batches = (micro_batches or 1) * whole(
            reader, "gradient_accumulation_steps", accumulation
        )
    per_chunk = values.pop("num_layers_per_pipeline_stage", None)
    values.pop("num_pipeline_repeats", None)  # follows from the layers per stage
    remat = reader.choice("remat_policy", values.pop("remat_policy", None), _RECOMPUTE)
    seq = values.pop("max_target_length", None)
    shard_opt = values.pop("shard_optimizer_over_data", False)
    attention = reader.choice("attention", values.pop("attention", None), _ATTENTION)
    layout = [k for k in ("mesh_axes", "logical_axis_rules", "data_sharding") if k in values]
    if layout:
        reader.note(f"{', '.join(layout)}: not read (the mesh comes from ici_* and dcn_*)")
        for key in layout:
            values.pop(key)
    if shard_opt is True:
        reader.note("shard_optimizer_over_data: meshtune picks the lowest ZeRO stage that fits")
    reader.unused += list(values)
    if any("data" not in a and "fsdp" not in a for a in auto):
        raise reader.error(f"{', '.join(auto)} = -1 (auto): give the TP and PP sizes explicitly")
    if auto:
        levels = "TP x PP" + (" x CP" if cp > 1 else "")
        reader.note(f"{', '.join(auto)} = -1: DP takes the chips {levels} leave")
    if rows > 1 and cols > 1:
        algorithm = GSPMD_ALGORITHM
    else:
        algorithm = FRAMEWORK_TP_ALGORITHM
        rows, cols = rows * cols, 1
    return reader.setup(
        rows=rows,
        cols=cols,
        pp=pp,
        dp=None if auto else data * fsdp * ep,
        layers_per_chunk=whole(reader, "num_layers_per_pipeline_stage", per_chunk)
        if pp > 1 and per_chunk is not None
        else None,
        micro_batches=micro_batches,
        batch_per_chip=per_device,
        seq_len=None if seq is None else whole(reader, "max_target_length", seq),
        zero=3 if fsdp > 1 or any("fsdp" in a for a in auto) else (None if shard_opt else 0),
        attention=None if attention in (None, "autoselected") else _ATTENTION[attention],
        recompute=None if remat is None else _RECOMPUTE[remat],
        algorithm=algorithm,
        ep=ep,
        cp=cp,
        # MaxText's default strategy is all_gather
        cp_comm=_CP_COMM_OF[strategy or "all_gather"] if cp > 1 else None,
        model=model,
    )
