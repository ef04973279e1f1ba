"""The A100 profile's effective GeMM rate, fitted to one published one-layer measurement.

No BF16 GeMM size sweep of an A100 SXM was found (the H100 profile has one; see its sources),
and the best-shape microbenchmark (MAMF, 271.2 TFLOP/s) is an upper bound that the training
kernels of Megatron-LM do not reach. Korthikanti et al. 2022, Table 4, published the
forward + backward time of **one transformer layer** of their 22B model (h = 6144, 64 heads,
s = 2048, micro-batch 4, TP 8 on a DGX A100) under five techniques: a kernel-level measurement
of the same kind as a GeMM table, not a training step. :func:`fit_effective_rate` finds the
``effective_flops_per_s`` at which meshtune's step model of that one layer (a one-block model,
pinned TP 8 × PP 1 × DP 1, plain attention, dropout, Megatron with and without sequence
parallelism) best matches the five times in the least-squares sense of the relative errors;
everything else (HBM bandwidth, NVLink collectives) keeps the profile's own values.

The fitted rate goes into ``profiles/a100-80gb-*.toml`` with this citation, and a test re-fits
it whenever the step model changes, so the profile and the model cannot drift apart silently.
Korthikanti et al.'s Table 5 steps ran the same software on the same machines: their
validation error is therefore not independent of this fit (docs/validation.md says so); every
other source's is.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.algorithms.registry import (
    FRAMEWORK_TP_ALGORITHM,
    get_algorithm,
    megatron_without_sp,
)
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.search.levels import search_cluster
from meshtune.step.memory import Recompute
from meshtune.step.options import ClusterOptions, StepOptions

LAYER_22B = ModelSpec(
    name="korthikanti-22b-layer",
    display_name="GPT 22B, one transformer layer",
    source="Korthikanti et al. 2022 (arXiv:2205.05198), Tables 3 and 4",
    blocks=1,
    hidden=6144,
    heads=64,
    head_dim=96,
    kv_heads=64,
    ffn_hidden=24576,
    mlp="gelu",
    vocab=8,  # the layer alone: the embedding and the head are not in Table 4's times
    seq_len=2048,
)
MICRO_BATCH = 4
TP = 8


@dataclass(frozen=True)
class LayerTime:
    """One row of Korthikanti et al. 2022 Table 4: forward + backward of one layer, ms."""

    technique: str
    recompute: Recompute
    sequence_parallel: bool
    measured_ms: float


TABLE_4: tuple[LayerTime, ...] = (
    LayerTime("baseline, no recompute", "none", False, 19.6),
    LayerTime("sequence parallelism", "none", True, 19.0),
    LayerTime("baseline with full recompute", "full", False, 27.2),
    LayerTime("selective recompute", "selective", False, 20.9),
    LayerTime("selective recompute + sequence parallelism", "selective", True, 20.3),
)
"""Korthikanti et al. 2022, Table 4 (csv rows 36-40 of the shared validation set)."""


def layer_ms(profile: HardwareProfile, row: LayerTime) -> float:
    """meshtune's forward + backward time of the one layer of ``row``, milliseconds: the
    one-block step without its optimizer step (nothing else is in a one-block, DP 1, PP 1
    step of an 8-token vocabulary but that layer)."""
    with_sp = row.sequence_parallel
    algorithm = get_algorithm(FRAMEWORK_TP_ALGORITHM) if with_sp else megatron_without_sp()
    options = ClusterOptions(
        dp=1,
        pp=1,
        micro_batches=1,
        step=StepOptions(
            recompute=row.recompute,
            attention="plain",
            dropout=True,
            grad_overlap=False,
            headroom=0.0,
        ),
    )
    result = search_cluster(
        LAYER_22B,
        profile.model_copy(update={"memory_bytes": None}),
        TP,
        batch=MICRO_BATCH,
        seq_len=LAYER_22B.seq_len,
        algorithms=[algorithm],
        options=options,
        meshes=[Mesh(TP, 1)],
        top=1,
    )
    step = result.best.step
    return (step.step_s - step.optimizer_s) * 1e3


def relative_errors(profile: HardwareProfile) -> list[float]:
    """predicted / measured − 1 for every row of :data:`TABLE_4`."""
    return [layer_ms(profile, row) / row.measured_ms - 1.0 for row in TABLE_4]


def fit_effective_rate(profile: HardwareProfile, *, tolerance: float = 1e9) -> float:
    """The ``effective_flops_per_s`` minimising Σ (predicted / measured − 1)² over
    :data:`TABLE_4`, by bounded scalar minimisation (``scipy.optimize.minimize_scalar``)
    between 0.3 and 1.0 of the profile's peak, to ``tolerance`` FLOP/s (the error is unimodal
    in the rate: every predicted time falls as the rate rises)."""
    from scipy.optimize import minimize_scalar

    def loss(rate: float) -> float:
        trial = profile.model_copy(update={"effective_flops_per_s": rate})
        return sum(error * error for error in relative_errors(trial))

    bounds = (0.3 * profile.peak_flops_per_s, profile.peak_flops_per_s)
    found = minimize_scalar(loss, bounds=bounds, method="bounded", options={"xatol": tolerance})
    return float(found.x)
