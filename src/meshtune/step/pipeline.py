"""Pipeline schedules: which blocks each stage holds, and the bubble.

The blocks are cut into ``pp · vpp`` chunks of whole blocks (``vpp`` virtual stages per chip,
Narayanan et al., SC'21 §2.2.2); chunk c runs on chip ``c mod pp``, so chip 0 holds the
embedding (before chunk 0) and chip pp − 1 the LM head and loss (after the last chunk). When the
blocks do not divide, chunks differ by one block; the lighter chunks go to the two ends first,
since those also carry the embedding and the head. Nothing is padded: the slowest chip sets the
pace and the split is reported as it is.

With m micro-batches per replica and ``t`` one micro-batch's forward + backward time on the
slowest chip (all its chunks, plus its stage-to-stage sends), 1F1B (v = 1) takes
``(m + pp − 1) · t``; the interleaved schedule divides the bubble by v:
``(m + (pp − 1) / v) · t``, the bubble being ``(pp − 1) / (v · m)`` of the ideal ``m · t``
(SC'21 §2.2.2), at v times the stage-to-stage traffic. Megatron requires m to be a multiple of
pp for the interleaved schedule and the blocks to split evenly into ``pp · v`` chunks, or,
where no even split exists, chunks differing by one block (:func:`interleavings`).

DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, §3.2.1, Table 2;
deepseek-ai/DualPipe) feeds micro-batches from both ends of the pipeline: chip i holds stage i
of one copy of the model and stage pp − 1 − i of a second copy (2× the parameters; pp + 1
micro-batches' activations in flight), and runs a forward chunk of one micro-batch beside a
backward chunk of another so that each one's communication (the EP all-to-alls, the stage
sends) hides behind the other's computation. Its bubble is ``(pp/2 − 1)·(F&B + B − 3W)``, F a
forward chunk, B a full backward chunk, W its weight-gradient part and F&B the overlapped pair
(:func:`dualpipe_bubble_s`); it needs pp and m even and m ≥ 2·pp (:func:`dualpipe_legal`, the
checks of deepseek-ai/DualPipe ``DualPipe.step``), one virtual stage per copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, cast, overload

from meshtune.ranks import ranks
from meshtune.step.comms import overlap_exposed

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray
    from meshtune.ranks import IntArray


@dataclass(frozen=True)
class StageLayout:
    """Blocks per chip of one pipeline and which chips hold the embedding and the head."""

    blocks: tuple[int, ...]

    @property
    def pp(self) -> int:
        """Pipeline stages (chips of one pipeline)."""
        return len(self.blocks)

    @property
    def most(self) -> int:
        """The most blocks one chip holds."""
        return max(self.blocks)

    @property
    def fewest(self) -> int:
        """The fewest blocks one chip holds."""
        return min(self.blocks)


def chunk_blocks(blocks: int, chunks: int) -> tuple[int, ...]:
    """``blocks`` cut into ``chunks`` whole-block chunks differing by at most one; the extra
    blocks go to the middle chunks first, the two end chunks last."""
    base, extra = divmod(blocks, chunks)
    order = [*range(1, chunks - 1), 0, chunks - 1] if chunks > 1 else [0]
    gets = set(order[:extra])
    return tuple(base + (1 if c in gets else 0) for c in range(chunks))


@lru_cache(maxsize=4096)
def stage_layout(blocks: int, pp: int, vpp: int = 1) -> StageLayout:
    """Blocks per chip: chunk c of :func:`chunk_blocks` (``pp · vpp`` chunks) on chip c mod pp
    (cached: the search asks for the same few layouts many times)."""
    per_chip = [0] * pp
    for c, n in enumerate(chunk_blocks(blocks, pp * vpp)):
        per_chip[c % pp] += n
    return StageLayout(tuple(per_chip))


def stage_extremes(blocks: int, pp: IntArray, vpp: IntArray) -> tuple[IntArray, IntArray]:
    """The most and the fewest blocks of a chip (:func:`stage_layout`) of each (pp, vpp) of
    two columns, each distinct pair laid out once."""
    import numpy as np  # not at module import: the CLI starts without NumPy

    if not len(pp):
        return pp, pp
    top = int(vpp.max()) + 1  # (pp, v) as one number
    pairs, which = ranks(pp * top + vpp)
    layouts = [stage_layout(blocks, *divmod(key, top)) for key in pairs.tolist()]
    most = np.array([layout.most for layout in layouts], dtype=np.int64)[which]
    return most, np.array([layout.fewest for layout in layouts], dtype=np.int64)[which]


def interleavings(blocks: int, pp: int, micro_batches: int) -> list[int]:
    """The virtual-stage counts v Megatron-LM runs: 1, and for pp > 1 with m a multiple of pp,
    every v > 1 that splits the blocks evenly into ``pp · v`` chunks; when no even split into
    pp stages exists, every v with at least one block per chunk (chunks differing by one
    block, as Megatron-Core's uneven first and last stages allow and Llama 3's 126 blocks on
    16 stages ran: Llama Team 2024, §3.3.2)."""
    if pp == 1 or micro_batches % pp or blocks < pp:
        return [1]
    if blocks % pp:
        return list(range(1, blocks // pp + 1))
    return [v for v in range(1, blocks // pp + 1) if (blocks // pp) % v == 0]


def bubble_fraction(pp: int, micro_batches: int, vpp: int = 1) -> float:
    """The bubble as a fraction of the pipeline time: ``((pp − 1)/v) / (m + (pp − 1)/v)``;
    for 1F1B ``(pp − 1) / (m + pp − 1)``."""
    idle = (pp - 1) / vpp
    return idle / (micro_batches + idle)


@overload
def pipeline_slots(pp: int, micro_batches: int, vpp: int = 1) -> float: ...


@overload
def pipeline_slots(pp: IntArray, micro_batches: IntArray, vpp: IntArray) -> FloatArray: ...


def pipeline_slots(
    pp: int | IntArray, micro_batches: int | IntArray, vpp: int | IntArray = 1
) -> float | FloatArray:
    """Micro-batch times in one pipelined step: ``m + (pp − 1) / v``; of every split at once
    when given columns (the same operations element by element, so the same floats)."""
    return cast("float | FloatArray", micro_batches + (pp - 1) / vpp)


Schedule = Literal["1f1b", "dualpipe"]
SCHEDULES: tuple[Schedule, ...] = ("1f1b", "dualpipe")


def model_copies(schedule: Schedule) -> int:
    """Copies of the model's stages a chip holds: 2 under DualPipe, else 1 (module docstring)."""
    return 2 if schedule == "dualpipe" else 1


