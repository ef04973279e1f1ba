"""What the split space (:mod:`meshtune.search.space`) says of the splits it drops: those no
ZeRO stage fits (:class:`Dropped`), each one's label and memory written only when shown, and
why no split is legal.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, overload

from meshtune.model.spec import ModelSpec
from meshtune.search.legal import SplitColumns
from meshtune.search.split import Rejection
from meshtune.step.bounds import zero_stages
from meshtune.step.memory import MemoryBreakdown
from meshtune.step.memory_terms import SplitMemory
from meshtune.step.options import ClusterOptions
from meshtune.step.pipeline import stage_layout

if TYPE_CHECKING:
    from meshtune.cost.vector import FloatArray

Split = tuple[int, int, int, int]  # (dp, pp, micro_batches, vpp)


class Context(NamedTuple):
    """What :func:`rejected_memory` needs of a space. A rejection holding the space itself would
    make a reference cycle (the space holds its rejections), which left every search's space
    and its tens of thousands of objects to the cyclic garbage collector."""

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


class Dropped(Sequence[Rejection]):
    """The splits of one space that no ZeRO stage fits, as a sequence of
    :class:`~meshtune.search.split.Rejection`, each made when asked: a large search drops tens
    of thousands (Llama 3.1 405B at 55,440 chips: 59,760) and shows three."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.parts: list[tuple[int, SplitColumns, FloatArray]] = []
        """(CP degree, its splits, the bytes each needs at the last ZeRO stage tried) of each
        :meth:`add`, in order."""
        self.ends: list[int] = []
        """The index after each part's last split."""
        self.memory: dict[int, tuple[SplitMemory, Mapping[int, int]]] = {}
        """CP degree → the split memory of its splits and their block parameters by
        micro-batch size."""

    def add(
        self,
        cp: int,
        terms: SplitMemory,
        block_params: Mapping[int, int],
        dropped: SplitColumns,
        totals: FloatArray,
    ) -> None:
        """Add the ``dropped`` splits of one CP degree and the bytes each needs (``totals``)."""
        self.memory[cp] = (terms, block_params)
        if len(totals):
            self.parts.append((cp, dropped, totals))
            self.ends.append(len(self) + len(totals))

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    @overload
    def __getitem__(self, index: int) -> Rejection: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Rejection]: ...

    def __getitem__(self, index: int | slice) -> Rejection | Sequence[Rejection]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        index = range(len(self))[index]  # IndexError past the end
        part = bisect.bisect_right(self.ends, index)
        cp, found, totals = self.parts[part]
        row = index - (self.ends[part - 1] if part else 0)
        split = (
            int(found.dp[row]),
            int(found.pp[row]),
            int(found.m[row]),
            int(found.vpp[row]),
        )
        terms, params = self.memory[cp]
        micro = self.context.batch // (split[0] * split[2])
        shown = partial(rejected_memory, self.context, terms, params[micro], split, cp)
        return Rejection(float(totals[row]), shown)

    def least(self, count: int) -> list[Rejection]:
        """Those needing no more bytes than the ``count``-th least (ties included): every one
        :func:`~meshtune.search.split.first_reasons` of these and any others can show."""
        import numpy as np  # not at module import: the CLI starts without NumPy

        if not self.parts:
            return []
        totals = np.concatenate([part[2] for part in self.parts])
        kth = min(count, len(totals)) - 1
        limit = np.partition(totals, kth)[kth]
        return [self[i] for i in np.flatnonzero(totals <= limit).tolist()]


def no_split_message(model: ModelSpec, chips: int, batch: int, options: ClusterOptions) -> str:
    """Why no split of ``chips`` chips and ``batch`` sequences is legal: the pins and the
    rules of :func:`~meshtune.search.legal.split_columns`."""
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
            if options.step.schedule == "dualpipe"
            else ""
        )
    )
