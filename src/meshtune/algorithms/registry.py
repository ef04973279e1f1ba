"""The algorithm registry: every distributed GeMM algorithm meshtune can plan, verify and compare.

One entry per algorithm, each a cost module in :mod:`meshtune.cost`, an executor module in
:mod:`meshtune.executor`, a task graph in :mod:`meshtune.timeline.graphs` and the lines below;
an algorithm that is another one restricted (Collective: MeshSlice at S = 1; 1D TP and FSDP:
Wang on a ring) is a ``replace`` of it that changes only what differs.

Nothing else in meshtune names an algorithm (``tests/test_algorithm_names.py`` keeps it so):
the search, the plan, verify, the timeline, the engines, ``gemm``, ``compare`` and the reports
iterate over this registry or ask an entry's fields, and the few places that need one particular
algorithm ask for it by its role (:data:`DEFAULT_ALGORITHM`, :data:`FRAMEWORK_TP_ALGORITHM`,
:data:`GSPMD_ALGORITHM`). One registry-wide test runs every entry through the same oracle and
traffic checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from meshtune.algorithms.base import Algorithm, Layouts, resolve
from meshtune.cost import megatron, meshslice, meshslice_family, wang, wang_family
from meshtune.errors import MeshtuneError

DEFAULT_ALGORITHM = "meshslice"
"""What ``plan``, ``compare``, ``gemm`` and the search run when no algorithm is asked for."""

FRAMEWORK_TP_ALGORITHM = "megatron"
"""Tensor parallelism as the GPU frameworks run it (Megatron-LM, DeepSpeed, torchtitan, MaxText on
one mesh axis): what validation prices published runs with, what a framework's configuration
reads as, and what a plan is flattened to for a framework that runs 1D TP only."""

GSPMD_ALGORITHM = "collective"
"""What XLA's GSPMD partitioner runs for a GeMM sharded over two mesh axes (one all-gather or
reduce-scatter per direction, then the GeMM): how a MaxText configuration's 2D mesh reads."""

COMPARISON_FAMILIES: tuple[str, ...] = ("meshslice", "megatron", "wang", "collective", "fsdp")
"""The families of :attr:`Algorithm.family`, in the order a plan's alternatives list them."""


def _deferred(module: str, name: str) -> Callable[..., Any]:
    """The function ``name`` of ``module``, imported on its first call (:func:`resolve`). A plan
    searches MeshSlice and compares it with the families of :data:`COMPARISON_FAMILIES`
    (Megatron, 1D TP, Wang, Collective, FSDP), so the cost modules of the other algorithms
    (SUMMA, Cannon, PrimePar, Tesseract, and the one-sided GeMM with its partitioner,
    :mod:`meshtune.partition`) are loaded only when one of them is priced; their names and
    metadata are here without them."""
    path = f"{module}:{name}"

    def call(*args: Any, **kwargs: Any) -> Any:
        return resolve(path)(*args, **kwargs)

    return call


_GRAPHS = "meshtune.timeline.graphs"
_SUMMA, _CANNON = "meshtune.cost.summa", "meshtune.cost.cannon"
_PRIMEPAR, _TESSERACT = "meshtune.cost.primepar", "meshtune.cost.tesseract"
_ONESIDED = "meshtune.cost.onesided"


_MESHSLICE = Algorithm(
    name="meshslice",
    title="MeshSlice",
    citation="Nam et al., ISCA 2025, §3.1 (Figure 5, Algorithm 2)",
    summary="Partial AG/RdS on S slices in both directions, overlapped with partial GeMMs.",
    configs=meshslice.meshslice_configs,
    comms=meshslice.meshslice_comms,
    cost_model=meshslice.meshslice_cost,
    size_units=meshslice.meshslice_units,
    executor="meshtune.executor.meshslice:execute",
    timeline=f"{_GRAPHS}:meshslice_tasks",
    kernel="meshslice",
    family="meshslice",
    comm_columns=meshslice.meshslice_columns,
    layer_times=meshslice.meshslice_times,
    pass_floors=meshslice.meshslice_floors,
    family_floors=meshslice_family.meshslice_family_floors,
)

# Collective is MeshSlice with S = 1 (§2.3.4): its cost model and executor, S = 1 only.
_COLLECTIVE = replace(
    _MESHSLICE,
    name="collective",
    title="Collective",
    citation="Nam et al., ISCA 2025, §2.3.4 (Figure 2b); GSPMD-style AG/RdS 2D GeMM",
    summary="One AG/RdS per direction, then one GeMM: no overlap (MeshSlice with S = 1).",
    configs=meshslice.collective_configs,
    size_units=meshslice.collective_units,
    family="collective",
)

