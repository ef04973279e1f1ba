"""What the cluster search knows before it looks at an algorithm: the split space.

For one (model, profile, chips, batch, sequence, dataflow mode, options) the legal
DP × PP × micro-batch × v × CP splits (:func:`~meshtune.search.legal.split_columns`), the
lowest ZeRO stage that fits each in memory (:func:`~meshtune.step.bounds.fitting_zeros`), their
quick bounds, the step model's lower bound of each (split, ZeRO, EP, CP)
(:func:`~meshtune.step.bounds.lower_bound`, the block work every split of one
micro-batch and TP size shares in it, the ceiling of its budget) and the mesh-level cache
(:class:`~meshtune.search.costing.Costing`, keyed by algorithm) depend on no algorithm. A
:class:`SplitSpace` holds them once, so that searching several algorithms one after another
(the alternatives of :mod:`meshtune.compare.alternatives`, ``compare``) computes them once: every
search on the space gives the answer of a search built from scratch. Within :func:`sharing`
(the ``plan`` command: its plan and the alternatives after it) :meth:`SplitSpace.build`
returns the space already built from the same inputs.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple, cast, overload

from meshtune.cost.compute import at_precision
from meshtune.dataflow import DataflowMode
from meshtune.errors import InfeasibleError
from meshtune.hardware.mesh import check_chips
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.model.spec import ModelSpec
from meshtune.ranks import ranks
from meshtune.search.costing import Costing
from meshtune.search.dropped import Context, Dropped, no_split_message
from meshtune.search.experts import check_cp, check_ep, context_degrees, expert_degrees
from meshtune.search.legal import SplitColumns, split_columns
from meshtune.step.block import BlockWork
from meshtune.step.bounds import (
    NO_STAGE,
    Bound,
    block_floor_s,
    bound_work,
    budget_ceiling,
    budget_ceilings,
    fc_block_s,
    fc_compute_s,
    fitting_zeros,
    lower_bound,
    pipeline_spans,
    split_memory,
)
from meshtune.step.memory import block_parameters
from meshtune.step.options import ClusterOptions, Zero

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from meshtune.cost.vector import FloatArray
    from meshtune.ranks import IntArray

Split = tuple[int, int, int, int]  # (dp, pp, micro_batches, vpp)

_SHARED: ContextVar[list[SplitSpace] | None] = ContextVar("meshtune_split_spaces", default=None)


@contextmanager
def sharing() -> Iterator[None]:
    """A scope in which :meth:`SplitSpace.build` reuses the spaces built in it (the same model
    and profile objects, equal other inputs); also a decorator. Outside any scope every build
    is fresh, so that tests and benchmarks that search twice measure two searches."""
    token = _SHARED.set([])
    try:
        yield
    finally:
        _SHARED.reset(token)


@contextmanager
def collector_paused() -> Iterator[None]:
    """A scope in which Python's cyclic garbage collector does not run (also a decorator).

    The cluster search keeps tens of thousands of objects alive while it runs (splits, groups,
    costed levels, their caches) and makes no reference cycles: the collector's passes over
    them free nothing, yet took about 15 % of a large search (Llama 3.1 405B at 24,576 chips:
    two full passes over some 100,000 objects). Reference counting frees memory all the
    same; the collector runs again when the scope ends, and a scope inside another, or in a
    program that turned the collector off, changes nothing."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Fitting(NamedTuple):
    """One split that fits in memory at ``zero``: its TP size, quick bound (``span ·``
    :func:`~meshtune.step.bounds.fc_block_s` of the FC compute), EP degrees, span and slope
    (:func:`~meshtune.step.bounds.pipeline_spans`; one row of :class:`Fittings`)."""

    split: Split
    cp: int
    tp: int
    zero: Zero
    quick: float
    eps: tuple[int, ...]
    span: float
    slope: float


