"""The views of :func:`meshtune.compare.model.compare_models` (MeshSlice Figures 9–14, Tables
2 and 3), each a function of the call's :class:`~meshtune.compare.searches.StudySetup`.

* :func:`scaling_view` — FC time, utilization and the end-to-end step (FC time plus
  ``blocks ·`` :func:`~meshtune.step.work.nonfc_block`, §4.4) per chip count (Figures 9, 12).
* :func:`breakdown_view` — every pass of every layer at the best mesh, summed (Figure 10).
* :func:`gemms_view` — :func:`~meshtune.compare.gemm.gemm_study` of each of the model's
  distinct GeMMs (:func:`distinct_gemms`) and the mean speedups (Figure 11, §5.1.4).
* :func:`shapes_view` — every mesh shape searched (Figure 13).
* :func:`slices_view` — each configuration legal for every layer, on the best mesh (Fig. 14).
* :func:`dataflow_view` — phase 1's dataflows against Y-stationary everywhere (Table 2).
* :func:`overlap_view` — the profile as it is against every kind overlapped (Table 3).

Each view iterates over the setup's algorithms in order and prices only through the shared
searches and the registry's cost functions; an algorithm with no feasible mesh gets a row with
the reason (or, for shapes and slices, none).
"""

from __future__ import annotations

from collections.abc import Sequence

from meshtune.compare.breakdown import pass_breakdown, sum_breakdowns
from meshtune.compare.gemm import GemmStudy, gemm_study
from meshtune.compare.records import (
    AlgorithmBreakdown,
    DataflowEntry,
    OverlapEntry,
    ScalingPoint,
    ShapeEntry,
    SliceEntry,
)
from meshtune.compare.searches import StudySetup
from meshtune.compare.selection import speedup
from meshtune.cost.config import Config
from meshtune.dataflow import plan_dataflows
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.search import MeshResult, flop_utilization, layer_choice
from meshtune.step.work import nonfc_block


def _repriced(result: MeshResult, profile: HardwareProfile) -> float:
    """FC time of one step with ``result``'s mesh and configurations priced on ``profile``."""
    return result.blocks * sum(
        layer_choice(result.algorithm, c.dataflow, result.mesh, profile, c.config).time_s
        for c in result.layers
    )


def _utilization(result: MeshResult, time_s: float, profile: HardwareProfile) -> float:
    """``result``'s FC FLOP utilization had its step taken ``time_s`` (§5.1.1)."""
    return flop_utilization(result.flops, time_s, result.mesh.chips, profile.peak_flops_per_s)


def distinct_gemms(layers: Sequence[FcLayer]) -> list[tuple[tuple[int, int, int], str]]:
    """The distinct (m, n, k) of a block's training GeMMs after phase 1 (§5.1.4), each with the
    layers and passes it comes from (GPT-3 and MT-NLG: eight)."""
    found: dict[tuple[int, int, int], list[str]] = {}
    for choice in plan_dataflows(layers, "auto").layers:
        for op in choice.ops:
            found.setdefault((op.m, op.n, op.k), []).append(
                f"{choice.layer.name} {op.pass_.value.replace('_', '-')}"
            )
    return [(mnk, ", ".join(where)) for mnk, where in found.items()]


def _common_configs(result: MeshResult) -> list[Config]:
    """Configurations legal for every layer of ``result``, smallest first."""
    common = set(result.layers[0].candidates)
    for choice in result.layers[1:]:
        common &= set(choice.candidates)
    return sorted(common, key=Config.sort_key)


def scaling_view(setup: StudySetup, sizes: Sequence[int]) -> list[ScalingPoint]:
    """Figures 9 and 12, with the end-to-end step (FC + blocks · non-FC) and speedups."""
    points: list[ScalingPoint] = []
    for chips in sizes:
        b = setup.batch_of(chips)
        nonfc = (
            None
            if setup.nonfc_note
            else setup.model.blocks
            * nonfc_block(setup.model, b, setup.seq_len, chips, setup.profile).total_s(
                setup.profile
            )
        )
        row = []
        for algorithm in setup.algorithms:
            found = setup.searches(algorithm, setup.profile, chips, b)
            if isinstance(found, str):
                row.append(
                    ScalingPoint(algorithm=algorithm.name, chips=chips, batch=b, reason=found)
                )
                continue
            best = found.best
            row.append(
                ScalingPoint(
                    algorithm=algorithm.name,
                    chips=chips,
                    batch=b,
                    reason=None,
                    mesh=best.mesh.label,
                    fc_time_s=best.time_s,
                    utilization=best.utilization(setup.profile),
                    configs=best.layer_configs(),
                    nonfc_s=nonfc,
                    step_time_s=None if nonfc is None else best.time_s + nonfc,
                )
            )
        ref = next((p for p in row if p.algorithm == setup.reference), None)
        points.extend(
            p.model_copy(
                update={
                    "fc_speedup_of_reference": speedup(p.fc_time_s, ref.fc_time_s if ref else None),
                    "step_speedup_of_reference": speedup(
                        p.step_time_s, ref.step_time_s if ref else None
                    ),
                }
            )
            for p in row
        )
    return points


