"""torchtitan: a plan as the TOML job config's ``[training]``, ``[parallelism]`` and
``[activation_checkpoint]`` sections, and such a file read back.

Names are those of torchtitan's TOML job config (``torchtitan/config/job_config.py``, releases
0.1 to 0.2; later releases build the same ``ParallelismConfig`` fields in Python):
``data_parallel_replicate_degree``, ``data_parallel_shard_degree`` (FSDP2),
``fsdp_reshard_after_forward``, ``tensor_parallel_degree``, ``pipeline_parallel_degree``,
``pipeline_parallel_schedule``, ``pipeline_parallel_microbatch_size``,
``pipeline_parallel_layers_per_stage``, ``context_parallel_degree``,
``context_parallel_rotate_method``, ``expert_parallel_degree``,
``expert_tensor_parallel_degree``;
``[training]`` ``local_batch_size`` (per DP rank), ``global_batch_size``, ``seq_len``;
``[activation_checkpoint]`` ``mode`` and ``selective_ac_option``.

torchtitan's tensor parallelism is 1D (DTensor, Megatron-style with sequence parallelism), so a
2D mesh is named as not expressible with meshtune's prediction for TP = P_r · P_c. ZeRO: 0 is
replicated DP, 3 is FSDP2 (``data_parallel_shard_degree``), and 1 / 2 are FSDP2 that keeps the
gathered weights after the forward (``fsdp_reshard_after_forward = "never"``, ZeRO-2's traffic).

CP: chips = replicate · shard · CP · TP · PP (``distributed/parallel_dims.py``), as in
meshtune; the K/V pass is ``context_parallel_rotate_method`` ``"alltoall"`` (one shift per
step: meshtune's ``ring``) or ``"allgather"``. torchtitan's FSDP always spans shard × CP, so a
ZeRO-0 plan with CP gets its weights sharded over the CP ranks (named). EP: with
``expert_tensor_parallel_degree`` = TP (each expert over the TP group, as meshtune shards
it) the EP ranks come from ``data_parallel_shard_degree`` × CP, never from the replicate
degree: a ZeRO-0 plan with EP is written as FSDP2 over its DP (ZeRO 3), named and priced.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any, Literal

from meshtune.algorithms.registry import FRAMEWORK_TP_ALGORITHM
from meshtune.export.common import Split, header, plan_split, predict, tp_notes
from meshtune.export.setup import Setup, SetupReader, whole_or_auto
from meshtune.plan import Plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

NAME = "torchtitan"
TITLE = "torchtitan"
ROTATE: dict[str, Literal["alltoall", "allgather"]] = {
    "ring": "alltoall",
    "all-gather": "allgather",
}
_CP_COMM_OF = {method: comm for comm, method in ROTATE.items()}


def _toml(value: object) -> str:
    return json.dumps(value) if isinstance(value, str | bool) else str(value)


def _expert_notes(plan: Plan, split: Split, notes: list[str]) -> Split:
    """The split torchtitan is given for the plan's EP and CP (module docstring), with the
    notes on what it changes."""
    if split.ep > 1 and split.zero == 0:
        nearest = replace(split, zero=3)
        notes.append(
            f"torchtitan takes EP {split.ep} from the FSDP ranks (data_parallel_shard_degree x "
            "context_parallel_degree), not from replicated DP: written as FSDP2 over the DP "
            f"replicas (ZeRO 3). meshtune predicts {predict(plan, nearest)}"
        )
        return nearest
    if split.cp > 1 and split.zero == 0:
        notes.append(
            f"torchtitan's FSDP spans the CP ranks: the weights are sharded over CP {split.cp} "
            "although the plan replicates them (ZeRO 0); meshtune does not price that sharding"
        )
    return split


def render(plan: Plan, source: str) -> str:
    """The plan's torchtitan TOML sections (module docstring)."""
    split = plan_split(plan)
    notes = tp_notes(plan, split, TITLE)
    split = _expert_notes(plan, split, notes)
    if split.zero in (1, 2):
        notes.append(
            f"torchtitan has no ZeRO-{split.zero}: FSDP2 keeping the weights gathered after the "
            "forward (reshard_after_forward never) moves ZeRO-2's bytes"
        )
    training = {
        "local_batch_size": split.batch // split.dp,
        "global_batch_size": split.batch,
        "seq_len": split.seq_len,
    }
    if split.pp == 1:  # gradient accumulation: one micro-batch per local batch
        training["local_batch_size"] = split.micro_batch
    parallelism: dict[str, object] = {
        "data_parallel_replicate_degree": split.dp if split.zero == 0 else 1,
        "data_parallel_shard_degree": 1 if split.zero == 0 else split.dp,
    }
    if split.zero in (1, 2):
        parallelism["fsdp_reshard_after_forward"] = "never"
    parallelism |= {
        "tensor_parallel_degree": split.tp,
        "pipeline_parallel_degree": split.pp,
        "context_parallel_degree": split.cp,
        "expert_parallel_degree": split.ep,
    }
    if split.cp > 1:
        parallelism["context_parallel_rotate_method"] = ROTATE[split.cp_comm]
    if split.ep > 1:
        parallelism["expert_tensor_parallel_degree"] = split.tp
    if split.pp > 1:
        parallelism["pipeline_parallel_schedule"] = "Interleaved1F1B" if split.vpp > 1 else "1F1B"
        parallelism["pipeline_parallel_microbatch_size"] = split.micro_batch
        per_chunk = split.even_chunks()
        if per_chunk is not None:
            parallelism["pipeline_parallel_layers_per_stage"] = per_chunk
    checkpoint: dict[str, object] = {"mode": split.recompute}
    if split.recompute == "selective":
        checkpoint["selective_ac_option"] = "op"
    head = [f"# {line}" for line in header(plan, split, source, "torchtitan job config", notes)]
    out = head
    for section, values in (
        ("training", training),
        ("parallelism", parallelism),
        ("activation_checkpoint", checkpoint),
    ):
        out += ["", f"[{section}]"] + [f"{k} = {_toml(v)}" for k, v in values.items()]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------- reading

