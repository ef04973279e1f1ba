"""What every export target and reader shares: a plan's levels, and meshtune's prediction of a
configuration a framework can express.

A plan splits ``chips = DP · PP · CP · P_r · P_c`` (:mod:`meshtune.search.levels`; CP ranks
split each sequence, EP ranks are ``ep`` of the DP replicas that share out the experts); a
framework configures the same levels under its own names. :func:`plan_split` reads them off a
plan (a plan made with ``--mesh-only`` is one mesh of every chip: DP = PP = 1, one
micro-batch).
Where a framework cannot express a choice (MeshSlice's slicing, a 2D TP mesh, a ZeRO stage),
the export names it and :func:`predict` prices the nearest configuration it can express with
the same library call ``meshtune plan`` makes (:func:`meshtune.planner.make.make_plan`, every level
pinned), so the user sees what the change costs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from meshtune._version import __version__
from meshtune.algorithms.registry import FRAMEWORK_TP_ALGORITHM
from meshtune.catalog import load_profile
from meshtune.cost.compute import Precision
from meshtune.errors import MeshtuneError
from meshtune.plan import Plan
from meshtune.planner.make import make_plan
from meshtune.step.cp import CpComm
from meshtune.step.memory import Recompute
from meshtune.step.options import ClusterOptions, StepOptions
from meshtune.step.pipeline import Schedule
from meshtune.step.work import AttentionKind

MESH_ONLY_NOTE = (
    "the plan was made with --mesh-only (one mesh of every chip, memory not checked): exported "
    "as DP 1 x PP 1, one micro-batch"
)


@dataclass(frozen=True)
class Split:
    """The levels of a plan (``chips = dp · pp · cp · rows · cols``; ``batch = dp ·
    micro_batches · micro_batch`` sequences of ``seq_len`` tokens, each split over ``cp``
    ranks; ``ep`` divides ``dp``; ``cp_comm``: how CP moves K and V)."""

    chips: int
    dp: int
    pp: int
    rows: int
    cols: int
    vpp: int
    micro_batches: int
    micro_batch: int
    zero: int
    recompute: Recompute
    attention: AttentionKind
    batch: int
    seq_len: int
    algorithm: str
    blocks: int
    stage_layout: tuple[int, ...]
    mesh_only: bool
    schedule: Schedule = "1f1b"
    ep: int = 1
    cp: int = 1
    cp_comm: CpComm = "ring"
    precision: Precision = "bf16"

    @property
    def tp(self) -> int:
        """Chips of the tensor-parallel mesh, ``rows · cols``."""
        return self.rows * self.cols

    @property
    def label(self) -> str:
        """``DP 2 x PP 16 x TP 4x2 (meshslice)``; ``DP 128 (EP 64) x PP 16 x CP 2 x TP 1
        (megatron)`` when EP or CP is above 1."""
        mesh = f"{self.rows}x{self.cols}" if self.cols > 1 else str(self.rows)
        ep = f" (EP {self.ep})" if self.ep > 1 else ""
        cp = f" x CP {self.cp}" if self.cp > 1 else ""
        return f"DP {self.dp}{ep} x PP {self.pp}{cp} x TP {mesh} ({self.algorithm})"

    def even_chunks(self) -> int | None:
        """Blocks per virtual stage when the blocks split evenly into ``pp · vpp`` chunks."""
        chunks = self.pp * self.vpp
        return self.blocks // chunks if self.blocks % chunks == 0 else None


def plan_split(plan: Plan) -> Split:
    """The levels ``plan`` chose (module docstring for a ``--mesh-only`` plan)."""
    inputs, cluster = plan.inputs, plan.cluster
    algorithm = plan.layers[0].algorithm if plan.layers else inputs.algorithm
    mesh_only = Split(
        chips=inputs.chips,
        dp=1,
        pp=1,
        rows=plan.mesh.rows,
        cols=plan.mesh.cols * plan.mesh.depth,
        vpp=1,
        micro_batches=1,
        micro_batch=inputs.batch,
        zero=0,
        recompute="selective",
        attention="fused",
        batch=inputs.batch,
        seq_len=inputs.seq_len,
        algorithm=algorithm,
        blocks=inputs.model.blocks,
        stage_layout=(inputs.model.blocks,),
        mesh_only=True,
    )
    if cluster is None:
        return mesh_only
    options = cluster.step_options
    return replace(
        mesh_only,
        dp=cluster.dp,
        pp=cluster.pp,
        vpp=cluster.vpp,
        micro_batches=cluster.micro_batches,
        micro_batch=cluster.micro_batch,
        zero=cluster.zero,
        recompute=options.recompute,
        attention=options.attention,
        stage_layout=tuple(cluster.stage_layout) or (inputs.model.blocks,),
        mesh_only=False,
        schedule=options.schedule,
        ep=cluster.ep,
        cp=cluster.cp,
        cp_comm=options.cp_comm,
        precision=plan.inputs.precision,
    )


def step_words(plan: Plan) -> str:
    """The plan's headline prediction: the step (cluster plans) or the FC time (one mesh)."""
    if plan.cluster is None:
        return f"FC time {plan.fc_time_s:.4g} s per step (mesh only)"
    c = plan.cluster
    return f"step {c.step.step_s:.4g} s, {c.tokens_per_s:,.0f} tokens/s, MFU {c.mfu:.1%}"