_WANG = Algorithm(
    name="wang",
    title="Wang",
    citation="Wang et al., ASPLOS 2023 [34]; Nam et al., ISCA 2025, §2.3.4, §4.2",
    summary=(
        "One direction's AG/RdS split into send-recv shifts overlapped with partial GeMMs "
        "(knob split = its physical axis), the other a plain collective; unrolled to S "
        "iterations."
    ),
    configs=wang.wang_configs,
    comms=wang.wang_comms,
    cost_model=wang.wang_cost,
    size_units=wang.wang_units,
    executor="meshtune.executor.wang:execute",
    timeline=f"{_GRAPHS}:wang_tasks",
    kernel="wang",
    family="wang",
    comm_columns=wang.wang_columns,
    layer_times=wang.wang_times,
    pass_floors=wang.wang_floors,
    family_floors=wang_family.wang_family_floors,
)

# 1D TP and FSDP are Wang's method on a ring of all chips with a forced Table 1 row (§4.3).
_ONE_D_TP = replace(
    _WANG,
    name="1d_tp",
    title="1D TP",
    citation="Korthikanti et al. 2022 (sequence parallelism) [16]; Nam et al., ISCA 2025, §4.3",
    summary=(
        "Megatron-style tensor parallelism with sequence parallelism on a ring of all chips "
        "(P x 1: two of a chip's four links), overlapped with Wang's method. Phase 1 is "
        "forced to W-stationary: on P x 1 the transposed layers (qkv, mlp_up) are "
        "column-parallel (W split over out; the forward all-gathers the token-sharded X, "
        "backward-data reduce-scatters X' over tokens, backward-weight all-gathers X), the "
        "untransposed ones (attn_out, mlp_down) row-parallel (W split over in; the forward "
        "reduce-scatters Y over tokens, backward-data and backward-weight all-gather Y')."
    ),
    mesh_problem=wang.ring_problem,
    meshes=wang.ring_meshes,
    dataflow_mode="wstn",
    family="megatron",
    family_floors=None,  # one mesh of each size: its floors mesh by mesh cost less
)

_FSDP = replace(
    _WANG,
    name="fsdp",
    title="FSDP",
    citation="Zhao et al. 2023 (PyTorch FSDP) [37]; Nam et al., ISCA 2025, §4.3",
    summary=(
        "Fully-sharded data parallelism on a ring of all chips (P x 1), overlapped with "
        "Wang's method. Phase 1 is forced to Y-stationary: X, Y and their gradients stay "
        "token-sharded; W (sharded over in) is all-gathered for the forward and "
        "backward-data passes and W' is reduce-scattered after backward-weight."
    ),
    mesh_problem=wang.ring_problem,
    meshes=wang.ring_meshes,
    dataflow_mode="ystn",
    family="fsdp",
    family_floors=None,  # one mesh of each size: its floors mesh by mesh cost less
)

