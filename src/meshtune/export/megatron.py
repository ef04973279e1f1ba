"""Megatron-LM / Megatron-Core: a plan as command-line arguments, and arguments read back.

Option names are Megatron-LM's (``megatron/training/arguments.py``; the parallelism and
transformer options are generated from ``ModelParallelConfig`` / ``TransformerConfig`` field
names, ``tensor_model_parallel_size`` → ``--tensor-model-parallel-size``). The export writes one
option per line, commented with the plan's prediction; Megatron runs 1D tensor parallelism with
sequence parallelism (meshtune's ``megatron`` algorithm), so a 2D mesh or MeshSlice's slicing
is named as not expressible, with meshtune's prediction for TP = P_r · P_c instead.
EP and CP are Megatron-Core's own levels: ``--expert-model-parallel-size`` (with
``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``; the experts keep the TP
group, ``--expert-tensor-parallel-size`` defaults to TP, so Megatron's EP ranks come from DP ·
CP, where meshtune's EP divides DP) and ``--context-parallel-size`` (DP = world / (TP · PP ·
CP), as in meshtune), whose ring is ``--cp-comm-type p2p`` (meshtune's ``ring``) or
``allgather`` (``all-gather``).
ZeRO: stage 1 is the distributed optimizer (``--use-distributed-optimizer``, optimizer state
sharded over DP), stages 2 and 3 Megatron-FSDP (``--use-megatron-fsdp`` with
``--data-parallel-sharding-strategy optim_grads`` / ``optim_grads_params``).
"""

from __future__ import annotations

import shlex

from meshtune.algorithms.registry import FRAMEWORK_TP_ALGORITHM
from meshtune.export.common import Split, header, plan_split, tp_notes
from meshtune.export.setup import Setup, SetupReader, whole
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan

NAME = "megatron"
TITLE = "Megatron-LM"

_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
_ZERO_OF_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
CP_COMM = {"ring": "p2p", "all-gather": "allgather"}
_CP_COMM_OF = {word: comm for comm, word in CP_COMM.items()}


def _layout_args(split: Split, notes: list[str]) -> list[str]:
    """Virtual stages and uneven first / last stages, as Megatron spells them."""
    if split.vpp > 1:
        per_chunk = split.even_chunks()
        if per_chunk is not None:
            return [f"--num-layers-per-virtual-pipeline-stage {per_chunk}"]
        notes.append(f"{split.blocks} layers do not split evenly into {split.pp} x {split.vpp}")
        return []
    layout = split.stage_layout
    if len(set(layout)) <= 1:
        return []
    middle = set(layout[1:-1])
    if len(middle) <= 1:
        return [
            f"--decoder-first-pipeline-num-layers {layout[0]}",
            f"--decoder-last-pipeline-num-layers {layout[-1]}",
        ]
    notes.append(
        f"Megatron-LM splits layers evenly except the first and last stage; the plan's layout "
        f"{list(layout)} is written as it is only in --pipeline-model-parallel-layout"
    )
    return []


def moe_args(model: ModelSpec) -> list[str]:
    """The model's experts in Megatron's words (``--moe-layer-freq`` as the explicit 0/1 list
    of its MoE blocks when not every block is one; shared experts as their total width)."""
    moe = model.moe
    if moe is None:
        return []
    args = [
        f"--num-experts {moe.experts}",
        f"--moe-router-topk {moe.top_k}",
        f"--moe-ffn-hidden-size {moe.expert_ffn_hidden}",
    ]
    pattern = [int(moe.is_moe_block(i)) for i in range(model.blocks)]
    if not all(pattern):
        args.append(f"--moe-layer-freq [{','.join(map(str, pattern))}]")
    if moe.shared_experts:
        width = moe.shared_experts * (moe.shared_ffn_hidden or moe.expert_ffn_hidden)
        args.append(f"--moe-shared-expert-intermediate-size {width}")
    return args