def breakdown_view(setup: StudySetup) -> list[AlgorithmBreakdown]:
    """Figure 10: every pass of every layer at the best mesh, summed over the blocks."""
    out = []
    for algorithm in setup.algorithms:
        found = setup.at(algorithm)
        if isinstance(found, str):
            out.append(
                AlgorithmBreakdown(
                    algorithm=algorithm.name, mesh=None, reason=found, breakdown=None
                )
            )
            continue
        best = found.best
        parts = [
            pass_breakdown(algorithm, op, best.mesh, setup.profile, c.config)[0]
            for c in best.layers
            for op in c.dataflow.ops
        ]
        out.append(
            AlgorithmBreakdown(
                algorithm=algorithm.name,
                mesh=best.mesh.label,
                reason=None,
                breakdown=sum_breakdowns(parts, best.blocks),
            )
        )
    return out


def gemms_view(setup: StudySetup) -> tuple[list[GemmStudy], dict[str, float]]:
    """Figure 11: :func:`gemm_study` of each distinct GeMM, and the mean speedups."""
    names = [a.name for a in setup.algorithms]
    layers = fc_layers(setup.model, setup.batch_of(setup.at_chips), setup.seq_len)
    studies = [
        gemm_study(
            *mnk,
            setup.at_chips,
            setup.profile,
            names,
            setup.mesh,
            reference=setup.reference,
            label=where,
        )
        for mnk, where in distinct_gemms(layers)
    ]
    mean: dict[str, float] = {}
    for name in (n for n in names if n != setup.reference):
        ups = [
            e.speedup_of_reference
            for study in studies
            for e in study.entries
            if e.algorithm == name and e.speedup_of_reference is not None
        ]
        if ups:
            mean[name] = sum(ups) / len(ups)
    return studies, mean


def shapes_view(setup: StudySetup) -> list[ShapeEntry]:
    """Figure 13: every mesh shape searched, feasible (fastest first) or with its reason."""
    out = []
    for algorithm in setup.algorithms:
        found = setup.at(algorithm)
        if isinstance(found, str):
            continue
        for result in (*found.ranked, *found.infeasible):
            feasible = result.feasible
            out.append(
                ShapeEntry(
                    algorithm=algorithm.name,
                    mesh=result.mesh.label,
                    reason=result.infeasible,
                    fc_time_s=result.time_s if feasible else None,
                    utilization=result.utilization(setup.profile) if feasible else None,
                    configs=result.layer_configs() if feasible else None,
                )
            )
    return out


def slices_view(setup: StudySetup) -> list[SliceEntry]:
    """Figure 14: on the best mesh, each layer's own configuration, then every configuration
    legal for all layers applied to all of them."""
    out: list[SliceEntry] = []
    for algorithm in setup.algorithms:
        found = setup.at(algorithm)
        if isinstance(found, str):
            continue
        best = found.best
        rows: list[tuple[dict[str, int] | None, float]] = [(None, best.time_s)]
        for config in _common_configs(best):
            forced = [
                layer_choice(algorithm, c.dataflow, best.mesh, setup.profile, config)
                for c in best.layers
            ]
            rows.append((dict(config), best.blocks * sum(c.time_s for c in forced)))
        out.extend(
            SliceEntry(
                algorithm=algorithm.name,
                mesh=best.mesh.label,
                config=config,
                fc_time_s=time_s,
                utilization=_utilization(best, time_s, setup.profile),
            )
            for config, time_s in rows
        )
    return out


def dataflow_view(setup: StudySetup) -> list[DataflowEntry]:
    """Table 2: phase 1's dataflows (auto) against Y-stationary everywhere."""
    out = []
    for algorithm in setup.algorithms:
        on, off = setup.at(algorithm, "auto"), setup.at(algorithm, "ystn")
        on_best = None if isinstance(on, str) else on.best
        off_best = None if isinstance(off, str) else off.best
        reasons = [r for r in (on, off) if isinstance(r, str)]
        out.append(
            DataflowEntry(
                algorithm=algorithm.name,
                optimized_mesh=on_best.mesh.label if on_best else None,
                optimized_utilization=on_best.utilization(setup.profile) if on_best else None,
                unoptimized_mesh=off_best.mesh.label if off_best else None,
                unoptimized_utilization=(off_best.utilization(setup.profile) if off_best else None),
                speedup=speedup(
                    off_best.time_s if off_best else None, on_best.time_s if on_best else None
                ),
                reason="; ".join(reasons) or None,
            )
        )
    return out


def overlap_view(setup: StudySetup) -> list[OverlapEntry]:
    """Table 3: tuned with every kind overlapped and run on the profile, retuned for the
    profile, and with every kind overlapped."""
    profile = setup.profile
    overlapping = profile.model_copy(update={"overlapped": list(CollectiveKind)})
    chips, batch = setup.at_chips, setup.batch_of(setup.at_chips)
    out = []
    for algorithm in setup.algorithms:
        tuned = setup.searches(algorithm, overlapping, chips, batch)
        retuned = setup.searches(algorithm, profile, chips, batch)
        if isinstance(tuned, str) or isinstance(retuned, str):
            out.append(
                OverlapEntry(
                    algorithm=algorithm.name,
                    mesh=None,
                    configs=None,
                    as_tuned_utilization=None,
                    retuned_mesh=None,
                    retuned_utilization=None,
                    overlapped_utilization=None,
                    reason=tuned if isinstance(tuned, str) else str(retuned),
                )
            )
            continue
        best = tuned.best
        out.append(
            OverlapEntry(
                algorithm=algorithm.name,
                mesh=best.mesh.label,
                configs=best.layer_configs(),
                as_tuned_utilization=_utilization(best, _repriced(best, profile), profile),
                retuned_mesh=retuned.best.mesh.label,
                retuned_utilization=retuned.best.utilization(profile),
                overlapped_utilization=best.utilization(overlapping),
                reason=None,
            )
        )
    return out
