"""DeepSpeed: a plan as a DeepSpeed JSON config, and such a config read back.

Keys are DeepSpeed's (``deepspeed/runtime/constants.py``, ``runtime/zero/config.py``,
``runtime/tensor_parallel/config.py``, ``runtime/config.py``): ``train_batch_size`` (=
micro-batch × accumulation × DP), ``train_micro_batch_size_per_gpu``,
``gradient_accumulation_steps``, ``zero_optimization.stage``, ``bf16.enabled``,
``tensor_parallel.autotp_size`` (automatic 1D TP) and ``pipeline.stages`` (the stage count the
model's ``PipelineModule(num_stages=…)`` must match). JSON has no comments: the plan's
prediction and what DeepSpeed cannot express go under a ``"meshtune"`` key, which DeepSpeed
does not read. DeepSpeed's TP is 1D (a 2D mesh gets meshtune's prediction for TP = P_r · P_c);
its pipeline engine runs 1F1B without interleaving and with ZeRO stage 0 or 1 only;
activation checkpointing is chosen in the model code. Expert parallelism too is the model
code's: ``deepspeed.moe.layer.MoE(num_experts=…, ep_size=…)``, whose EP ranks divide the DP
world (``deepspeed/utils/groups.py``), as in meshtune; the export names the call and keeps
``ep_size`` under the ``"meshtune"`` key. DeepSpeed has no ring context parallelism (its
Ulysses sequence parallelism moves heads by all-to-all): a CP plan is named as not
expressible, with meshtune's prediction for its CP ranks made DP replicas.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from meshtune._version import __version__
from meshtune.algorithms.registry import FRAMEWORK_TP_ALGORITHM
from meshtune.errors import PlanFileError
from meshtune.export.common import plan_split, predict, step_words, tp_notes, without_cp
from meshtune.export.setup import Setup, SetupReader, whole, whole_or_auto
from meshtune.plan import Plan, plan_json

NAME = "deepspeed"
TITLE = "DeepSpeed"


def render(plan: Plan, source: str) -> str:
    """The plan's DeepSpeed JSON config (module docstring)."""
    split = plan_split(plan)
    notes = tp_notes(plan, split, TITLE)
    if split.pp > 1 and (split.vpp > 1 or split.zero > 1):
        nearest = replace(split, vpp=1, zero=min(split.zero, 1))
        notes.append(
            "DeepSpeed's pipeline engine runs plain 1F1B with ZeRO 0 or 1; meshtune predicts "
            + predict(plan, nearest)
        )
    if split.cp > 1:
        notes.append(
            f"DeepSpeed has no ring context parallelism (Ulysses sequence parallelism is an "
            f"all-to-all over heads); nearest: CP {split.cp} made DP replicas. meshtune predicts "
            + predict(plan, without_cp(split))
        )
    notes.append(
        f"recompute {split.recompute}: set it in the model code (deepspeed.checkpointing); "
        f"the pipeline's stage count is PipelineModule(num_stages={split.pp})"
    )
    expert: dict[str, int] = {}
    if split.ep > 1:
        notes.append(
            f"expert parallelism: set it in the model code, deepspeed.moe.layer.MoE("
            f"num_experts={plan.inputs.model.moe.experts if plan.inputs.model.moe else 1}, "
            f"ep_size={split.ep})"
        )
        expert["ep_size"] = split.ep
    world = without_cp(split)  # DeepSpeed's DP world is chips / (TP · PP)
    config: dict[str, Any] = {
        "train_batch_size": world.batch,
        "train_micro_batch_size_per_gpu": world.micro_batch,
        "gradient_accumulation_steps": world.micro_batches,
        "zero_optimization": {"stage": split.zero, "overlap_comm": True},
        "bf16": {"enabled": plan.inputs.bytes_per_element == 2},
        "tensor_parallel": {"autotp_size": split.tp},
        "pipeline": {"stages": split.pp},
        "meshtune": {
            "exported_by": f"meshtune {__version__}",
            "plan_file": source,
            "model": plan.inputs.model.name,
            "chips": split.chips,
            "profile": plan.inputs.profile,
            "plan": f"{split.label}, ZeRO {split.zero}, recompute {split.recompute}",
            "predicted": step_words(plan),
            **expert,
            "not_expressible": notes,
        },
    }
    return json.dumps(config, indent=2) + "\n"


# ---------------------------------------------------------------------------------- reading

_READ = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def read(text: str, source: str) -> Setup:
    """The split a DeepSpeed JSON config describes (:class:`Setup`): TP from
    ``tensor_parallel.autotp_size``, PP from ``pipeline.stages``, DP = chips / (TP · PP); keys
    meshtune does not model are listed as unused (the ``meshtune`` key is skipped)."""
    reader = SetupReader(source, TITLE)
    try:  # strict JSON: no duplicate keys, finite numbers
        data = plan_json(text, source)
    except PlanFileError as exc:
        raise reader.error(str(exc).removeprefix(f"{source}: ")) from None
    data.pop("meshtune", None)

    def table(name: str) -> dict[str, Any]:
        value = data.pop(name, {})
        if not isinstance(value, dict):
            raise reader.error(f"{name} is not an object")
        return value

    numbers = {k: whole(reader, k, data.pop(k)) if k in data else None for k in _READ}
    zero_table, tp_table, pipe = (
        table("zero_optimization"),
        table("tensor_parallel"),
        table("pipeline"),
    )
    zero = zero_table.pop("stage", 0)
    if type(zero) is not int or zero not in (0, 1, 2, 3):
        raise reader.error(f"zero_optimization.stage: {zero!r} is not one of 0, 1, 2, 3")
    autotp = tp_table.pop("autotp_size", 0)  # 0: automatic TP off
    tp = whole_or_auto(reader, "tensor_parallel.autotp_size", autotp, 0) or 1
    stages = pipe.pop("stages", "auto")
    pp = 1 if stages == "auto" else whole(reader, "pipeline.stages", stages)
    table("bf16")
    for name, rest in (
        ("zero_optimization", zero_table),
        ("tensor_parallel", tp_table),
        ("pipeline", pipe),
    ):
        reader.unused += [f"{name}.{k}" for k in rest if k != "overlap_comm"]
    reader.unused += list(data)
    return reader.setup(
        rows=tp,
        cols=1,
        pp=pp,
        micro_batch=numbers["train_micro_batch_size_per_gpu"],
        micro_batches=numbers["gradient_accumulation_steps"],
        batch=numbers["train_batch_size"],
        zero=zero,
        algorithm=FRAMEWORK_TP_ALGORITHM,
    )
