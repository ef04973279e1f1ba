"""Where a plan leaves what its profile was calibrated on (MeshSlice §3.2.2, §4.5).

The fitted parameters hold for the ring sizes the logs measured: a longer ring can cross onto
another link (from NVLink to the network, from one ICI dimension to a slower one) and t_sync
is an extrapolation there. A plan on a profile whose compute speed was assumed (no GeMM
timings) overstates or understates every compute time by the same unknown factor.
"""

from __future__ import annotations

from meshtune.hardware.profile import HardwareProfile


def range_warnings(profile: HardwareProfile, rows: int, cols: int) -> list[str]:
    """One sentence per way a ``rows × cols`` mesh leaves ``profile``'s calibrated range.

    A ring of axis 0 has ``rows`` chips and one of axis 1 ``cols`` chips; each is compared
    with the largest ring the profile's fits for that axis used. Profiles without a
    calibration record (constants from a paper or a datasheet) give no warning.
    """
    calibration = profile.calibration
    if calibration is None:
        return []
    warnings: list[str] = []
    for axis, ring in ((0, rows), (1, cols)):
        largest = calibration.largest_ring(axis)
        if largest is not None and ring > largest:
            warnings.append(
                f"the {rows}x{cols} mesh has rings of {ring} chips on axis {axis}, but profile "
                f"'{profile.name}' was fitted on rings of at most {largest}: the "
                "communication times there are extrapolated"
            )
    origin = calibration.origins.get("effective_flops_per_s")
    if origin is None or origin.kind != "fit":
        how = f" ({origin.detail})" if origin is not None else ""
        warnings.append(
            f"profile '{profile.name}': the compute speed was assumed, not measured{how}; "
            "calibrate it from GeMM timings"
        )
    return warnings