def ends_held(schedule: Schedule, pp: int) -> int:
    """End layers (the embedding, the LM head) whose weights the fuller end chip holds: both
    with one stage or under DualPipe (chip 0 holds stage 0 of one copy and the last stage of
    the other), else one."""
    return 2 if pp == 1 or schedule == "dualpipe" else 1


def end_times(schedule: Schedule, pp: int, embedding_s: float, head_s: float) -> list[float]:
    """Each chip's time at the ends per micro-batch: 1F1B, the embedding on chip 0 and the LM
    head and loss (``head_s``) on chip pp − 1; DualPipe, each end chip embeds half the
    micro-batches and ends the other half, ``(embedding_s + head_s) / 2``."""
    if schedule == "dualpipe":
        return [(embedding_s + head_s) / 2 if i in (0, pp - 1) else 0.0 for i in range(pp)]
    return [(embedding_s if i == 0 else 0.0) + (head_s if i == pp - 1 else 0.0) for i in range(pp)]


def bubble_in_slots(schedule: Schedule) -> bool:
    """Whether the schedule's bubble is whole slots of the pace chip's micro-batch time,
    ``pipeline_slots − m`` of them, and so grows with that time (what a lower bound of the
    step may count, :func:`meshtune.step.bounds.lower_bound`): 1F1B's, interleaved or not.
    DualPipe's is not: :func:`dualpipe_bubble_s` falls as the weight-gradient GeMMs grow,
    and its overlapped slot stops growing with the compute while the communication it hides
    is longer."""
    return schedule != "dualpipe"


