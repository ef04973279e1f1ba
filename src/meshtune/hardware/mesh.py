"""The one mesh type of the planner: P_r × P_c chips, optionally × a depth (MeshSlice §2.3.1).

Axis 0 is the ring of the P_r chips that share a mesh column (inter-row traffic, the paper's
AG_row / RdS_row); axis 1 is the ring of the P_c chips that share a mesh row (inter-column
traffic, AG_col / RdS_col). Axis 2, when ``depth > 1``, is the ring of the ``depth`` chips that
share a (row, column) position: the replicas of a 2.5D algorithm or a data-parallel depth.

A GeMM on the *transposed* mesh (a transposed Table 1 row, §3.2.1) sees the P_c × P_r mesh: its
logical row ring is physical axis 1 and its logical column ring physical axis 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from meshtune.errors import InfeasibleError

# A chip count above this is refused: it is far beyond any machine, and bounding it keeps
# factoring and every search instant (the largest TPU or GPU training jobs use ~10^5 chips).
MAX_CHIPS = 2**24


@dataclass(frozen=True, order=True)
class Mesh:
    """``rows`` = P_r (axis-0 ring), ``cols`` = P_c (axis-1 ring), ``depth`` (axis-2 ring)."""

    rows: int
    cols: int
    depth: int = 1

    def __post_init__(self) -> None:
        if min(self.rows, self.cols, self.depth) < 1:
            raise InfeasibleError(f"a mesh needs at least one chip per axis, got {self.label}")

    @property
    def chips(self) -> int:
        """P_r · P_c · depth."""
        return self.rows * self.cols * self.depth

    @property
    def label(self) -> str:
        """``32x8``, or ``16x16x4`` with a depth."""
        dims = (self.rows, self.cols) if self.depth == 1 else (self.rows, self.cols, self.depth)
        return "x".join(str(d) for d in dims)

    def ring(self, axis: int) -> int:
        """Chips on one ring of physical ``axis`` (0: P_r, 1: P_c, 2: depth)."""
        return (self.rows, self.cols, self.depth)[axis]

    def logical(self, transposed: bool) -> tuple[tuple[int, int], tuple[int, int]]:
        """((row ring size, its axis), (column ring size, its axis)) as a GeMM sees them."""
        if transposed:
            return (self.cols, 1), (self.rows, 0)
        return (self.rows, 0), (self.cols, 1)


def check_chips(chips: object) -> int:
    """``chips`` as an int in 1 … :data:`MAX_CHIPS`, or :class:`InfeasibleError`."""
    if isinstance(chips, bool) or not isinstance(chips, int):
        raise InfeasibleError(f"chips must be a whole number, got {chips!r}")
    if not 1 <= chips <= MAX_CHIPS:
        raise InfeasibleError(f"chips must be between 1 and {MAX_CHIPS:,}, got {chips:,}")
    return chips


def divisors(n: int) -> tuple[int, ...]:
    """Positive divisors of ``n`` in ascending order (from its prime factorization)."""
    if n < 1:
        raise ValueError(f"divisors of a non-positive number: {n}")
    found = [1]
    for prime, power in factorize(n).items():
        found = [d * prime**e for d in found for e in range(power + 1)]
    return tuple(sorted(found))


def factorize(n: int) -> dict[int, int]:
    """Prime factorization of ``n ≥ 1`` as {prime: exponent}.

    Trial division, so callers bound ``n`` first (chip counts by :data:`MAX_CHIPS`, which caps
    the loop at 4,096 steps).
    """
    factors: dict[int, int] = {}
    rest = n
    p = 2
    while p * p <= rest:
        while rest % p == 0:
            factors[p] = factors.get(p, 0) + 1
            rest //= p
        p += 1 if p == 2 else 2
    if rest > 1:
        factors[rest] = factors.get(rest, 0) + 1
    return factors


def mesh_shapes(chips: int) -> tuple[Mesh, ...]:
    """Every P_r × P_c = ``chips``, fewest rows first (1 × N and N × 1 included)."""
    check_chips(chips)
    return tuple(Mesh(r, chips // r) for r in divisors(chips))


def parse_mesh(text: str) -> Mesh:
    """Parse ``"32x8"`` (or ``"32×8"``, as reports print it) or ``"16x16x4"``."""
    number = r"\s*([0-9]{1,9})\s*"
    match = re.fullmatch(f"{number}[xX×]{number}(?:[xX×]{number})?", text)
    if match is None or any(g is not None and int(g) < 1 for g in match.groups()):
        raise InfeasibleError(
            f"mesh shape '{text}' is not of the form ROWSxCOLS or ROWSxCOLSxDEPTH, e.g. 32x8"
        )
    rows, cols, depth = match[1], match[2], match[3]
    return Mesh(int(rows), int(cols), int(depth) if depth is not None else 1)
