"""Compute time of one local GeMM on one chip (MeshSlice §3.2.2, "compute cost model").

The paper's model divides the local GeMM's FLOP count by the chip's effective FLOP/s:
``t = 2·m·n·k / F``. Every algorithm's cost model charges its local GeMMs through
:func:`gemm_time`, so a profile that knows more about compute changes every algorithm the same
way. Small GeMMs run below the chip's sustained rate (the paper sees it on real TPUs, §5.3.1:
"less efficient fine-grain partial GeMMs"); a profile calibrated from GeMM timings carries a
per-GeMM overhead and an efficiency curve over GeMM size (:class:`~meshtune.specs.GemmEfficiency`)
and then ``t = overhead + 2·m·n·k / (F · efficiency(2·m·n·k))``.
"""

from __future__ import annotations

from meshtune.specs import HardwareProfile


def gemm_time(profile: HardwareProfile, m: float, n: float, k: float) -> float:
    """Seconds for one chip to multiply an (m × k) by a (k × n) matrix.

    ``2·m·n·k / F`` with F = ``effective_flops_per_s``; with ``profile.gemm_efficiency``,
    ``overhead + 2·m·n·k / (F · efficiency(2·m·n·k))``.
    """
    flops = 2.0 * m * n * k
    model = profile.gemm_efficiency
    if model is None:
        return flops / profile.effective_flops_per_s
    return model.overhead_s + flops / (profile.effective_flops_per_s * model.efficiency(flops))