@dataclass(frozen=True)
class Fittings(Sequence[Fitting]):
    """The splits of a space that fit in memory, as columns (a row a :class:`Fitting`, made
    when asked): Llama 3.1 405B at 55,440 chips has 47,472, which the search reads at array
    speed. ``eps[eps_of[row]]``: the row's EP degrees (few distinct tuples)."""

    dp: IntArray
    pp: IntArray
    m: IntArray
    vpp: IntArray
    cp: IntArray
    tp: IntArray
    micro: IntArray
    zero: IntArray
    quick: FloatArray
    span: FloatArray
    slope: FloatArray
    eps_of: IntArray
    eps: tuple[tuple[int, ...], ...]

    @classmethod
    def joined(cls, parts: Sequence[Fittings], eps: tuple[tuple[int, ...], ...]) -> Fittings:
        """The rows of ``parts`` one after another, their ``eps_of`` indexing ``eps``."""
        import numpy as np  # not at module import: the CLI starts without NumPy

        names = [f.name for f in fields(cls) if f.name != "eps"]
        columns: dict[str, Any] = {
            name: np.concatenate([getattr(part, name) for part in parts]) for name in names
        }
        return cls(**columns, eps=eps)

    def __len__(self) -> int:
        return len(self.dp)

    @overload
    def __getitem__(self, index: int) -> Fitting: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Fitting]: ...

    def __getitem__(self, index: int | slice) -> Fitting | Sequence[Fitting]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        row = range(len(self))[index]  # IndexError past the end
        split = (int(self.dp[row]), int(self.pp[row]), int(self.m[row]), int(self.vpp[row]))
        return Fitting(
            split,
            int(self.cp[row]),
            int(self.tp[row]),
            cast(Zero, int(self.zero[row])),
            float(self.quick[row]),
            self.eps[self.eps_of[row]],
            float(self.span[row]),
            float(self.slope[row]),
        )