_MODES = ("none", "selective", "full")


def read(text: str, source: str) -> Setup:
    """The split a torchtitan TOML describes (:class:`Setup`): DP from the replicate × shard
    degrees (``-1``: the chips TP × PP × CP leave), TP, PP, CP, EP, micro-batches from the
    local batch and the micro-batch size (PP) or the global batch (gradient accumulation);
    other sections and keys are listed as unused."""
    reader = SetupReader(source, TITLE)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise reader.error(f"invalid TOML: {exc}") from None
    except ValueError:  # an integer past Python's digit limit (found by the fuzz test)
        raise reader.error("invalid TOML: a number with too many digits") from None
    except RecursionError:  # arrays nested thousands deep (found by the fuzz test)
        raise reader.error("invalid TOML: values nested too deep") from None
    sections: dict[str, dict[str, Any]] = {}
    for name in ("training", "parallelism", "activation_checkpoint"):
        table = data.pop(name, {})
        if not isinstance(table, dict):
            raise reader.error(f"[{name}] is not a table")
        sections[name] = table
    reader.unused += [f"[{k}]" for k in data]
    par, train, ac = (
        sections["parallelism"],
        sections["training"],
        sections["activation_checkpoint"],
    )

    def number(
        table: dict[str, Any], section: str, key: str, auto: int | None = None
    ) -> int | None:
        value = table.pop(key, None)
        return None if value is None else whole_or_auto(reader, f"{section}.{key}", value, auto)

    replicate = number(par, "parallelism", "data_parallel_replicate_degree") or 1
    shard = number(par, "parallelism", "data_parallel_shard_degree", -1)
    reshard = par.pop("fsdp_reshard_after_forward", "default")
    tp = number(par, "parallelism", "tensor_parallel_degree") or 1
    pp = number(par, "parallelism", "pipeline_parallel_degree") or 1
    cp = number(par, "parallelism", "context_parallel_degree") or 1
    rotate = reader.choice(
        "parallelism.context_parallel_rotate_method",
        par.pop("context_parallel_rotate_method", None),
        _CP_COMM_OF,
    )
    ep = number(par, "parallelism", "expert_parallel_degree") or 1
    etp = number(par, "parallelism", "expert_tensor_parallel_degree") or 1
    if ep > 1 and etp != tp:
        raise reader.error(
            f"parallelism.expert_tensor_parallel_degree {etp}: meshtune shards each expert over "
            f"the TP group (expert TP = tensor_parallel_degree {tp})"
        )
    schedule = par.pop("pipeline_parallel_schedule", None)
    reader.choice("parallelism.pipeline_parallel_schedule", schedule, ("1F1B", "Interleaved1F1B"))
    micro = number(par, "parallelism", "pipeline_parallel_microbatch_size")
    per_chunk = number(par, "parallelism", "pipeline_parallel_layers_per_stage")
    local = number(train, "training", "local_batch_size")
    batch = number(train, "training", "global_batch_size", -1)
    seq_len = number(train, "training", "seq_len")
    mode = reader.choice("activation_checkpoint.mode", ac.pop("mode", None), _MODES)
    ac.pop("selective_ac_option", None)  # meshtune's selective recompute is Korthikanti's
    for section, table in (
        ("parallelism", par),
        ("training", train),
        ("activation_checkpoint", ac),
    ):
        reader.unused += [f"{section}.{k}" for k in table]
    sharded = shard is None or shard > 1
    zero = (2 if reshard == "never" else 3) if sharded else 0
    dp = None if shard is None else replicate * shard
    micro_batches = None
    if pp > 1 and local is not None:
        micro = micro or 1
        if local % micro:
            raise reader.error(
                f"local_batch_size {local} is not a multiple of the micro-batch {micro}"
            )
        micro_batches = local // micro
    return reader.setup(
        rows=tp,
        cols=1,
        pp=pp,
        dp=dp,
        layers_per_chunk=per_chunk if pp > 1 else None,
        micro_batch=(micro if pp > 1 else local) if batch is not None else None,
        micro_batches=micro_batches if batch is None else None,
        local_batch=local if batch is not None else None,
        batch=batch,
        batch_per_chip=None if batch is not None or local is None else local / (tp * pp * cp),
        seq_len=seq_len,
        zero=zero,
        recompute=mode,
        algorithm=FRAMEWORK_TP_ALGORITHM,
        ep=ep,
        cp=cp,
        # torchtitan's default rotate method is allgather
        cp_comm=_CP_COMM_OF[rotate or "allgather"] if cp > 1 else None,
    )