def render(plan: Plan, source: str) -> str:
    """The plan's Megatron-LM arguments, one per line, ``#`` comments first (module doc)."""
    split = plan_split(plan)
    model = plan.inputs.model
    notes = tp_notes(plan, split, TITLE)
    args = [
        f"--tensor-model-parallel-size {split.tp}",
        f"--pipeline-model-parallel-size {split.pp}",
    ]
    args += _layout_args(split, notes)
    if split.tp > 1:
        args.append("--sequence-parallel")
    args.append(f"--context-parallel-size {split.cp}")
    if split.cp > 1:
        args.append(f"--cp-comm-type {CP_COMM[split.cp_comm]}")
    args.append(f"--expert-model-parallel-size {split.ep}")
    args += moe_args(model)
    args += [
        f"--micro-batch-size {split.micro_batch}",
        f"--global-batch-size {split.batch}",
        f"--seq-length {split.seq_len}",
        f"--num-layers {model.blocks}",
        f"--hidden-size {model.hidden}",
        f"--ffn-hidden-size {model.ffn_hidden}",
        f"--num-attention-heads {model.heads}",
        f"--kv-channels {model.head_dim}",
    ]
    if model.kv_heads != model.heads:
        args += ["--group-query-attention", f"--num-query-groups {model.kv_heads}"]
    if model.mlp == "swiglu":
        args.append("--swiglu")
    if split.recompute != "none":
        args.append(f"--recompute-granularity {split.recompute}")
    if split.recompute == "full":
        args += ["--recompute-method uniform", "--recompute-num-layers 1"]
    if split.zero == 1:
        args += ["--use-distributed-optimizer", "--overlap-param-gather"]
    elif split.zero >= 2:
        args += [
            "--use-megatron-fsdp",
            f"--data-parallel-sharding-strategy {_SHARDING[split.zero]}",
        ]
    args.append("--overlap-grad-reduce")
    if split.attention == "fused":
        args.append("--use-flash-attn")
    if plan.inputs.bytes_per_element == 2:
        args.append("--bf16")
    head = [f"# {line}" for line in header(plan, split, source, "Megatron-LM arguments", notes)]
    return "\n".join(head + args) + "\n"


# ---------------------------------------------------------------------------------- reading

_VALUE_OPTIONS = frozenset(
    {
        "tensor-model-parallel-size",
        "pipeline-model-parallel-size",
        "num-layers-per-virtual-pipeline-stage",
        "num-virtual-stages-per-pipeline-rank",
        "context-parallel-size",
        "cp-comm-type",
        "expert-model-parallel-size",
        "expert-tensor-parallel-size",
        "num-experts",
        "moe-router-topk",
        "moe-ffn-hidden-size",
        "micro-batch-size",
        "global-batch-size",
        "seq-length",
        "num-layers",
        "hidden-size",
        "ffn-hidden-size",
        "num-attention-heads",
        "kv-channels",
        "num-query-groups",
        "recompute-granularity",
        "recompute-method",
        "recompute-num-layers",
        "data-parallel-sharding-strategy",
        "decoder-first-pipeline-num-layers",
        "decoder-last-pipeline-num-layers",
    }
)
_FLAGS = frozenset(
    {
        "sequence-parallel",
        "use-distributed-optimizer",
        "use-megatron-fsdp",
        "use-torch-fsdp2",
        "recompute-activations",
        "group-query-attention",
        "swiglu",
        "overlap-grad-reduce",
        "overlap-param-gather",
        "use-flash-attn",
        "bf16",
    }
)


def _options(text: str, reader: SetupReader) -> dict[str, str | None]:
    """``--name value`` / ``--name=value`` / ``--flag`` tokens of an arguments file (shell
    quoting, ``#`` comments and backslash-newline continuations); anything else is unused."""
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise reader.error(f"not a list of arguments ({exc})") from None
    options: dict[str, str | None] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--") or token == "--":
            reader.unused.append(token)
            continue
        name, eq, value = token[2:].partition("=")
        if not eq and name in _VALUE_OPTIONS and i < len(tokens):
            value, i = tokens[i], i + 1
        elif not eq and name not in _FLAGS and i < len(tokens) and not tokens[i].startswith("--"):
            value, i = tokens[i], i + 1  # an option meshtune does not read, and its value
        if name in options:
            raise reader.error(f"--{name} is given twice")
        options[name] = value if (eq or name not in _FLAGS) else None
    return options