@dataclass
class SplitSpace:
    """The algorithm-independent part of one cluster search (module docstring); build it with
    :meth:`build`. ``searched`` counts the legal splits, ``rejected`` holds those no ZeRO
    stage fits."""

    model: ModelSpec
    profile: HardwareProfile
    chips: int
    batch: int
    seq_len: int
    mode: DataflowMode
    options: ClusterOptions
    searched: int
    rejected: Dropped
    costings: dict[int, Costing]
    fitting: Fittings = field(init=False)
    bounds: dict[tuple[Split, Zero, int, int], Bound] = field(default_factory=dict)
    exact: dict[tuple[int, int, int], tuple[FcLayer, ...]] = field(default_factory=dict)
    # (micro-batch, CP, EP, TP) → compute_s
    computes: dict[tuple[int, int, int, int], float] = field(default_factory=dict)
    # (micro-batch, TP, CP, EP) → bound_work, which every split and ZeRO stage of them shares
    works: dict[tuple[int, int, int, int], BlockWork] = field(default_factory=dict)
    # (micro-batch, TP, CP, EP) → Σ its shared block work (forward, backward, accumulation)
    # and the lower bound's block_s: budget_ceiling's terms of every split of them
    floors: dict[tuple[int, int, int, int], tuple[float, float]] = field(default_factory=dict)

    @classmethod
    @collector_paused()
    def build(
        cls,
        model: ModelSpec,
        profile: HardwareProfile,
        chips: int,
        *,
        batch: int,
        seq_len: int,
        mode: DataflowMode = "auto",
        options: ClusterOptions | None = None,
    ) -> SplitSpace:
        """The legal splits and their memory pre-check. Raises :class:`InfeasibleError` for a
        chip count out of range, a pinned EP or CP that cannot run, or when no split is legal
        (the message names the pins). Within :func:`sharing`, a space built there from the same
        inputs is returned as it is."""

        check_chips(chips)
        options = options or ClusterOptions()
        shared = _SHARED.get()
        for built in shared or ():
            if built.matches(model, profile, chips, batch, seq_len, mode, options):
                return built
        check_ep(model, profile, options.ep)
        check_cp(chips, seq_len, options.cp)
        gemm = at_precision(profile, options.step.precision)  # the FC GeMMs' rates
        degrees = context_degrees(chips, seq_len, options.cp)
        found = {cp: split_columns(model, chips // cp, batch, options) for cp in degrees}
        searched = sum(len(columns.dp) for columns in found.values())
        if not searched:
            raise InfeasibleError(no_split_message(model, chips, batch, options))
        space = cls(
            model=model,
            profile=profile,
            chips=chips,
            batch=batch,
            seq_len=seq_len,
            mode=mode,
            options=options,
            searched=searched,
            rejected=Dropped(Context(model, chips, batch, options)),  # not the space: no cycle
            costings={cp: Costing(model, gemm, seq_len // cp, mode) for cp in degrees},
        )
        eps: dict[tuple[int, ...], int] = {}  # distinct EP degrees → their index
        parts = [space._fitting(cp, columns, eps) for cp, columns in found.items()]
        space.fitting = Fittings.joined(parts, tuple(eps))
        if shared is not None:
            shared.append(space)
        return space

    def _fitting(self, cp: int, found: SplitColumns, eps: dict[tuple[int, ...], int]) -> Fittings:
        """The :class:`Fittings` of the splits of ``found`` (CP ``cp``) that fit in memory at
        some ZeRO stage, the others added to ``rejected``: each one's quick bound (the least
        over its EP degrees of :meth:`compute_s`, times its span and 3), span and slope.
        ``eps``: the EP degrees indexed so far (added to; the rows' ``eps`` is left empty)."""
        import numpy as np  # not at module import: the CLI starts without NumPy

        model, options, chips, batch = self.model, self.options, self.chips, self.batch
        terms = split_memory(model, self.profile, self.seq_len // cp, options)
        params = {  # micro-batch size → its block's parameters
            micro: block_parameters(self.layers(micro, cp))
            for micro in set((batch // (found.dp * found.m)).tolist())
        }
        zeros, totals = fitting_zeros(
            model,
            self.profile,
            found,
            chips=chips,
            batch=batch,
            options=options,
            terms=terms,
            block_params=params,
            cp=cp,
        )
        kept = zeros != NO_STAGE
        self.rejected.add(
            cp, terms, params, SplitColumns(*(c[~kept] for c in found)), totals[~kept]
        )
        dp, pp, m, vpp = (column[kept] for column in found)
        tp, micro = chips // (dp * pp * cp), batch // (dp * m)
        dps, which = ranks(dp)
        of_dp = [
            eps.setdefault(expert_degrees(model, self.profile, d, options.ep), len(eps))
            for d in dps.tolist()
        ]
        eps_of = np.array(of_dp, dtype=np.int64)[which]
        table = tuple(eps)
        # a bound of every EP's grouped layers, once per distinct (micro-batch, TP, EP degrees)
        _, first, which = np.unique(
            (micro * (int(tp.max(initial=0)) + 1) + tp) * len(table) + eps_of,
            return_index=True,
            return_inverse=True,
        )
        distinct = zip(
            micro[first].tolist(), tp[first].tolist(), eps_of[first].tolist(), strict=True
        )
        compute = np.array(
            [min(self.compute_s(b, cp, ep, t) for ep in table[e] or (1,)) for b, t, e in distinct]
        )[which.reshape(-1)]
        span, slope = pipeline_spans(model, pp, m, vpp, options.step.schedule)
        return Fittings(
            dp=dp,
            pp=pp,
            m=m,
            vpp=vpp,
            cp=np.full(len(dp), cp, dtype=np.int64),
            tp=tp,
            micro=micro,
            zero=zeros[kept],
            quick=span * fc_block_s(compute),
            span=span,
            slope=slope,
            eps_of=eps_of,
            eps=(),
        )

    def matches(
        self,
        model: ModelSpec,
        profile: HardwareProfile,
        chips: int,
        batch: int,
        seq_len: int,
        mode: DataflowMode,
        options: ClusterOptions,
    ) -> bool:
        """Whether the space was built from these inputs (the same model and profile objects)."""
        return (
            self.model is model
            and self.profile is profile
            and (self.chips, self.batch, self.seq_len, self.mode, self.options)
            == (chips, batch, seq_len, mode, options)
        )

    def layers(self, micro_batch: int, cp: int, ep: int = 1) -> tuple[FcLayer, ...]:
        """The exact FC layers of one micro-batch of ``micro_batch`` sequences of
        ``seq_len / cp`` tokens, a MoE model's experts grouped ``experts / ep`` to a mesh
        (cached)."""
        key = (micro_batch, cp, ep)
        if key not in self.exact:
            self.exact[key] = fc_layers(self.model, micro_batch, self.seq_len // cp, ep)
        return self.exact[key]

    def compute_s(self, micro_batch: int, cp: int, ep: int, tp: int) -> float:
        """:func:`~meshtune.step.bounds.fc_compute_s` of :meth:`layers` on ``tp`` chips at
        the FC GeMMs' precision (cached)."""
        key = (micro_batch, cp, ep, tp)
        if key not in self.computes:
            gemm = at_precision(self.profile, self.options.step.precision)
            self.computes[key] = fc_compute_s(self.layers(micro_batch, cp, ep), tp, gemm)
        return self.computes[key]

    def budget_ceiling(self, fit: Fitting, ep: int, best_s: float) -> float:
        """At least ``self.bound(fit.split, fit.zero, ep, fit.cp).budget(best_s)``, with no step
        priced (:func:`~meshtune.step.bounds.budget_ceiling`; ``fit`` one of ``fitting``):
        that bound's step is at least its pipeline of the shared block work (:meth:`work`),
        ``span ·`` :func:`~meshtune.step.bounds.block_floor_s`, a tighter floor than the quick
        bound."""
        dp, pp, m, _ = fit.split
        micro, tp = self.batch // (dp * m), self.chips // (dp * pp * fit.cp)
        block, block_s = self._ceiling_terms(micro, tp, fit.cp, ep)
        return budget_ceiling(
            quick=max(fit.quick, fit.span * block), block_s=block_s, slope=fit.slope, best_s=best_s
        )

    def budget_ceilings(self, rows: IntArray, ep: int, best_s: float) -> FloatArray:
        """:meth:`budget_ceiling` of each of the ``rows`` of ``fitting`` (splits of one
        micro-batch, TP size and CP degree) at once, the same values
        (:func:`~meshtune.step.bounds.budget_ceilings`)."""
        import numpy as np  # not at module import: the CLI starts without NumPy

        fitting, first = self.fitting, int(rows[0])
        block, block_s = self._ceiling_terms(
            int(fitting.micro[first]), int(fitting.tp[first]), int(fitting.cp[first]), ep
        )
        return budget_ceilings(
            quick=np.maximum(fitting.quick[rows], fitting.span[rows] * block),
            block_s=block_s,
            slope=fitting.slope[rows],
            best_s=best_s,
        )

    def passed(self, rows: IntArray, ep: int, best_s: float, least: float) -> npt.NDArray[np.bool_]:
        """Whether each of the ``rows`` (as in :meth:`budget_ceilings`) has its quick bound at
        ``best_s`` or more, or its :meth:`budget_ceiling` at most ``least``. First with the
        ceilings of the quick bounds alone: a ceiling falls as its bound rises (in floats too:
        each operation is monotone), and ``quick ≤ max(quick, span · block)``, so these are at
        least the exact ones, and need no block work priced (the step model's
        :func:`~meshtune.step.bounds.bound_work`, once per family: most families are
        decided here); the exact ceilings only where they do not decide."""
        fitting, first = self.fitting, int(rows[0])
        micro, tp, cp = int(fitting.micro[first]), int(fitting.tp[first]), int(fitting.cp[first])
        quick = fitting.quick[rows]
        block_s = fc_block_s(self.compute_s(micro, cp, ep, tp))  # _ceiling_terms' block_s
        loose = budget_ceilings(
            quick=quick, block_s=block_s, slope=fitting.slope[rows], best_s=best_s
        )
        found = (quick >= best_s) | (least >= loose)
        if not found.all():
            found |= least >= self.budget_ceilings(rows, ep, best_s)
        return found

    def _ceiling_terms(self, micro: int, tp: int, cp: int, ep: int) -> tuple[float, float]:
        """The block-work time and block_s of the ceilings of the splits of micro-batch
        ``micro`` and TP size ``tp`` (cached in ``floors``)."""
        key = (micro, tp, cp, ep)
        if key not in self.floors:
            block = block_floor_s(self.work(micro, tp, cp, ep))
            self.floors[key] = (block, fc_block_s(self.compute_s(micro, cp, ep, tp)))
        return self.floors[key]

    def work(self, micro_batch: int, tp: int, cp: int, ep: int) -> BlockWork:
        """:func:`~meshtune.step.bounds.bound_work` of one micro-batch on ``tp`` chips, which
        every split and ZeRO stage of them shares (cached)."""
        key = (micro_batch, tp, cp, ep)
        if key not in self.works:
            self.works[key] = bound_work(
                self.model,
                self.profile,
                self.layers(micro_batch, cp, ep),
                tp=tp,
                micro_batch=micro_batch,
                seq_len=self.seq_len,
                options=self.options,
                ep=ep,
                cp=cp,
            )
        return self.works[key]

    def bound(self, split: Split, zero: Zero, ep: int, cp: int) -> Bound:
        """The step model's lower bound of ``split``
        (:func:`~meshtune.step.bounds.lower_bound`, cached)."""
        key = (split, zero, ep, cp)
        if key not in self.bounds:
            dp, pp, m, _ = split
            micro, tp = self.batch // (dp * m), self.chips // (dp * pp * cp)
            self.bounds[key] = lower_bound(
                self.model,
                self.profile,
                self.layers(micro, cp, ep),
                split,
                tp=tp,
                batch=self.batch,
                seq_len=self.seq_len,
                zero=zero,
                options=self.options,
                ep=ep,
                cp=cp,
                work=self.work(micro, tp, cp, ep),
            )
        return self.bounds[key]
