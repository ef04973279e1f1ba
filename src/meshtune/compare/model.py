"""Every registered algorithm on one model over chip counts (MeshSlice §5: Figures 9–14,
Tables 2 and 3, and the cluster view).

:func:`compare_models` runs a model at each chip count, weak scaling (batch = chips / 2,
§5.1.1) or at a fixed batch (strong scaling, §5.1.3), and returns a
:class:`~meshtune.compare.records.Comparison` with the views asked for (:data:`VIEWS`): the
mesh-only views of :mod:`meshtune.compare.views`, where the mesh takes every chip as in the
paper, with an end-to-end step estimate (FC time plus the non-FC work of
:func:`meshtune.step.work.nonfc_block`, §4.4), and the cluster view of
:mod:`meshtune.compare.cluster`. It checks the inputs, then computes each view asked for once
from one shared :class:`~meshtune.compare.searches.StudySetup`; an algorithm with no feasible
mesh at a size is reported with the reason, never raised.
"""

from __future__ import annotations

from collections.abc import Sequence

from meshtune.algorithms.registry import DEFAULT_ALGORITHM, get_algorithm
from meshtune.compare.cluster import cluster_entries
from meshtune.compare.records import MESH_VIEWS, VIEWS, Comparison, View
from meshtune.compare.searches import Searches, StudySetup
from meshtune.compare.selection import selected
from meshtune.compare.views import (
    breakdown_view,
    dataflow_view,
    gemms_view,
    overlap_view,
    scaling_view,
    shapes_view,
    slices_view,
)
from meshtune.errors import InfeasibleError, MeshtuneError
from meshtune.hardware.mesh import Mesh, check_chips
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import check_size


def compare_models(
    model: ModelSpec,
    profile: HardwareProfile,
    chips_list: Sequence[int],
    batch: int | None = None,
    algorithms: Sequence[str] | None = None,
    *,
    seq_len: int | None = None,
    views: Sequence[View] = MESH_VIEWS,
    reference: str = DEFAULT_ALGORITHM,
    at_chips: int | None = None,
    mesh: Mesh | None = None,
) -> Comparison:
    """Every selected algorithm on ``model`` at each of ``chips_list`` (see the module docstring).

    ``batch=None`` is weak scaling (``chips // 2`` sequences, §5.1.1); a number fixes the batch
    at every size (strong scaling, §5.1.3). The single-size views (breakdown, gemms, shapes,
    slices, dataflow, overlap) use ``at_chips`` (default: the largest of ``chips_list``).
    ``mesh`` restricts every search to that one shape. The end-to-end step adds ``blocks ·``
    :func:`~meshtune.step.work.nonfc_block` to the FC time when the profile has an HBM bandwidth.
    Each search (algorithm, profile, chips, batch, dataflow mode) runs once, whichever views use
    it. Raises :class:`InfeasibleError` / :class:`MeshtuneError` for bad sizes, names or views
    only; an algorithm with no feasible mesh at a size is reported with the reason.
    """
    if not chips_list:
        raise InfeasibleError("no chip count to compare")
    sizes = sorted(dict.fromkeys(check_chips(c) for c in chips_list))
    at = max(sizes) if at_chips is None else check_chips(at_chips)
    if mesh is not None:
        for chips in sorted({*sizes, at}):
            if mesh.chips != chips:
                raise InfeasibleError(
                    f"mesh shape {mesh.label} has {mesh.chips} chips, not {chips}"
                )
    unknown = [v for v in views if v not in VIEWS]
    if unknown or not views:
        raise MeshtuneError(
            f"unknown view {unknown[0]!r}; known views: {', '.join(VIEWS)}"
            if unknown
            else "no view selected; known views: " + ", ".join(VIEWS)
        )
    seq = model.seq_len if seq_len is None else check_size("sequence length", seq_len)
    setup = StudySetup(
        model=model,
        profile=profile,
        algorithms=selected(algorithms),
        reference=get_algorithm(reference).name,
        seq_len=seq,
        batch=None if batch is None else check_size("batch", batch),
        at_chips=at,
        mesh=mesh,
        searches=Searches(model, seq, mesh),
        nonfc_note=None
        if profile.hbm_bytes_per_s is not None
        else f"profile '{profile.name}' has no hbm_bytes_per_s: no end-to-end estimate (§4.4)",
    )
    gemms, mean = gemms_view(setup) if "gemms" in views else ([], {})
    return Comparison(
        model=model.name,
        display_name=model.display_name,
        profile=profile.name,
        seq_len=seq,
        scaling="weak" if setup.batch is None else "strong",
        batch=setup.batch,
        chips=sizes,
        at_chips=at,
        mesh=None if mesh is None else mesh.label,
        reference=setup.reference,
        algorithms=[a.name for a in setup.algorithms],
        views=[v for v in VIEWS if v in views],
        overlapped=[k.value for k in profile.overlapped],
        nonfc_note=setup.nonfc_note,
        scaling_points=scaling_view(setup, sizes) if "scaling" in views else [],
        breakdown=breakdown_view(setup) if "breakdown" in views else [],
        gemms=gemms,
        gemms_mean_speedup=mean,
        shapes=shapes_view(setup) if "shapes" in views else [],
        slices=slices_view(setup) if "slices" in views else [],
        dataflow=dataflow_view(setup) if "dataflow" in views else [],
        overlap=overlap_view(setup) if "overlap" in views else [],
        cluster=cluster_entries(
            model,
            profile,
            sizes,
            setup.algorithms,
            setup.reference,
            {chips: setup.batch_of(chips) for chips in sizes},
            seq,
        )
        if "cluster" in views
        else [],
    )
