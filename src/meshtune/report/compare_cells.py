"""The cells, tables and bar charts the comparison reports are made of (``meshtune compare``,
``meshtune gemm``).

Every column folds long values instead of cutting them, so a narrow (80-column) pipe shows every
number in full. Bars are drawn with block characters, or with ``#`` and ``.`` when the terminal
cannot encode them (``ascii_only``).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from meshtune.algorithms.registry import REGISTRY
from meshtune.compare.breakdown import Breakdown
from meshtune.cost.config import Config
from meshtune.report.console import shown
from meshtune.report.plan import fmt_time

BAR_WIDTH = 30


def table(title: str, *headers: str, left: int = 1) -> Table:
    """A table whose first ``left`` columns are left-aligned and every column folds.

    No outer edge, and a column named ``algorithm`` keeps room for every registered name.
    """
    out = Table(title=shown(title), show_edge=False)
    widest = max(len(name) for name in REGISTRY)
    for i, header in enumerate(headers):
        out.add_column(
            header,
            justify="left" if i < left else "right",
            overflow="fold",
            min_width=widest if header == "algorithm" else None,
        )
    return out


def pct(value: float | None) -> str:
    """``60.2%``, or ``-`` when unknown."""
    return "-" if value is None else f"{value:.1%}"


def signed_pct(value: float | None) -> str:
    """``+13.8%``, or ``-`` when unknown."""
    return "-" if value is None else f"{value:+.1%}"


def ftime(seconds: float) -> str:
    """:func:`fmt_time`, with rounding noise below a picosecond shown as 0."""
    return fmt_time(seconds if abs(seconds) >= 1e-12 else 0.0)


def time_or_dash(seconds: float | None) -> str:
    """:func:`ftime`, or ``-`` when unknown."""
    return "-" if seconds is None else ftime(seconds)


def fmt_bytes(count: int) -> str:
    """Bytes with a decimal unit and 3 significant digits (``126 GB``)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count} B"


def config_label(config: dict[str, int] | None) -> str:
    """``S=4`` for ``{"slices": 4}``; ``per layer`` for ``None`` (each layer its own)."""
    return "per layer" if config is None else Config.of(**config).label


def configs_label(configs: dict[str, dict[str, int]] | None) -> str:
    """The configurations of a block's layers, in layer order."""
    if not configs:
        return "-"
    return " ".join(Config.of(**c).label for c in configs.values())


def flow_label(dataflow: str | None, transposed: bool | None, ascii_only: bool) -> str:
    """``OS``, ``OSᵀ`` for the transposed variant (``OS(T)`` on an ASCII terminal)."""
    if dataflow is None:
        return "-"
    return dataflow + (("(T)" if ascii_only else "ᵀ") if transposed else "")


def transposed_note(ascii_only: bool) -> str:
    """The footnote explaining :func:`flow_label`'s mark."""
    mark = "(T)" if ascii_only else "ᵀ"
    return f"{mark}: the transposed dataflow (the same computation on the transposed mesh)"


def bar_chart(
    title: str, rows: Sequence[tuple[str, float | None]], *, ascii_only: bool = False
) -> Text:
    """One horizontal bar per row, scaled to the largest value; values printed as percentages."""
    full, empty = ("#", ".") if ascii_only else ("█", "░")
    top = max((v for _, v in rows if v is not None), default=0.0) or 1.0
    width = max((len(label) for label, _ in rows), default=0)
    text = Text(title + "\n", style="bold")
    for label, value in rows:
        if value is None:
            text.append(f"{label:<{width}} (infeasible)\n")
            continue
        filled = round(BAR_WIDTH * value / top)
        text.append(f"{label:<{width}} ")
        text.append(full * filled, style="green")
        text.append(empty * (BAR_WIDTH - filled), style="dim")
        text.append(f" {value:.1%}\n")
    return text


def breakdown_tables(rows: Sequence[tuple[str, str, Breakdown]], title: str) -> list[Table]:
    """Figure 10's split (communication relative to compute) and the schedule and traffic."""
    comm = table(
        f"{title}: communication (overlapped or not) relative to compute (Figure 10)",
        "algorithm",
        "mesh",
        "compute",
        "launch",
        "sync",
        "transfer",
        "comm/compute",
        left=2,
    )
    schedule = table(
        f"{title}: schedule and traffic (bytes per link: axis 0 / axis 1 / axis 2 if any; "
        "= their sum, the traffic per chip)",
        "algorithm",
        "prologue",
        "steady",
        "epilogue",
        "exposed",
        "hidden",
        "bytes/link",
    )
    for name, mesh, b in rows:
        ratio = b.comm_s / b.compute_s if b.compute_s else 0.0
        comm.add_row(
            name,
            mesh,
            ftime(b.compute_s),
            ftime(b.launch_s),
            ftime(b.sync_s),
            ftime(b.transfer_s),
            f"{ratio:.2f}",
        )
        moved = [fmt_bytes(x) for x in b.link_bytes[:2]]
        moved += [fmt_bytes(x) for x in b.link_bytes[2:] if x]
        schedule.add_row(
            name,
            ftime(b.prologue_s),
            ftime(b.steady_s),
            ftime(b.epilogue_s),
            ftime(b.exposed_s),
            ftime(b.hidden_s),
            " / ".join(moved) + f" = {fmt_bytes(sum(b.link_bytes))}",
        )
    return [comm, schedule]


def notes(reasons: Sequence[tuple[str, str]]) -> list[RenderableType]:
    """One yellow ``note:`` line per infeasible ``(who, why)``; nothing when there is none."""
    if not reasons:
        return []
    lines = [f"note: {shown(who)} infeasible: {shown(why)}" for who, why in reasons]
    return [Text("\n".join(lines), style="yellow")]
