"""The partitioning of ``C = A·B``: the tile-grid kind of each matrix, the names users know them
by, the set the search ranks, and what makes a choice unable to run."""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.errors import InfeasibleError
from meshtune.partition.layout import KINDS, MATRICES, Kind, Matrix

MAX_REPLICAS = 4
"""The largest replication factor c the one-sided GeMM is ranked and run with."""


@dataclass(frozen=True)
class Partitioning:
    """The tile-grid kind of A, B and C."""

    a: Kind
    b: Kind
    c: Kind

    def kind(self, matrix: Matrix) -> Kind:
        """The kind of ``matrix``."""
        return {"A": self.a, "B": self.b, "C": self.c}[matrix]

    @property
    def spec(self) -> str:
        """``A=rows,B=cols,C=cols``."""
        return f"A={self.a},B={self.b},C={self.c}"

    @property
    def name(self) -> str:
        """The name users know it by (:data:`NAMED`), else its :attr:`spec`."""
        for name, known in NAMED.items():
            if known == self:
                return name
        return self.spec


NAMED: dict[str, Partitioning] = {
    # Megatron column-parallel linear with sequence parallelism (MeshSlice §4.3): the
    # token-sharded input is gathered, the weight and output are split over columns.
    "1d_tp_column": Partitioning("rows", "cols", "cols"),
    # Megatron row-parallel linear with sequence parallelism: partial outputs reduce-scattered
    # over tokens.
    "1d_tp_row": Partitioning("cols", "rows", "rows"),
    # Megatron without sequence parallelism: replicated input / replicated (all-reduced) output.
    "megatron_column": Partitioning("full", "cols", "cols"),
    "megatron_row": Partitioning("cols", "rows", "full"),
    # Sequence parallelism: tokens split, the weight replicated.
    "sequence_parallel": Partitioning("rows", "full", "rows"),
    # FSDP (MeshSlice §4.3): tokens split, the weight sharded over its input dimension and
    # gathered before use.
    "fsdp": Partitioning("rows", "rows", "rows"),
    # The paper's Figure 2–3 families.
    "column_block": Partitioning("cols", "cols", "cols"),
    "inner_product": Partitioning("rows", "cols", "blocks"),
    "outer_product": Partitioning("cols", "rows", "blocks"),
    "2d_blocks": Partitioning("blocks", "blocks", "blocks"),
    "block_cyclic": Partitioning("cyclic", "cyclic", "cyclic"),
}
"""Layouts by the names users know (the paper's "row block" family is FSDP's layout)."""


def explored_partitionings() -> tuple[Partitioning, ...]:
    """What the search ranks: every mix of row, column and 2D blocks for A, B and C (the
    paper's exhaustive set, §5.2), then block-cyclic; stable order. Layouts that replicate a
    whole operand on every process (``full``: Megatron without sequence parallelism, sequence
    parallelism) are evaluated when named, not searched: the paper leaves out partitionings
    that eliminate communication, and they hold a whole operand per process."""
    blocks: tuple[Kind, ...] = ("rows", "cols", "blocks")
    found = [Partitioning(a, b, c) for a in blocks for b in blocks for c in blocks]
    return (*found, NAMED["block_cyclic"])


def parse_partition(text: str) -> Partitioning:
    """A named layout (``fsdp``) or ``A=rows,B=cols,C=cols``; :class:`InfeasibleError` otherwise."""
    text = text.strip()
    if text in NAMED:
        return NAMED[text]
    kinds: dict[str, Kind] = {}
    for part in text.split(","):
        matrix, _, kind = part.partition("=")
        matrix, kind = matrix.strip().upper(), kind.strip().lower()
        if matrix not in MATRICES or matrix in kinds:
            raise InfeasibleError(
                f"partition '{text}': expected A=KIND,B=KIND,C=KIND or one of {', '.join(NAMED)}"
            )
        if kind not in KINDS:
            raise InfeasibleError(
                f"partition '{text}': unknown kind '{kind}' for {matrix}; known: {', '.join(KINDS)}"
            )
        kinds[matrix] = kind
    if set(kinds) != set(MATRICES):
        missing = ", ".join(m for m in MATRICES if m not in kinds)
        raise InfeasibleError(f"partition '{text}': no kind for {missing}")
    return Partitioning(kinds["A"], kinds["B"], kinds["C"])


def partition_problem(
    part: Partitioning, stationary: Matrix, replicas: int, procs: int
) -> str | None:
    """Why this choice cannot run on ``procs`` processes, or ``None``."""
    if replicas < 1 or procs % replicas:
        return f"replication factor {replicas} does not divide {procs} processes"
    if part.kind(stationary) == "full":
        return (
            f"stationary {stationary} is replicated on every process (kind 'full'); every "
            "process would repeat the whole multiply"
        )
    return None