def predict(plan: Plan, split: Split) -> str:
    """meshtune's prediction for ``split`` (``plan``'s inputs, every level pinned, EP and CP
    included), in words:
    ``"DP 8 x PP 4 x TP 8 (megatron): step 7.66 s, …"``, or why it cannot be priced (the
    profile is not in the catalog or changed, the split does not fit the chip's memory).
    """
    inputs = plan.inputs
    try:
        profile = load_profile(inputs.profile)
        if profile.content_hash() != inputs.profile_hash:
            return (
                f"{split.label}: not predicted (profile '{inputs.profile}' changed since the plan)"
            )
        levels = inputs.levels
        cluster = None
        if not split.mesh_only:
            # The plan's own step options (dropout, gradient path, headroom …), the split's levels
            asked = levels.step_options if levels is not None else StepOptions(headroom=0.0)
            cluster = ClusterOptions(
                dp=split.dp,
                pp=split.pp,
                micro_batches=split.micro_batches,
                zero=split.zero,
                vpp=split.vpp,
                ep=split.ep,
                cp=split.cp,
                step=replace(
                    asked,
                    recompute=split.recompute,
                    attention=split.attention,
                    schedule=split.schedule,
                    cp_comm=split.cp_comm,
                    precision=split.precision,
                ),
            )
        nearest = make_plan(
            inputs.model,
            profile,
            inputs.chips,
            batch=inputs.batch,
            seq_len=inputs.seq_len,
            mode=inputs.dataflow_mode,
            algorithm=split.algorithm,
            shapes=[f"{split.rows}x{split.cols}"],
            top=1,
            cluster=cluster,
        )
    except MeshtuneError as exc:
        return f"{split.label}: not predicted ({exc})"
    gain = _ratio(plan, nearest)
    return f"{split.label}: {step_words(nearest)}{gain}"


def _ratio(plan: Plan, other: Plan) -> str:
    """``" (1.23x the plan's)"``: how much slower ``other`` is than ``plan``."""
    mine = plan.cluster.step.step_s if plan.cluster is not None else plan.fc_time_s
    theirs = other.cluster.step.step_s if other.cluster is not None else other.fc_time_s
    return f" ({theirs / mine:.3g}x the plan's time)" if mine > 0 else ""


def one_d(split: Split, algorithm: str = FRAMEWORK_TP_ALGORITHM) -> Split:
    """``split`` with its mesh flattened to 1D tensor parallelism of ``rows · cols`` chips run
    by ``algorithm`` (the nearest a 1D-TP framework expresses)."""
    return replace(split, rows=split.tp, cols=1, algorithm=algorithm)


def without_cp(split: Split) -> Split:
    """``split`` with its CP ranks made DP replicas (``DP · CP`` replicas of whole sequences,
    the same chips and batch): the nearest for a framework without ring context parallelism.
    Each replica's micro-batches shrink ``cp``-fold when they divide, else its micro-batch."""
    if split.cp == 1:
        return split
    micro_batches = split.micro_batches
    if micro_batches % split.cp == 0:
        micro_batches //= split.cp
    return replace(
        split,
        dp=split.dp * split.cp,
        cp=1,
        micro_batches=micro_batches,
        micro_batch=split.batch // (split.dp * split.cp * micro_batches),
    )


def tp_notes(plan: Plan, split: Split, framework: str) -> list[str]:
    """What a 1D-TP framework (Megatron-LM, torchtitan, DeepSpeed) cannot express of the
    plan's mesh level, with the nearest configuration's prediction."""
    notes = [MESH_ONLY_NOTE] if split.mesh_only else []
    notes += step_notes(plan, split, framework)
    if split.algorithm == FRAMEWORK_TP_ALGORITHM and split.cols == 1:
        return notes
    what = (
        f"a {split.rows}x{split.cols} 2D mesh" if split.cols > 1 else f"the {split.algorithm} GeMMs"
    )
    notes.append(
        f"{framework} runs 1D (Megatron-style) tensor parallelism: it cannot express {what} "
        f"({split.algorithm}); nearest: TP {split.tp} with sequence parallelism. meshtune "
        f"predicts {predict(plan, one_d(split))}"
    )
    return notes


def step_notes(plan: Plan, split: Split, framework: str) -> list[str]:
    """Notes on the step options no export writes, each with the nearest configuration's
    prediction: a DualPipe plan (no framework meshtune exports to runs DeepSeek's schedule:
    1F1B on the same split) and an FP8 plan (each framework's FP8 recipe differs from DeepSeek's
    fine-grained scaling that meshtune prices, so none is written: bf16 GeMMs on the same
    split); none otherwise."""
    notes = []
    if split.schedule == "dualpipe":
        notes.append(
            f"{framework} has no DualPipe schedule; nearest: 1F1B on the same split. meshtune "
            f"predicts {predict(plan, replace(split, schedule='1f1b'))}"
        )
    if split.precision == "fp8":
        notes.append(
            f"the plan runs its FC GeMMs in FP8 (DeepSeek-V3's recipe); this file sets no FP8 "
            f"training flags of {framework}, so it runs bf16 GeMMs. meshtune predicts "
            f"{predict(plan, replace(split, precision='bf16'))}"
        )
    return notes


def header(plan: Plan, split: Split, source: str, what: str, notes: list[str]) -> list[str]:
    """The comment lines (without ``#``) every text export starts with: what it is, the plan,
    meshtune's prediction, and every note on what the framework cannot express."""
    return [
        f"{what} of a meshtune plan (meshtune {__version__}), plan file {json.dumps(source)}",
        f"model {plan.inputs.model.name} on {split.chips} chips ({plan.inputs.profile}), global "
        f"batch {split.batch} x {split.seq_len} tokens",
        f"plan: {split.label}, {split.micro_batches} micro-batches of {split.micro_batch}, "
        f"ZeRO {split.zero}, recompute {split.recompute}",
        f"meshtune predicts: {step_words(plan)}",
        *(f"NOT EXPRESSIBLE: {n}" for n in notes),
    ]