def read(text: str, source: str) -> Setup:
    """The split a Megatron-LM arguments file describes (:class:`Setup`); options meshtune
    does not model are listed in :attr:`Setup.unused`, never dropped."""
    reader = SetupReader(source, TITLE)
    options = _options(text, reader)

    def number(name: str) -> int | None:
        value = options.pop(name, None)
        return None if value is None else whole(reader, f"--{name}", value, text=True)

    tp = number("tensor-model-parallel-size") or 1
    pp = number("pipeline-model-parallel-size") or 1
    per_chunk = number("num-layers-per-virtual-pipeline-stage")
    vpp = number("num-virtual-stages-per-pipeline-rank")
    cp = number("context-parallel-size") or 1
    comm = reader.choice("--cp-comm-type", options.pop("cp-comm-type", None), _CP_COMM_OF)
    ep = number("expert-model-parallel-size") or 1
    etp = number("expert-tensor-parallel-size")
    if ep > 1 and etp not in (None, tp):
        raise reader.error(
            f"--expert-tensor-parallel-size {etp}: meshtune shards each expert over the TP "
            f"group (expert TP = TP {tp})"
        )
    granularity = options.pop("recompute-granularity", None)
    if "recompute-activations" in options:
        options.pop("recompute-activations")
        granularity = granularity or "selective"
    recompute = reader.choice("--recompute-granularity", granularity, ("selective", "full"))
    zero = 0
    if "use-distributed-optimizer" in options:
        options.pop("use-distributed-optimizer")
        zero = 1
    strategy = options.pop("data-parallel-sharding-strategy", None)
    fsdp = [options.pop(k) or k for k in ("use-megatron-fsdp", "use-torch-fsdp2") if k in options]
    if fsdp:
        sharding = reader.choice(
            "--data-parallel-sharding-strategy", strategy or "optim_grads_params", _ZERO_OF_SHARDING
        )
        zero = _ZERO_OF_SHARDING[sharding or "optim_grads_params"]
    model = {
        "blocks": number("num-layers"),
        "hidden": number("hidden-size"),
        "ffn_hidden": number("ffn-hidden-size"),
        "heads": number("num-attention-heads"),
        "head_dim": number("kv-channels"),
        "kv_heads": number("num-query-groups"),
    }
    micro_batch = number("micro-batch-size")
    batch = number("global-batch-size")
    seq_len = number("seq-length")
    implied = ("sequence-parallel", "group-query-attention", "swiglu", "bf16", "num-experts")
    moe = ("moe-router-topk", "moe-ffn-hidden-size", "moe-layer-freq")
    for name in (*implied, *moe, "moe-shared-expert-intermediate-size"):
        options.pop(name, None)  # implied by the model and meshtune's TP (docs/export.md)
    for assumed in ("overlap-param-gather", "use-flash-attn"):
        options.pop(assumed, None)  # meshtune's step model assumes both (docs/export.md)
    if "overlap-grad-reduce" not in options:
        reader.note("--overlap-grad-reduce is not set: meshtune assumes the DP reduction overlaps")
    options.pop("overlap-grad-reduce", None)
    for name in ("recompute-method", "recompute-num-layers"):
        if name in options:
            reader.note(f"--{name} {options.pop(name)}: meshtune recomputes every layer")
    reader.unused += [f"--{k}" for k in options]
    return reader.setup(
        tp=tp,
        rows=tp,
        cols=1,
        pp=pp,
        vpp=vpp,
        layers_per_chunk=per_chunk,
        micro_batch=micro_batch,
        batch=batch,
        seq_len=seq_len,
        zero=zero,
        recompute=recompute or "none",
        algorithm=FRAMEWORK_TP_ALGORITHM,
        ep=ep,
        cp=cp,
        cp_comm=None if comm is None else _CP_COMM_OF[comm],
        model=model,
    )
