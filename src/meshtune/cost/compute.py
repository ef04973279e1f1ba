"""Compute time of one local GeMM on one chip (MeshSlice §3.2.2, "compute cost model").

The paper's model divides the local GeMM's FLOP count by the chip's effective FLOP/s:
``t = 2·m·n·k / F``. Every algorithm's cost model charges its local GeMMs through
:func:`gemm_time`, so a profile that knows more about compute changes every algorithm the same
way. Small GeMMs run below the chip's sustained rate (the paper sees it on real TPUs, §5.3.1:
"less efficient fine-grain partial GeMMs"); a profile calibrated from GeMM timings carries a
per-GeMM overhead and an efficiency curve over GeMM size
(:class:`~meshtune.hardware.compute.GemmEfficiency`) and then ``t = overhead + 2·m·n·k / (F ·
efficiency(2·m·n·k))``.
"""

from __future__ import annotations

from typing import Literal

from meshtune.errors import ProfileError
from meshtune.hardware.profile import HardwareProfile, ProfileMemo

Precision = Literal["bf16", "fp8"]
PRECISIONS: tuple[Precision, ...] = ("bf16", "fp8")
DEFAULT_PRECISION: Precision = "bf16"

# at_precision's FP8 copies: (profile, None) → the copy. Profiles are frozen, so an entry never
# goes stale.
_FP8_MEMO: ProfileMemo[None, HardwareProfile] = ProfileMemo(256)


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


def at_precision(profile: HardwareProfile, precision: Precision) -> HardwareProfile:
    """The profile the FC GeMMs of a ``precision`` step are priced with.

    ``"bf16"``: ``profile`` itself. ``"fp8"`` (DeepSeek-AI 2024, arXiv:2412.19437, §3.3.1: the
    Fprop, Dgrad and Wgrad GeMMs of every linear layer in FP8): ``profile`` with its peak,
    effective rate and GeMM efficiency curve replaced by ``profile.fp8``'s (the curve kept
    when ``fp8`` gives none), so every algorithm's ``t = overhead + 2·m·n·k / (F_fp8 ·
    efficiency(2·m·n·k))`` and nothing else changes: operand widths, links and memory stay
    the profile's. Raises :class:`ProfileError` naming the profile when it has no ``fp8``.
    """
    if precision == "bf16":
        return profile
    return _FP8_MEMO.get(profile, None, lambda: _fp8_copy(profile))


def _fp8_copy(profile: HardwareProfile) -> HardwareProfile:
    """:func:`at_precision`'s FP8 profile, built."""
    fp8 = profile.fp8
    if fp8 is None:
        raise ProfileError(
            f"--precision fp8: profile '{profile.name}' has no fp8 section (FP8 GeMM rates); "
            "use --precision bf16 or a profile with FP8 Tensor Cores (h100-8gpu-nodes, "
            "h800-8gpu-nodes)"
        )
    return profile.model_copy(
        update={
            "peak_flops_per_s": fp8.peak_flops_per_s,
            "effective_flops_per_s": fp8.effective_flops_per_s,
            "gemm_efficiency": fp8.gemm_efficiency or profile.gemm_efficiency,
        }
    )
