"""``meshtune validate``'s library side: predict every expressible run, summarize the errors,
check them against the recorded bounds, and render them as JSON, Markdown or a plot."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshtune.algorithms.registry import FRAMEWORK_TP_ALGORITHM
from meshtune.errors import printable
from meshtune.hardware.profile import HardwareProfile
from meshtune.validation.bounds import (
    INTERVAL_COVERAGE,
    Bounds,
    ValidatedPoint,
    fc_parameters,
    validated_ranges,
)
from meshtune.validation.data import (
    NotExpressible,
    load_validation_set,
)
from meshtune.validation.predict import Prediction, load_profiles, predict_row
from meshtune.validation.stats import (
    GroupAgreement,
    Summary,
    ordered_pairs,
    prediction_interval,
    spearman,
    summarize,
)

SCHEMA = "meshtune.validate/1"
"""Version tag of the ``--json`` document; bumped on any incompatible change."""


@dataclass(frozen=True)
class ValidationReport:
    """Every prediction and unexpressible run of the selected sources."""

    predictions: tuple[Prediction, ...]
    not_expressible: tuple[tuple[str, NotExpressible], ...]
    profiles: Mapping[str, str] = field(default_factory=dict)

    def errors(self, source: str | None = None) -> list[float]:
        """Signed errors of the predicted runs (of one source)."""
        return [
            p.error
            for p in self.predictions
            if p.error is not None and (source is None or p.source == source)
        ]

    def summary(self, source: str | None = None) -> Summary | None:
        """:func:`~meshtune.validation.stats.summarize` of :meth:`errors`."""
        return summarize(self.errors(source))

    def sources(self) -> list[str]:
        """Source keys with predictions, in order."""
        return list(dict.fromkeys(p.source for p in self.predictions))

    def groups(self) -> dict[str, GroupAgreement]:
        """{group: rank agreement of predicted against published step} (:class:`GroupAgreement`)."""
        found: dict[str, list[Prediction]] = {}
        for p in self.predictions:
            if p.run.group is not None and p.predicted_s is not None:
                found.setdefault(p.run.group, []).append(p)
        agreement = {}
        for name, members in found.items():
            predicted = [m.predicted_s or 0.0 for m in members]
            published = [m.published_s for m in members]
            agree, pairs = ordered_pairs(predicted, published)
            agreement[name] = GroupAgreement(
                len(members), spearman(predicted, published), agree, pairs
            )
        return agreement

    def validated_points(self) -> list[ValidatedPoint]:
        """Profile, chips and FC parameters of every predicted run (the validated ranges)."""
        return [
            ValidatedPoint(self.profiles[p.run.hardware], p.run.chips, fc_parameters(p.run.spec()))
            for p in self.predictions
            if p.predicted_s is not None
        ]

    def interval(self, coverage: float = INTERVAL_COVERAGE) -> float:
        """Half-width (fraction) covering ``coverage`` of the validated runs."""
        return prediction_interval(self.errors(), coverage)

    def to_json(self) -> str:
        """The stable ``--json`` document (:data:`SCHEMA`)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document as a dict."""
        overall = self.summary()
        return {
            "schema": SCHEMA,
            "tp_algorithm": FRAMEWORK_TP_ALGORITHM,
            "profiles": dict(self.profiles),
            "summary": _summary_dict(overall),
            "per_source": {s: _summary_dict(self.summary(s)) for s in self.sources()},
            "groups": {g: a._asdict() for g, a in sorted(self.groups().items())},
            "interval": {
                "coverage": INTERVAL_COVERAGE,
                "half_width_pct": None if overall is None else 100 * self.interval(),
            },
            "runs": [_run_dict(p) for p in self.predictions],
            "not_expressible": [
                {
                    "id": n.id,
                    "source": key,
                    "csv_row": n.csv_row,
                    "where": n.where,
                    "model": n.model,
                    "reason": n.reason,
                }
                for key, n in self.not_expressible
            ],
        }


def _summary_dict(s: Summary | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "runs": s.n,
        "mape_pct": s.mape_pct,
        "median_pct": s.median_pct,
        "max_pct": s.max_pct,
        "bias_pct": s.bias_pct,
    }


def _run_dict(p: Prediction) -> dict[str, Any]:
    r = p.run
    return {
        "id": r.id,
        "source": p.source,
        "csv_row": r.csv_row,
        "where": r.where,
        "model": r.model,
        "hardware": r.hardware,
        "profile": p.profile,
        "chips": r.chips,
        "tp": r.tp,
        "pp": r.pp,
        "dp": r.dp,
        "cp": r.cp,
        "ep": r.ep,
        "global_batch": r.global_batch,
        "micro_batches": p.micro_batches,
        "recompute": p.recompute,
        "engine": r.engine,
        "group": r.group,
        "quality": r.quality,
        "published_s": p.published_s,
        "predicted_s": p.predicted_s,
        "error_pct": None if p.error is None else 100 * p.error,
        "note": p.note,
    }


def validate(
    *,
    sources: list[str] | None = None,
    profiles: Mapping[str, HardwareProfile] | None = None,
    folder: Path | None = None,
) -> ValidationReport:
    """Predict every expressible run of ``sources`` (default: all) with ``profiles`` (default:
    :func:`~meshtune.validation.predict.load_profiles`)."""
    loaded = load_validation_set(folder, sources=sources)
    profiles = profiles if profiles is not None else load_profiles()
    predictions = tuple(
        predict_row(run, profiles, source=source.key) for source in loaded for run in source.runs
    )
    not_expressible = tuple((s.key, n) for s in loaded for n in s.not_expressible)
    return ValidationReport(predictions, not_expressible, {k: v.name for k, v in profiles.items()})


# --------------------------------------------------------------------------- bounds


def regressions(report: ValidationReport, bounds: Bounds) -> list[str]:
    """Each of MAPE, median, max that is worse than recorded by more than the tolerance, and
    a recorded interval, run count or validated range that no longer matches (the plan report
    prints them)."""
    s = report.summary()
    if s is None:
        return ["no run was predicted"]
    rec = bounds.recorded
    found = []
    for name, now, then in (
        ("MAPE", s.mape_pct, rec.mape_pct),
        ("median", s.median_pct, rec.median_pct),
        ("max", s.max_pct, rec.max_pct),
    ):
        if now > then + rec.tolerance_pct:
            found.append(f"{name} {now:.1f} % is worse than the recorded {then:.1f} %")
    interval = report.interval() * 100
    if abs(interval - rec.interval90_pct) > rec.tolerance_pct:
        found.append(
            f"the recorded 90 % interval ±{rec.interval90_pct:.1f} % is stale: validate "
            f"measures ±{interval:.1f} % (update validation/bounds.toml)"
        )
    if s.n != rec.runs:
        found.append(f"{s.n} runs predicted, {rec.runs} recorded (update validation/bounds.toml)")
    measured = validated_ranges(report.validated_points())
    if measured != bounds.validated_range:
        found.append(
            "the recorded validated ranges are stale: validation/bounds.toml should hold\n"
            + "\n".join(r.toml(name) for name, r in measured.items())
        )
    return found


# --------------------------------------------------------------------------- rendering


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f} %"


def markdown_table(report: ValidationReport) -> str:
    """The per-run table and the summary lines of ``meshtune validate --markdown``."""
    lines = [
        "| run | split (TP × PP × DP) | chips | published s | predicted s | error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for p in report.predictions:
        r = p.run
        predicted = "–" if p.predicted_s is None else f"{p.predicted_s:.4g}"
        error = None if p.error is None else 100 * p.error
        lines.append(
            f"| {printable(r.id)} | {r.split} | {r.chips:,} | {p.published_s:.4g} | "
            f"{predicted} | {_pct(error)} |"
        )
    lines.append("")
    lines.append("| source | runs | MAPE | median | max | bias |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for key in [*report.sources(), None]:
        s = report.summary(key)
        if s is not None:
            source = printable(key) if key else "**all**"
            lines.append(
                f"| {source} | {s.n} | {s.mape_pct:.1f} % | {s.median_pct:.1f} % | "
                f"{s.max_pct:.1f} % | {s.bias_pct:+.1f} % |"
            )
    lines.append("")
    lines.append("| group | runs | Spearman ρ | pairs in the published order |")
    lines.append("|---|---:|---:|---:|")
    groups = report.groups()
    for name, a in sorted(groups.items()):
        lines.append(f"| {printable(name)} | {a.runs} | {a.rho_text()} | {a.pairs_text()} |")
    total = GroupAgreement.total(groups.values())
    lines.append(f"| all groups | {total.runs} | – | {total.pairs_agreeing} / {total.pairs} |")
    return "\n".join(lines) + "\n"


def write_plot(report: ValidationReport, path: Path, *, force: bool = False) -> None:
    """Save a PNG of predicted against published step times (log-log, one colour per source,
    the y = x line and the 90 % interval band); needs matplotlib (the ``plot`` extra)."""
    from matplotlib.figure import Figure

    from meshtune.io import write_atomic

    figure = Figure(figsize=(6.0, 5.0), layout="constrained")
    ax = figure.subplots()
    done = [p for p in report.predictions if p.predicted_s is not None]
    for i, key in enumerate(report.sources()):
        mine = [p for p in done if p.source == key]
        ax.scatter(
            [p.published_s for p in mine],
            [p.predicted_s or 0.0 for p in mine],
            color=f"C{i}",
            label=key,
            s=18,
        )
    if done:
        lo = min(min(p.published_s, p.predicted_s or 1.0) for p in done) / 1.5
        hi = max(max(p.published_s, p.predicted_s or 1.0) for p in done) * 1.5
        ax.plot([lo, hi], [lo, hi], color="0.3", linewidth=0.8)
        x = report.interval()
        ax.fill_between(
            [lo, hi], [lo * (1 - x), hi * (1 - x)], [lo * (1 + x), hi * (1 + x)], color="0.92"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("published step (s)")
    ax.set_ylabel("predicted step (s)")
    ax.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    write_atomic(path, buffer.getvalue(), force=force)
