"""``meshtune validate``: predict published training runs with their split pinned and report
the errors (:mod:`meshtune.validation`). The library is imported inside the command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from meshtune.cli._app import app, fail, handle_errors, one_line

EXIT_REGRESSED = 1

if TYPE_CHECKING:
    from meshtune.validation.report import ValidationReport


def _render(report: ValidationReport) -> None:
    """Print the per-run table, the per-source figures and the group rank agreement."""
    from rich.table import Table

    from meshtune.errors import printable
    from meshtune.report.console import HEAD_RULE, make_console, shown
    from meshtune.validation.stats import GroupAgreement

    console = make_console()
    # One section per source, each run named without its source prefix, no chips column
    # (TP × PP × DP is the chip count) and no vertical rules: the table reads at 80 columns.
    runs = Table(
        title="Published runs, split pinned (s; error = predicted / published − 1)",
        box=HEAD_RULE,
        pad_edge=False,
    )
    names = [printable(p.run.id.removeprefix(f"{p.source}/")) for p in report.predictions]
    runs.add_column("source / run", overflow="fold", min_width=max(map(len, names), default=1))
    runs.add_column("TP × PP × DP", justify="right", max_width=12)
    for header in ("published", "predicted", "error"):
        runs.add_column(header, justify="right", no_wrap=True)
    for source in report.sources():
        runs.add_row(f"[bold]{shown(source)}[/bold]")
        for p, name in zip(report.predictions, names, strict=True):
            if p.source == source:
                runs.add_row(
                    shown(name),
                    p.run.split,
                    f"{p.published_s:.4g}",
                    "–" if p.predicted_s is None else f"{p.predicted_s:.4g}",
                    "–" if p.error is None else f"{100 * p.error:+.1f} %",
                )
        runs.add_section()
    console.print(runs)
    figures = Table(title="Error figures")
    for header in ("source", "runs", "MAPE", "median", "max", "bias"):
        figures.add_column(header, justify="left" if header == "source" else "right")
    for key in [*report.sources(), None]:
        s = report.summary(key)
        if s is not None:
            figures.add_row(
                shown(key) if key else "all",
                str(s.n),
                f"{s.mape_pct:.1f} %",
                f"{s.median_pct:.1f} %",
                f"{s.max_pct:.1f} %",
                f"{s.bias_pct:+.1f} %",
            )
    console.print(figures)
    groups = report.groups()
    if groups:
        ranks = Table(title="Rank agreement within groups of alternative splits")
        for header in ("group", "runs", "Spearman ρ", "pairs in order"):
            ranks.add_column(header, justify="left" if header == "group" else "right")
        for name, a in sorted(groups.items()):
            ranks.add_row(shown(name), str(a.runs), a.rho_text(), a.pairs_text())
        total = GroupAgreement.total(groups.values())
        ranks.add_row("all groups", str(total.runs), "–", f"{total.pairs_agreeing} / {total.pairs}")
        console.print(ranks)
    if report.errors():
        console.print(f"90 % of the predicted runs are within ±{100 * report.interval():.1f} %.")
    console.print(f"{len(report.not_expressible)} published runs are not expressible yet (--json).")


def _profile_overrides(values: list[str] | None) -> dict[str, str]:
    """``HW=NAME_OR_PATH`` pairs as a dict; one stderr line for anything else."""
    found: dict[str, str] = {}
    for value in values or []:
        key, sep, name = value.partition("=")
        if not sep or not key.strip() or not name.strip():
            raise fail(f"--profile '{value}': expected HARDWARE=PROFILE, e.g. a100-80gb=my.toml")
        found[key.strip()] = name.strip()
    return found


@app.command()
@handle_errors
def validate(
    source: list[str] | None = typer.Option(
        None, "--source", help="Only this source (a validation/*.toml stem); repeatable."
    ),
    profile: list[str] | None = typer.Option(
        None,
        "--profile",
        help="HARDWARE=PROFILE: predict that hardware's runs with another profile (catalog "
        "name or TOML path); repeatable.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the tables as Markdown."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Save predicted vs published as a PNG (needs the 'plot' extra)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --plot file."),
    check: bool = typer.Option(
        False,
        "--check",
        help=(
            "Exit 1 when MAPE, median or max is worse than validation/bounds.toml records, or "
            "its interval or run count is stale (the whole set, shipped profiles only)."
        ),
    ),
) -> None:
    """Predict every published run the planner can express, with its published split pinned;
    print each run's predicted and published step and the error figures.

    Exit 0, or 1 with --check when the errors regressed; 2 on bad input.
    """
    from meshtune.io import check_writable
    from meshtune.report.console import json_text
    from meshtune.validation.bounds import load_bounds
    from meshtune.validation.predict import load_profiles
    from meshtune.validation.report import markdown_table, regressions, write_plot
    from meshtune.validation.report import validate as run_validation

    if check and (source or profile):
        raise fail(
            "--check compares the whole validation set on the shipped profiles with "
            "validation/bounds.toml: drop --source and --profile"
        )
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise fail("--plot needs matplotlib: pip install 'meshtune[plot]'") from None
        check_writable(plot, force=force)
    report = run_validation(
        sources=source or None, profiles=load_profiles(_profile_overrides(profile))
    )
    if plot is not None:
        write_plot(report, plot, force=force)
    if as_json:
        typer.echo(json_text(report.to_json()), nl=False)
    elif markdown:
        typer.echo(markdown_table(report), nl=False)
    else:
        _render(report)
    if check:
        found = regressions(report, load_bounds())
        if found:
            sys.stderr.write(f"meshtune: validate regressed: {one_line('; '.join(found))}\n")
            raise typer.Exit(EXIT_REGRESSED)
