"""Several ring sizes in one fit: each P's own line, and whether one parameter set explains all.

The joint fit (:mod:`~meshtune.calibrate.link_model`) gives t_launch and t_sync (the
P-dependence); each P is also fitted on its own (intercept t_launch + k·t_sync, and bw) and the
joint model's error at each P is reported. The rings are consistent when the joint model meets
the 10 % target at every P; undetermined when it misses a P whose own line misses too. When the
joint model misses the target at some P that its own line fits within 5 %, no single parameter
set explains every P (typically a ring that crosses from an intra-node link to the network
between two sizes): the fit says so and suggests the split of the ring sizes into two groups
that each one parameter set explains.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from meshtune.calibrate.link_model import TARGET_MAPE, LinkData, LinkSolution, mape, solve_link
from meshtune.calibrate.regression import sig
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import RingFit


def ring_check(
    data: LinkData, ranks: NDArray[np.int64], mask: NDArray[np.bool_], joint: LinkSolution
) -> tuple[list[RingFit], bool | None, list[str]]:
    """Per ring size its :class:`RingFit`, whether the rings are consistent (``None``:
    undetermined, or fewer than two ring sizes, or a confounded joint fit), and the notes that
    say why not (see the module doc)."""
    if len(np.unique(ranks[mask])) < 2 or joint.confounded:
        return [], None, []
    notes: list[str] = []
    rings = _ring_fits(data, ranks, mask, joint)
    off = [
        r
        for r in rings
        if r.mape_joint > TARGET_MAPE and r.mape_own is not None and r.mape_own <= TARGET_MAPE / 2
    ]
    missed = [r for r in rings if r.mape_joint > TARGET_MAPE and r not in off]
    consistent = False if off else (None if missed else True)
    if missed and not off:
        where = ", ".join(
            f"P = {r.ranks} ({r.mape_joint:.0%}, its own line {r.mape_own or 0:.0%})"
            for r in missed
        )
        notes.append(
            f"the joint model misses {where}, but so does that P's own line: the times are "
            "not linear in the shard size there, which no choice of ring sizes explains"
        )
    if off:
        where = ", ".join(f"P = {r.ranks} ({r.mape_joint:.0%})" for r in off)
        notes.append(
            "no single (t_launch, t_sync, bw) explains every ring size: the joint model "
            f"misses {where} where that P's own line fits; " + _split_note(data, ranks, mask)
        )
    return rings, consistent, notes


def _ring_fits(
    data: LinkData, ranks: NDArray[np.int64], mask: NDArray[np.bool_], joint: LinkSolution
) -> list[RingFit]:
    """Per ring size: its own line over the fitted range, and the joint model's error there."""
    rings: list[RingFit] = []
    for p in np.unique(ranks[mask]):
        at = data.subset(mask & (ranks == p))
        own: LinkSolution | None = None
        if len(np.unique(at.s)) >= 2:
            try:
                own = solve_link(at)
            except LogFormatError:
                own = None
        rings.append(
            RingFit(
                ranks=int(p),
                points=len(at.t),
                intercept_s=sig(float(own.theta[0]) if own else float(np.min(at.t))),
                bw_bytes_per_s=sig(1 / own.theta[2]) if own and own.theta[2] > 0 else None,
                mape_joint=sig(mape(joint, at), 4),
                mape_own=sig(mape(own, at), 4) if own else None,
            )
        )
    return rings


def _split_note(data: LinkData, ranks: NDArray[np.int64], mask: NDArray[np.bool_]) -> str:
    """Which grouping of the ring sizes into P ≤ x and P > x two parameter sets explain best."""
    sizes = sorted(int(p) for p in np.unique(ranks[mask]))
    best: tuple[float, int, list[str]] | None = None
    for cut in range(1, len(sizes)):
        parts: list[str] = []
        worst = 0.0
        for group in (sizes[:cut], sizes[cut:]):
            sub = data.subset(mask & np.isin(ranks, group))
            if len(np.unique(sub.s)) < 2:
                break
            try:
                solution = solve_link(sub)
            except LogFormatError:
                break
            worst = max(worst, mape(solution, sub))
            label = f"P = {group[0]}" if len(group) == 1 else f"P = {group[0]}–{group[-1]}"
            parts.append(f"{label}: bw {1e-9 / solution.theta[2]:.3g} GB/s")
        else:
            if best is None or worst < best[0]:
                best = (worst, cut, parts)
    if best is None:
        return "no split of the ring sizes into two groups fits better"
    worst, cut, parts = best
    return (
        f"two parameter sets fit within {worst:.1%}: {'; '.join(parts)}; rings up to P = "
        f"{sizes[cut - 1]} likely stay on one link (e.g. inside a node) and larger ones cross "
        "another (e.g. the network): give each group's logs to the mesh axis whose ring it "
        "matches (--axis-map FILE=0|1)"
    )
