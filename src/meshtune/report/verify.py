"""Terminal rendering of a :class:`~meshtune.verify.run.VerifyReport`."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from meshtune.cost.schedule import AxisTraffic
from meshtune.errors import printable
from meshtune.report.console import HEAD_RULE, shown
from meshtune.verify.run import ATOL, RTOL, PassCheck, VerifyReport


def _bytes(check: PassCheck, axis: int) -> str:
    counted: AxisTraffic = check.counted[axis]
    predicted: AxisTraffic = check.predicted[axis]
    if counted == predicted:
        return f"{counted.bytes_per_link:,}"
    return f"{counted.bytes_per_link:,} ≠ {predicted.bytes_per_link:,}"


PASS_LABELS = {"forward": "fwd", "backward_data": "bwd-d", "backward_weight": "bwd-w"}
"""Short pass names, so that the table fits 80 columns."""


def verify_table(report: VerifyReport) -> Table:
    """One row per layer and pass (with its dataflow): reduced m×n×k, configuration, error,
    bytes per link per axis, verdict.

    Compact (no outer or inner column borders, short labels) so that it fits 80 columns; a cell
    too wide still folds onto a second line rather than being cut with "…".
    """
    table = Table(
        title="Virtual-mesh execution at reduced sizes  (bytes per link: counted, ≠ predicted)",
        box=HEAD_RULE,
        show_edge=False,
    )
    for header in ("layer", "pass", "m×n×k", "config", "max|err|", "axis 0", "axis 1", ""):
        left = header in ("layer", "pass", "")
        table.add_column(header, justify="left" if left else "right", overflow="fold")
    for c in report.checks:
        table.add_row(
            shown(c.layer),
            f"{PASS_LABELS.get(c.pass_, c.pass_)} {shown(c.dataflow)}",
            f"{c.m}×{c.n}×{c.k}",
            c.config,
            f"{c.max_abs_error:.1e}",
            _bytes(c, 0),
            _bytes(c, 1),
            Text("OK", style="green") if c.ok else Text("FAIL", style="bold red"),
        )
    return table


def render_verify(report: VerifyReport) -> RenderableType:
    """Heading, the table, the rule used, and every failure."""
    mesh = report.mesh
    style = {"passed": "bold green", "unverified": "bold yellow"}.get(report.verdict, "bold red")
    verdict = Text(report.verdict, style=style)
    heading = Text(f"verify on a {mesh.label} virtual mesh (seed {report.seed}): ")
    heading.append_text(verdict)
    rule = Text(
        f"each of tokens/in/out = u · min({report.factor}, full / u), u = lcm of the mesh axes it "
        f"is sharded over (and of B·lcm(P_r, P_c)·S if sliced); tolerance |err| ≤ {ATOL:g} + "
        f"{RTOL:g}·|dense|",
        style="dim",
    )
    parts: list[RenderableType] = [heading, verify_table(report), rule]
    if report.notes:
        parts.append(Text("\n".join(f"note: {printable(n)}" for n in report.notes), style="yellow"))
    if report.failures():
        parts.append(
            Text("\n".join(f"fail: {printable(f)}" for f in report.failures()), style="red")
        )
    return Group(*parts)
