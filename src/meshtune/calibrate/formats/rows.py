"""Table rows as NumPy columns: the fast read of plain result rows, and repeated rows merged.

A results table of a large log is mostly *plain rows*: lines of ASCII digits, lower-case words
(``float``, ``sum``), signs, dots and blanks, one cell per column, nothing else. Such a run of
lines is read in one :func:`numpy.loadtxt` call (C, no Python per row) by :func:`read_block`,
which refuses the whole run (``None``) as soon as one line is not plain or has another number
of cells than the header; the caller then reads that run line by line, so every quirk a parser
handles (chatter, prefixes, cut rows, short rows, NaN, ...) is handled by its line parser.

Repeated rows: a log may time the same size on the same ring many times (a sweep run in a
loop). :class:`RowColumns` keeps every row as columns (table key, size, time, line) and
:meth:`RowColumns.merged` gives one point per (table key, size): the mean time of its rows,
weighted in the fit by their count (:attr:`Measurement.repeats`), at the line of the first.
A log in which no size repeats gives exactly its rows, in file order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

_PLAIN = "0123456789abcdefghijklmnopqrstuvwxyz \t\n.+-/_E"
"""The characters of a plain row (and of the line ends between rows)."""

_PLAIN_BYTES = _PLAIN.encode("ascii")
_PLAIN_ROW = re.compile(r"[ \t]*\d[0-9a-z \t.+\-/_E]*")


def plain_text(text: str) -> bool:
    """Whether ``text`` holds nothing but the characters of plain rows (C speed: one
    ``bytes.translate``)."""
    return text.isascii() and not text.encode("ascii").translate(None, _PLAIN_BYTES)


def plain_row(line: str) -> bool:
    """Whether one raw line is a plain row: plain characters, starting with a digit."""
    return _PLAIN_ROW.fullmatch(line) is not None


@dataclass(frozen=True)
class Block:
    """Columns of a run of plain rows: the ``int`` and ``float`` cells asked for, by column."""

    ints: dict[int, NDArray[np.int64]]
    floats: dict[int, NDArray[np.float64]]


def read_block(
    lines: Sequence[str], columns: int, ints: Sequence[int], floats: Sequence[int]
) -> Block | None:
    """Cells of ``lines`` (each one row of ``columns`` cells), the ``ints`` columns as
    integers and the ``floats`` columns as numbers; ``None`` when any line has another number
    of cells or a cell that does not convert (the caller then reads them one by one)."""
    if not lines or len(lines[0].split()) != columns:
        return None
    kinds = {i: "i8" for i in ints} | {i: "f8" for i in floats}
    dtype = np.dtype([(f"c{i}", kinds.get(i, "U1")) for i in range(columns)])
    try:
        table = np.loadtxt(lines, dtype=dtype, comments=None, ndmin=1)
    except (ValueError, OverflowError):
        return None
    if len(table) != len(lines):  # a blank line was passed over: line numbers would shift
        return None
    return Block(
        ints={i: np.asarray(table[f"c{i}"], dtype=np.int64) for i in ints},
        floats={i: np.asarray(table[f"c{i}"], dtype=np.float64) for i in floats},
    )


def feed_plain_runs(
    text: str,
    first: int,
    run: Callable[[int, list[str]], None],
    other: Callable[[int, str], None],
) -> int:
    """Hand the raw lines of ``text`` (numbered from ``first``) over in order: each maximal
    run of plain rows to ``run(first line number, lines)``, every other line to
    ``other(number, line)``; returns the number of lines. A text of nothing but plain
    characters is one run (split at line feeds, the only line end it can hold)."""
    if plain_text(text):
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        if lines:
            run(first, lines)
        return len(lines)
    lines = text.splitlines()
    start, pending = first, list[str]()
    for offset, line in enumerate(lines):
        if plain_row(line):
            if not pending:
                start = first + offset
            pending.append(line)
            continue
        if pending:
            run(start, pending)
            pending = []
        other(first + offset, line)
    if pending:
        run(start, pending)
    return len(lines)


@dataclass(frozen=True)
class _Points:
    """Rows reduced to one entry per (key, size): sum of seconds, row count, first line."""

    keys: NDArray[np.int64]
    sizes: NDArray[np.float64]
    sums: NDArray[np.float64]
    counts: NDArray[np.int64]
    firsts: NDArray[np.int64]


def _reduce(
    keys: NDArray[np.int64],
    sizes: NDArray[np.float64],
    sums: NDArray[np.float64],
    counts: NDArray[np.int64],
    firsts: NDArray[np.int64],
) -> _Points:
    """One entry per distinct (key, size) of the given entries: sums and counts added, the
    smallest first line kept."""
    order = np.lexsort((sizes, keys))
    keys, sizes = keys[order], sizes[order]
    new = np.ones(len(keys), dtype=bool)
    new[1:] = (keys[1:] != keys[:-1]) | (sizes[1:] != sizes[:-1])
    starts = np.flatnonzero(new)
    return _Points(
        keys=keys[starts],
        sizes=sizes[starts],
        sums=np.add.reduceat(sums[order], starts),
        counts=np.add.reduceat(counts[order], starts),
        firsts=np.minimum.reduceat(firsts[order], starts),
    )


@dataclass
class RowColumns:
    """Rows kept as columns, reduced as they come to one entry per (table key, size)
    (module doc): a million rows of a few sizes hold a few entries."""

    rows: int = 0
    _parts: list[_Points] = field(default_factory=list)
    _single: list[tuple[int, float, float, int]] = field(default_factory=list)

    def add(self, key: int, size: float, seconds: float, line: int) -> None:
        """One row of the table numbered ``key`` (rows of one size under one key merge)."""
        self._single.append((key, size, seconds, line))
        self.rows += 1

    def extend(
        self,
        key: int,
        sizes: NDArray[np.float64],
        seconds: NDArray[np.float64],
        lines: NDArray[np.int64],
    ) -> None:
        """Rows of the table numbered ``key`` as arrays."""
        if not len(sizes):
            return
        keys = np.full(len(sizes), key, dtype=np.int64)
        ones = np.ones(len(sizes), dtype=np.int64)
        self._parts.append(_reduce(keys, sizes, seconds, ones, lines))
        self.rows += len(sizes)

    def merged(self) -> list[tuple[int, float, float, int, int]]:
        """``(key, size, mean seconds, count, first line)`` per (key, size), in the order of
        their first lines (module doc)."""
        parts = list(self._parts)
        if self._single:
            single = np.array(self._single, dtype=np.float64)
            keys, lines = single[:, 0].astype(np.int64), single[:, 3].astype(np.int64)
            ones = np.ones(len(single), dtype=np.int64)
            parts.append(_reduce(keys, single[:, 1], single[:, 2], ones, lines))
        if not parts:
            return []
        points = _reduce(
            np.concatenate([p.keys for p in parts]),
            np.concatenate([p.sizes for p in parts]),
            np.concatenate([p.sums for p in parts]),
            np.concatenate([p.counts for p in parts]),
            np.concatenate([p.firsts for p in parts]),
        )
        order = np.argsort(points.firsts, kind="stable")
        return [
            (
                int(points.keys[i]),
                float(points.sizes[i]),
                float(points.sums[i] / points.counts[i]),
                int(points.counts[i]),
                int(points.firsts[i]),
            )
            for i in order
        ]


_PIECE = 1 << 22
"""Characters per piece of a log read as a whole (4 Mi): the columns of one piece are built
at a time."""


def text_pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of about :data:`_PIECE` characters, each ending at a line end."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + _PIECE)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end
