"""``meshtune gemm``: one GeMM, every registered algorithm at its best mesh (Figure 11's data)."""

from __future__ import annotations

import typer

from meshtune.algorithms.registry import DEFAULT_ALGORITHM, algorithm_names, layout_algorithm
from meshtune.cli._app import app, fail, handle_errors
from meshtune.cli.compare import ascii_terminal, optional_mesh, split_names
from meshtune.hardware.mesh import MAX_CHIPS
from meshtune.plan import MAX_DIMENSION


@app.command()
@handle_errors
def gemm(
    m: int = typer.Argument(..., min=1, max=MAX_DIMENSION, help="Rows of A and C."),
    n: int = typer.Argument(..., min=1, max=MAX_DIMENSION, help="Columns of B and C."),
    k: int = typer.Argument(..., min=1, max=MAX_DIMENSION, help="Columns of A, rows of B."),
    chips: int = typer.Option(..., "--chips", "-n", min=1, max=MAX_CHIPS, help="Chips."),
    algorithms: str | None = typer.Option(
        None,
        "--algorithms",
        "-a",
        help=f"Comma-separated subset of: {', '.join(algorithm_names())} (default: all).",
    ),
    profile: str = typer.Option("tpuv4", "--profile", "-p", help="Profile name or TOML path."),
    mesh: str | None = typer.Option(
        None, "--mesh", help="Only this mesh shape, e.g. 32x8 or 16x16x4 (per replica with --dp)."
    ),
    dp: int = typer.Option(
        1,
        "--dp",
        min=1,
        max=MAX_CHIPS,
        help=(
            "Data-parallel replicas: M is split over DP copies of a chips/DP mesh and the "
            "weight gradient is reduced across them (MeshSlice §7's MeshSlice + DP)."
        ),
    ),
    dataflows: str | None = typer.Option(
        None, "--dataflows", help="Comma-separated subset of OS, LS, RS (default: all)."
    ),
    reference: str = typer.Option(
        DEFAULT_ALGORITHM, "--reference", help="Algorithm whose speedups over the others are shown."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print every number as JSON on stdout."),
    partition: str | None = typer.Option(
        None,
        "--partition",
        help="One-sided GeMM: evaluate one layout, e.g. A=rows,B=cols,C=cols or a name "
        "(1d_tp_column, 1d_tp_row, megatron_column, megatron_row, sequence_parallel, fsdp, "
        "column_block, inner_product, outer_product, 2d_blocks, block_cyclic).",
    ),
    replicate: int = typer.Option(
        1, "--replicate", min=1, help="One-sided GeMM with --partition: replication factor c."
    ),
    stationary: str | None = typer.Option(
        None, "--stationary", help="One-sided GeMM with --partition: A, B or C (default: each)."
    ),
) -> None:
    """C(M×N) = A(M×K)·B(K×N) on P chips: every algorithm at its best mesh, dataflow and
    configuration, with the time breakdown and the traffic per chip. With one algorithm, every
    configuration is ranked (for onesided: every partitioning × replication factor × stationary
    matrix)."""
    from meshtune.catalog import load_profile
    from meshtune.compare.gemm import gemm_study
    from meshtune.dataflow import Dataflow
    from meshtune.report.console import json_text, make_console
    from meshtune.report.gemm import render_gemm

    flows = tuple(Dataflow)
    names = split_names(dataflows, "--dataflows")
    if names is not None:
        known = [d.value for d in Dataflow]
        bad = [d for d in names if d.upper() not in known]
        if bad:
            raise fail(f"--dataflows: unknown dataflow '{bad[0]}'; known: {', '.join(known)}")
        flows = tuple(Dataflow(d.upper()) for d in names)
    chosen = split_names(algorithms, "--algorithms")
    only = None
    if partition is None and (replicate != 1 or stationary is not None):
        raise fail("--replicate and --stationary need --partition")
    if partition is not None:
        name, layouts = layout_algorithm()
        if chosen is not None and chosen != [name]:
            raise fail(f"--partition lays out the {name} algorithm; use --algorithms {name}")
        chosen = [name]
        only = layouts(partition, replicate, stationary, chips)
    study = gemm_study(
        m,
        n,
        k,
        chips,
        load_profile(profile),
        chosen,
        optional_mesh(mesh),
        flows,
        reference=reference,
        dp=dp,
        rank=chosen is not None and len(set(chosen)) == 1,
        only=only,
    )
    problem = study.nothing_feasible()
    if problem is not None:
        raise fail(problem)
    if as_json:
        typer.echo(json_text(study.model_dump_json(indent=2)))
        return
    make_console().print(render_gemm(study, ascii_only=ascii_terminal()))