_REGISTERED: tuple[Algorithm, ...] = (
    _MESHSLICE,
    _COLLECTIVE,
    _WANG,
    Algorithm(
        name="summa",
        title="SUMMA",
        citation="van de Geijn & Watts 1997 [30]; Nam et al., ISCA 2025, §2.3.3 (Figure 2a), §4.2",
        summary=(
            "L = lcm(P_r, P_c) iterations of ring broadcasts (and reduces for LS/RS) pipelined "
            "in D packets over P + D − 2 stages, overlapped with partial GeMMs; unrolled to S "
            "iterations. Knobs: packets D, slices S."
        ),
        configs=_deferred(_SUMMA, "summa_configs"),
        comms=_deferred(_SUMMA, "summa_comms"),
        comm_columns=_deferred(_SUMMA, "summa_columns"),
        cost_model=_deferred(_SUMMA, "summa_cost"),
        size_units=_deferred(_SUMMA, "summa_units"),
        executor="meshtune.executor.summa:execute",
        timeline=f"{_GRAPHS}:summa_tasks",
    ),
    Algorithm(
        name="cannon",
        title="Cannon",
        citation="Cannon 1969 [4]; Nam et al., ISCA 2025, §2.3.2, §4.2",
        summary=(
            "Square meshes only: skew the moving shards, then P systolic send-recv shifts "
            "overlapped with partial GeMMs (LS/RS: the stationary input stays, the other input "
            "and the running sums of C travel, and C is unskewed at the end)."
        ),
        configs=_deferred(_CANNON, "cannon_configs"),
        comms=_deferred(_CANNON, "cannon_comms"),
        cost_model=_deferred(_CANNON, "cannon_cost"),
        size_units=_deferred(_CANNON, "cannon_units"),
        executor="meshtune.executor.cannon:execute",
        timeline=f"{_GRAPHS}:cannon_tasks",
        mesh_problem=_deferred(_CANNON, "cannon_problem"),
        kernel="cannon",
    ),
    _ONE_D_TP,
    _FSDP,
    Algorithm(
        name="megatron",
        title="Megatron TP",
        citation="Shoeybi et al. 2019 (Megatron-LM), §3, Fig. 3; Korthikanti et al. 2022, §4.2.2",
        summary=(
            "Tensor parallelism as GPU users run it, on a ring of all chips (P x 1): layers fed "
            "by the residual stream (qkv, mlp_up) are column-parallel (W split over out), those "
            "fed by another FC (attn_out, mlp_down) row-parallel (W split over in). With "
            "sequence parallelism (seq_shards = P, as Megatron runs TP > 1) the column-parallel "
            "forward all-gathers X over tokens and the row-parallel forward reduce-scatters Y, "
            "the backward mirrors them and re-gathers X for the weight gradient; without it "
            "(seq_shards = 1), all-reduces of Y and X'. No collective overlaps the GeMM it "
            "feeds or drains."
        ),
        configs=megatron.megatron_configs,
        comms=megatron.megatron_comms,
        cost_model=megatron.megatron_cost,
        layer_times=megatron.megatron_times,
        size_units=megatron.megatron_units,
        executor="meshtune.executor.megatron:execute",
        timeline=f"{_GRAPHS}:megatron_tasks",
        mesh_problem=wang.ring_problem,
        meshes=wang.ring_meshes,
        dataflow_mode="ystn",
        family="megatron",
        describe=megatron.describe,
        token_shards=megatron.megatron_token_shards,
    ),
    Algorithm(
        name="primepar",
        title="PrimePar",
        citation="Wang et al., ASPLOS 2024 [33] (spatial-temporal primitive); Nam et al., §7",
        summary=(
            "2^k x 2^k meshes only, Y-stationary (forced): chip (r, c) at step t multiplies the "
            "blocks of the slides' indices (forward I_M = r, I_N = r + c + t, I_K = c); inputs "
            "and weights move by send-recv ring shifts overlapped with the GeMMs (a diagonal "
            "shift is two hops), no all-reduce, no re-layout between the three passes; I is "
            "skewed before the forward and dI unskewed after backward data (between layers)."
        ),
        configs=_deferred(_PRIMEPAR, "primepar_configs"),
        comms=_deferred(_PRIMEPAR, "primepar_comms"),
        cost_model=_deferred(_PRIMEPAR, "primepar_cost"),
        size_units=_deferred(_PRIMEPAR, "primepar_units"),
        executor="meshtune.executor.primepar:execute",
        timeline=f"{_GRAPHS}:primepar_tasks",
        mesh_problem=_deferred(_PRIMEPAR, "primepar_problem"),
        meshes=_deferred(_PRIMEPAR, "primepar_meshes"),
        dataflow_mode="ystn",
    ),
    Algorithm(
        name="tesseract",
        title="Tesseract",
        citation="Wang et al., ICPP 2022 (Tesseract), §3.1, Algorithm 3, Figures 3-4",
        summary=(
            "2.5D on [q, q, d] meshes (d·q² chips, 1 <= d <= q): tokens split over the d "
            "depth layers, weights replicated over depth, SUMMA inside each layer (knobs: "
            "packets D, slices S), the weight gradient all-reduced over depth (reduce-scatter "
            "+ all-gather on axis 2). Phase 1 is forced to Y-stationary: forward OS, backward "
            "data LS, backward weight RS (Tesseract's A·B, A·Bᵀ and Aᵀ·B)."
        ),
        configs=_deferred(_TESSERACT, "tesseract_configs"),
        comms=_deferred(_TESSERACT, "tesseract_comms"),
        cost_model=_deferred(_TESSERACT, "tesseract_cost"),
        size_units=_deferred(_TESSERACT, "tesseract_units"),
        executor="meshtune.executor.tesseract:execute",
        timeline=f"{_GRAPHS}:tesseract_tasks",
        mesh_problem=_deferred(_TESSERACT, "tesseract_problem"),
        meshes=_deferred(_TESSERACT, "tesseract_meshes"),
        dataflow_mode="ystn",
    ),
    Algorithm(
        name="onesided",
        title="One-sided",
        citation="Brock & Golin 2025, Slicing Is All You Need, §4 (Algorithms 1-2)",
        summary=(
            "Universal one-sided GeMM: any row / column / 2D-block / block-cyclic / replicated "
            "layout of A, B and C, replication factor c <= 4 and stationary A, B or C; each "
            "process multiplies the tiles overlapping its stationary tiles, fetching inputs "
            "with one-sided gets and adding C with remote accumulates, then replicas reduce."
        ),
        configs=_deferred(_ONESIDED, "onesided_configs"),
        comms=_deferred(_ONESIDED, "onesided_comms"),
        comm_columns=_deferred(_ONESIDED, "onesided_columns"),
        cost_model=_deferred(_ONESIDED, "onesided_cost"),
        size_units=_deferred(_ONESIDED, "onesided_units"),
        executor="meshtune.executor.onesided:execute",
        timeline=f"{_GRAPHS}:onesided_tasks",
        mesh_problem=_deferred(_ONESIDED, "onesided_problem"),
        meshes=_deferred(_ONESIDED, "onesided_meshes"),
        describe=_deferred(_ONESIDED, "describe"),
        layouts=_deferred(_ONESIDED, "layout_configs"),
    ),
)

