"""Terminal rendering of :class:`~meshtune.compare.alternatives.Alternatives`: the advice line a
plan report starts with when another algorithm is faster, and the table it ends with."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from meshtune.compare.alternatives import Alternatives
from meshtune.report.console import shown
from meshtune.report.plan import fmt_time


def advice(found: Alternatives) -> Text | None:
    """``Faster: wang, …: rerun with -a wang`` when an algorithm an engine runs beats the plan."""
    better = found.faster()
    if better is None or better.time_s is None:
        return None
    saved = 1 - better.time_s / found.time_s
    text = Text()
    text.append(f"Faster: {better.algorithm}", style="bold yellow")
    text.append(
        f" at {better.split}, {fmt_time(better.time_s)} per {found.metric} against "
        f"{found.chosen}'s {fmt_time(found.time_s)} ({saved:.1%} less): rerun with "
        f"-a {better.algorithm}"
    )
    return text


def alternatives_table(found: Alternatives) -> Table:
    """Each family's best plan and how the chosen plan compares with it."""
    what = "step" if found.metric == "step" else "FC time / step"
    table = Table(
        title=f"Alternatives: each family at its own best split ({found.chosen} +% = how much "
        "faster the plan is)"
    )
    for header in (
        "family",
        "algorithm",
        "split",
        what,
        "MFU" if found.metric == "step" else "FC util",
        f"{found.chosen} +%",
    ):
        table.add_column(
            header,
            justify="left" if header in ("family", "algorithm", "split") else "right",
            overflow="fold",
        )
    rows = sorted(found.entries, key=lambda e: (e.time_s is None, e.time_s or 0.0))
    for entry in rows:
        if entry.time_s is None:
            table.add_row(shown(entry.family), "-", shown(entry.reason or ""), "-", "-", "-")
            continue
        name = (entry.algorithm or "") + ("" if entry.engine else " (no engine yet)")
        table.add_row(
            shown(entry.family),
            shown(name) + (" ←" if entry.algorithm == found.chosen else ""),
            shown(entry.split or ""),
            fmt_time(entry.time_s),
            f"{entry.utilization:.1%}" if entry.utilization is not None else "-",
            f"{entry.gain:+.1%}" if entry.gain is not None else "-",
        )
    return table