def schedule_bubble_fraction(
    schedule: Schedule, pp: int, micro_batches: int, vpp: int = 1
) -> float | None:
    """The bubble's fraction of the pipelined time when the split alone sets it: where the
    bubble is whole slots (:func:`bubble_in_slots`), :func:`bubble_fraction`; else None
    (DualPipe's is a ratio of times, :func:`pipeline_time`)."""
    return bubble_fraction(pp, micro_batches, vpp) if bubble_in_slots(schedule) else None


def dualpipe_legal(pp: int, micro_batches: int, vpp: int = 1) -> bool:
    """Whether DualPipe runs this split: pp and m even, m ≥ 2·pp, v = 1 (module docstring)."""
    return pp % 2 == 0 and micro_batches % 2 == 0 and micro_batches >= 2 * pp and vpp == 1


def dualpipe_bubble_s(pp: int, pair_s: float, backward_s: float, weight_s: float) -> float:
    """DualPipe's bubble ``(pp/2 − 1)·(F&B + B − 3W)`` (DeepSeek-V3 Table 2) from one chunk's
    overlapped forward-and-backward pair ``pair_s`` (F&B), full backward B and weight-gradient
    part W; never negative."""
    return max(0.0, (pp / 2 - 1) * (pair_s + backward_s - 3 * weight_s))


@dataclass(frozen=True)
class PipelineTime:
    """How one step's micro-batches fill the pipeline on the chip that sets the pace:
    ``bubble_s`` and the bubble's ``fraction`` of the pipelined time; per micro-batch, the
    ``a2a_s`` all-to-all and ``sends_s`` stage-send seconds left on the critical path."""

    bubble_s: float
    fraction: float
    a2a_s: float
    sends_s: float


def pipeline_time(
    schedule: Schedule,
    *,
    pp: int,
    micro_batches: int,
    vpp: int,
    chip_s: float,
    a2a_s: float,
    sends_s: float,
    backward_s: float,
    weight_s: float,
    slowdown: float = 0.0,
) -> PipelineTime:
    """The schedule's pipeline for one micro-batch's work on the pace chip: ``chip_s`` (its
    compute and all-to-alls), ``a2a_s`` of it the all-to-alls, ``sends_s`` its stage sends,
    ``backward_s`` its backward chunk and ``weight_s`` that chunk's weight-gradient GeMMs.

    1F1B (module docstring): a slot is ``chip_s + sends_s``, everything on the critical path,
    the bubble ``((pp − 1)/v)`` slots. DualPipe: the all-to-alls and sends hide behind the
    paired chunk's compute ``C = chip_s − a2a_s``, so a micro-batch takes ``max(C, a2a_s +
    sends_s)`` with ``slowdown`` σ = 0 (:func:`~meshtune.step.comms.overlap_exposed` with σ:
    the compute slows while they run), what shows beyond C shared between the two in
    proportion, and the bubble is :func:`dualpipe_bubble_s` with that as F&B.
    """
    m = micro_batches
    if schedule == "dualpipe":
        hidden = a2a_s + sends_s
        compute = chip_s - a2a_s
        shows = overlap_exposed(hidden, compute, slowdown)
        per_micro = compute + shows
        bubble = dualpipe_bubble_s(pp, per_micro, backward_s, weight_s)
        share = shows / hidden if hidden else 0.0
        return PipelineTime(
            bubble, bubble / (m * per_micro + bubble), share * a2a_s, share * sends_s
        )
    slot = chip_s + sends_s
    bubble = (pipeline_slots(pp, m, vpp) - m) * slot
    return PipelineTime(bubble, bubble_fraction(pp, m, vpp), a2a_s, sends_s)
