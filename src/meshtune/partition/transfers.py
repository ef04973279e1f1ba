"""Where processes sit on the ``P_r × P_c`` mesh, which links a transfer between two crosses,
and the groups of one-sided operations a process issues."""

from __future__ import annotations

from typing import Literal


def mesh_position(process: int, cols: int) -> tuple[int, int]:
    """Mesh (row, column) of ``process`` on a mesh with ``cols`` columns (row-major)."""
    return divmod(process, cols)


def transfer_axes(a: int, b: int, cols: int) -> tuple[int, ...]:
    """Physical axes a transfer between processes ``a`` and ``b`` crosses: (1,) within a mesh
    row, (0,) within a mesh column, (0, 1) otherwise (one link of each)."""
    (ra, ca), (rb, cb) = mesh_position(a, cols), mesh_position(b, cols)
    if ra == rb:
        return (1,)
    if ca == cb:
        return (0,)
    return (0, 1)


Phase = Literal["main", "reduce"]
TransferKind = Literal["get", "accumulate"]
GROUPS: tuple[tuple[Phase, TransferKind], ...] = (
    ("main", "get"),
    ("main", "accumulate"),
    ("reduce", "accumulate"),
)
"""The groups of one-sided operations a process issues: its gets and its accumulates during
the multiplies, then its replica-reduction accumulates."""


def busiest(moved: dict[int, int]) -> int | None:
    """The process moving the most elements (``process -> elements``); ties go to the lowest
    process; ``None`` when nothing moves."""
    if not moved or max(moved.values()) == 0:
        return None
    top = max(moved.values())
    return min(p for p, e in moved.items() if e == top)
