"""What the split space (:mod:`meshtune.search.space`) says of the splits it drops: the label
and memory of a split no ZeRO stage fits, written only when shown, and why no split is legal.
"""

from __future__ import annotations

from typing import NamedTuple

from meshtune.search.bounds import zero_stages
from meshtune.search.split import ClusterOptions
from meshtune.specs import ModelSpec
from meshtune.step.memory import MemoryBreakdown
from meshtune.step.memory_terms import SplitMemory
from meshtune.step.pipeline import stage_layout

Split = tuple[int, int, int, int]  # (dp, pp, micro_batches, vpp)


class Context(NamedTuple):
    """What :func:`rejected_memory` needs of a space. A rejection holding the space itself would
    make a reference cycle (the space holds its rejections), which left every search's space
    and its tens of thousands of objects to the cyclic garbage collector (issue 17)."""

    model: ModelSpec
    chips: int
    batch: int
    options: ClusterOptions


def rejected_memory(
    space: Context, terms: SplitMemory, block_params: int, split: Split, cp: int
) -> tuple[str, MemoryBreakdown]:
    """The label of a split no ZeRO stage fits and its memory at the last stage tried."""
    dp, pp, m, vpp = split
    tp, micro = space.chips // (dp * pp * cp), space.batch // (dp * m)
    memory = terms.memory(
        block_params,
        micro_batch=micro,
        dp=dp * cp,
        pp=pp,
        tp=tp,
        stage_blocks=stage_layout(space.model.blocks, pp, vpp).most,
        micro_batches=m,
        zero=zero_stages(dp * cp, space.options)[-1],
        vpp=vpp,
    )
    where = f" × CP {cp}" if cp > 1 else ""
    return f"DP {dp} × PP {pp} (v {vpp}){where} × TP {tp}, {m} micro-batches", memory


def no_split_message(model: ModelSpec, chips: int, batch: int, options: ClusterOptions) -> str:
    """Why no split of ``chips`` chips and ``batch`` sequences is legal: the pins and the
    rules of :func:`~meshtune.search.bounds.splits`."""
    pins = ", ".join(
        f"{name} {getattr(options, name)}"
        for name in ("dp", "pp", "micro_batches", "vpp")
        if getattr(options, name) is not None
    )
    return (
        f"no DP × PP × micro-batch split of {chips} chips and batch {batch} fits the pins "
        f"({pins or 'none'}): DP must divide the chips and the batch, PP the remaining chips "
        f"and at most {model.blocks} blocks, micro-batches the replica's batch; virtual stages "
        "need micro-batches a multiple of PP and blocks that split evenly into PP · v chunks"
        + (
            "; DualPipe needs PP and the micro-batches even, at least 2 · PP micro-batches, v 1"
            if options.schedule == "dualpipe"
            else ""
        )
    )
