"""``meshtune compare``: every registered algorithm on one model over chip counts (§5)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from meshtune.algorithms.registry import DEFAULT_ALGORITHM, algorithm_names
from meshtune.cli._app import app, fail, handle_errors, wrote
from meshtune.hardware.mesh import MAX_CHIPS, Mesh, parse_mesh
from meshtune.plan import MAX_DIMENSION
from meshtune.planner.make import weak_scaling_batch


class ViewOption(str, Enum):
    """``--view`` choices: one view of :data:`meshtune.compare.records.VIEWS`, or all of them."""

    scaling = "scaling"
    breakdown = "breakdown"
    gemms = "gemms"
    shapes = "shapes"
    slices = "slices"
    dataflow = "dataflow"
    overlap = "overlap"
    cluster = "cluster"
    all = "all"


def split_names(text: str | None, flag: str) -> list[str] | None:
    """``a,b`` -> ``["a", "b"]`` (``None`` stays ``None``); an empty list is an error."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise fail(f"{flag} '{text}': give one or more names separated by commas")
    return names


def parse_chips(text: str) -> list[int]:
    """``16,32,64`` -> ``[16, 32, 64]``; one stderr line for anything else."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise fail(
            f"--chips '{text}': expected chip counts separated by commas, e.g. 16,64,256"
        ) from None
    if not values or any(not 1 <= v <= MAX_CHIPS for v in values):
        raise fail(f"--chips '{text}': each chip count must be between 1 and {MAX_CHIPS:,}")
    return values


def optional_mesh(text: str | None) -> Mesh | None:
    """``--mesh RxC`` parsed, or ``None``."""
    return None if text is None else parse_mesh(text)


def ascii_terminal() -> bool:
    """Whether the terminal cannot encode the bar-chart block characters."""
    from rich.console import Console

    return not Console().encoding.lower().startswith("utf")


_MODEL = typer.Argument(..., help="Model name from `meshtune models`, or a TOML path.")
_CHIPS = typer.Option(
    ..., "--chips", "-n", help="Chip counts, comma separated, e.g. 16,32,64,128,256."
)
_BATCH = typer.Option(
    None,
    "--batch",
    "-b",
    min=1,
    max=MAX_DIMENSION,
    help="Fix the batch at every chip count (strong scaling) (default: chips/2, weak scaling).",
)
_STRONG = typer.Option(
    False,
    "--strong",
    help="Strong scaling: fix the batch (at --batch, or at the weak-scaling batch of the "
    "middle chip count, e.g. 32 for 16..256 as in §5.1.3).",
)
_SEQ = typer.Option(
    None,
    "--seq",
    "-s",
    min=1,
    max=MAX_DIMENSION,
    help="Sequence length (default: the model's).",
)
_PROFILE = typer.Option("tpuv4", "--profile", "-p", help="Profile name or TOML path.")
_ALGORITHMS = typer.Option(
    None,
    "--algorithms",
    "-a",
    help=f"Comma-separated subset of: {', '.join(algorithm_names())} (default: all).",
)
_REFERENCE = typer.Option(
    DEFAULT_ALGORITHM, "--reference", help="Algorithm whose speedups over the others are shown."
)
_VIEW = typer.Option(
    ViewOption.scaling,
    "--view",
    help="scaling (Fig. 9/12), breakdown (Fig. 10), gemms (Fig. 11), shapes (Fig. 13), "
    "slices (Fig. 14), dataflow (Table 2), overlap (Table 3), cluster (each algorithm at "
    "its best DP x PP x mesh split), or all.",
)
_CLUSTER = typer.Option(
    False,
    "--cluster",
    help="Each algorithm at its best DP x PP x mesh split within memory, as `plan` "
    "searches it (the same as --view cluster).",
)
_AT = typer.Option(
    None,
    "--at",
    min=1,
    max=MAX_CHIPS,
    help="Chip count of the single-size views (default: the largest of --chips).",
)
_MESH = typer.Option(None, "--mesh", help="Search only this shape, e.g. 4x4.")
_JSON = typer.Option(False, "--json", help="Print every number as JSON on stdout.")
_PLOT = typer.Option(
    None, "--plot", help="Save the figures as a PNG here (needs the 'plot' extra)."
)
_FORCE = typer.Option(False, "--force", help="Overwrite an existing --plot file.")


@app.command()
@handle_errors
def compare(
    model: str = _MODEL,
    chips: str = _CHIPS,
    batch: int | None = _BATCH,
    strong: bool = _STRONG,
    seq: int | None = _SEQ,
    profile: str = _PROFILE,
    algorithms: str | None = _ALGORITHMS,
    reference: str = _REFERENCE,
    view: ViewOption = _VIEW,
    cluster: bool = _CLUSTER,
    at: int | None = _AT,
    mesh: str | None = _MESH,
    as_json: bool = _JSON,
    plot: Path | None = _PLOT,
    force: bool = _FORCE,
) -> None:
    """Compare every algorithm on MODEL over chip counts: utilization, breakdown, GeMMs, shapes,
    slice counts, dataflow optimization, overlap, and at the cluster level (--cluster)."""
    from meshtune.catalog import load_model, load_profile
    from meshtune.compare.model import compare_models
    from meshtune.compare.records import VIEWS
    from meshtune.io import check_writable
    from meshtune.report.compare import render_comparison
    from meshtune.report.console import json_text, make_console

    sizes = parse_chips(chips)
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise fail("--plot needs matplotlib: pip install 'meshtune[plot]'") from None
        check_writable(plot, force=force)
    if strong and batch is None:
        middle = sorted(set(sizes))
        batch = weak_scaling_batch(middle[(len(middle) - 1) // 2])
    if cluster and view not in (ViewOption.scaling, ViewOption.cluster):
        raise fail("--cluster is --view cluster; drop one of them")
    chosen = ViewOption.cluster if cluster else view
    views = [v for v in VIEWS if chosen.value in ("all", v)]
    result = compare_models(
        load_model(model),
        load_profile(profile),
        sizes,
        batch,
        split_names(algorithms, "--algorithms"),
        seq_len=seq,
        views=views,
        reference=reference,
        at_chips=at,
        mesh=optional_mesh(mesh),
    )
    problem = result.nothing_feasible()
    if problem is not None:
        raise fail(problem)
    if plot is not None:
        from meshtune.report.plots import write_comparison_plot

        write_comparison_plot(result, plot, force=force)
    if as_json:
        typer.echo(json_text(result.to_json()), nl=False)
        return
    console = make_console()
    console.print(render_comparison(result, ascii_only=ascii_terminal()))
    if plot is not None:
        wrote(plot)