REGISTRY: dict[str, Algorithm] = {a.name: a for a in _REGISTERED}


def algorithm_names() -> tuple[str, ...]:
    """Registered names, in registration order."""
    return tuple(REGISTRY)


def engine_names() -> tuple[str, ...]:
    """The registered algorithms a real engine runs (``Algorithm.engine``), in order."""
    return tuple(name for name, algorithm in REGISTRY.items() if algorithm.engine)


def engine_kernels() -> dict[str, str]:
    """Name → JAX kernel family (``Algorithm.kernel``) of every algorithm a real engine runs,
    grouped by family: the families in the order their first member registers, each family's
    members in registration order (the table the exported JAX module holds)."""
    kernels = {name: a.kernel for name, a in REGISTRY.items() if a.kernel is not None}
    order = list(dict.fromkeys(kernels.values()))
    return dict(sorted(kernels.items(), key=lambda item: order.index(item[1])))


def comparison_families() -> dict[str, tuple[str, ...]]:
    """Family → its members (``Algorithm.family``), the families in
    :data:`COMPARISON_FAMILIES` order, each family's namesake first, then its other members in
    registration order (the order a family's reasons are listed in when none is feasible)."""
    found: dict[str, tuple[str, ...]] = {}
    for family in COMPARISON_FAMILIES:
        members = [name for name, a in REGISTRY.items() if a.family == family]
        found[family] = (
            *(name for name in members if name == family),
            *(name for name in members if name != family),
        )
    return found


def layout_algorithm() -> tuple[str, Layouts]:
    """(name, ``layouts``) of the registered algorithm whose configurations are data layouts
    (``Algorithm.layouts``: what ``meshtune gemm --partition`` lays out)."""
    return next((a.name, a.layouts) for a in REGISTRY.values() if a.layouts is not None)


def auto_names(all_algorithms: bool = False) -> tuple[str, ...]:
    """What ``--algorithm auto`` searches: the algorithms an engine runs, or with
    ``all_algorithms`` every registered one."""
    return algorithm_names() if all_algorithms else engine_names()


def get_algorithm(name: str) -> Algorithm:
    """The algorithm called ``name``; :class:`MeshtuneError` naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(REGISTRY)
        raise MeshtuneError(f"unknown algorithm '{name}'; known algorithms: {known}") from None


def megatron_without_sp() -> Algorithm:
    """``megatron`` with all-reduces instead of sequence parallelism (``seq_shards`` = 1): the
    tensor parallelism of runs published before sequence parallelism (Shoeybi et al. 2019, §3;
    Narayanan et al. 2021). Not registered: the search offers SP whenever TP > 1, as Megatron
    users run it; :mod:`meshtune.validation` pins this variant where a source says SP was off."""
    return replace(
        REGISTRY["megatron"],
        configs=partial(megatron.megatron_configs, sequence_parallel=False),
    )
