"""Compute time of one local GeMM on one chip (MeshSlice §3.2.2, "compute cost model").

The paper's model divides the local GeMM's FLOP count by the chip's effective FLOP/s:
``t = 2·m·n·k / F``. Every algorithm's cost model charges its local GeMMs through
:func:`gemm_time`, so a profile that knows more about compute (per-GeMM overheads, efficiency
over GeMM size) changes every algorithm the same way.
"""

from __future__ import annotations

from meshtune.specs import HardwareProfile


def gemm_time(profile: HardwareProfile, m: float, n: float, k: float) -> float:
    """Seconds for one chip to multiply an (m × k) by a (k × n) matrix: ``2·m·n·k / F``."""
    return 2.0 * m * n * k / profile.effective_flops_per_s
