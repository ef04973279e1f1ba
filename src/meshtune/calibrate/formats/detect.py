"""Which parser reads a file, and reading a set of files and folders: :func:`parse_logs`.

Every format is one entry of :data:`PARSERS` (format → how to recognise it, how to read it),
tried in order. Detection looks at the content, never only at the extension: a canonical CSV /
JSONL header (``op, ranks, bytes, seconds``); a nccl-tests column header or ``nThread ... nGpus``
line; an ``# OSU ...`` title or ``# Size ... Latency`` header; ``Allgather_x:`` sections or
``Size: ..., Time: ...`` rows of the MeshSlice artifact's benchmark; a table of GeMM sizes with a
time or TFLOP/s column; a table (CSV, Markdown, JSON) with a message-size and a time or
bandwidth column.

A file named on the command line must be readable, non-empty, recognised and parseable, or it
is an error. Files found inside a named folder (recursively, hidden ones skipped) that are
empty, unrecognised, of an unusable benchmark (broadcast, bandwidth) or that cannot be read (no
rank count, a NaN time, ...) are left out with the reason (``--strict``: an error).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from meshtune.calibrate.formats import artifact, canonical, gemm, nccl, osu, table
from meshtune.calibrate.formats.file_keys import WILDCARD, check_keys, file_value
from meshtune.calibrate.formats.records import (
    FileLog,
    GemmMeasurement,
    LineIssue,
    LogFormat,
    Measurement,
    ParseOptions,
    Parser,
    UnusableFileError,
)
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp
from meshtune.io import MAX_INPUT_BYTES, path_mode, read_bytes

PARSERS: dict[LogFormat, Parser] = {
    p.format: p
    for p in (
        canonical.PARSER,
        nccl.PARSER,
        osu.PARSER,
        artifact.PARSER,
        gemm.PARSER,
        table.PARSER,
    )
}
"""Every log format, in detection order."""


@dataclass(frozen=True)
class ParsedLogs:
    """Everything read from the logs: one :class:`FileLog` per file, and the files left out."""

    files: tuple[FileLog, ...]
    left_out: tuple[str, ...] = ()

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        """Collective timings of every file, in file order."""
        return tuple(m for f in self.files for m in f.measurements)

    @property
    def gemms(self) -> tuple[GemmMeasurement, ...]:
        """GeMM timings of every file, in file order."""
        return tuple(g for f in self.files for g in f.gemms)

    @property
    def skipped(self) -> tuple[LineIssue, ...]:
        """Unparseable lines that were skipped, in file order."""
        return tuple(s for f in self.files for s in f.skipped)


def detect_format(text: str) -> LogFormat | None:
    """The format of a log's ``text`` (see the module doc), or ``None`` if none fits (a format
    whose lines cannot be read, such as a CSV line the csv module refuses, does not fit)."""
    for fmt, parser in PARSERS.items():
        try:
            if parser.looks_like(text):
                return fmt
        except LogFormatError:
            continue
    return None


MAX_FOLDER_ENTRIES = 10_000
"""Entries (files and folders) a folder given to ``calibrate`` may hold, searched recursively:
far above any benchmark run's logs; a larger tree (``/``, a home folder) is refused at once."""


def _folder_entries(folder: Path) -> list[Path]:
    """Every file under ``folder`` but hidden ones and those in hidden folders, sorted (links to
    folders are not followed). An entry that cannot be examined (a broken link, no permission)
    is kept: reading it says why it is left out. A folder that cannot be read itself, or one
    over :data:`MAX_FOLDER_ENTRIES`, is one error."""
    unreadable: list[OSError] = []
    found: list[Path] = []
    seen = 0
    for top, folders, files in os.walk(folder, onerror=unreadable.append):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        found.extend(Path(top) / name for name in files if not name.startswith("."))
        seen += len(folders) + len(files)
        if seen > MAX_FOLDER_ENTRIES:
            raise LogFormatError(
                f"{folder}: more than {MAX_FOLDER_ENTRIES:,} files and folders under it, not a "
                "folder of benchmark logs; name the log files, or the folder that holds them"
            )
    top_error = next((e for e in unreadable if e.filename == os.fspath(folder)), None)
    if top_error is not None:
        raise LogFormatError(f"{folder}: cannot read the folder: {top_error.strerror}")
    return sorted(found)


def _collect(paths: Sequence[str | Path]) -> list[tuple[Path, str, bool]]:
    """``(path, display name, named explicitly)`` of every file to read, in a stable order."""
    found: list[tuple[Path, str, bool]] = []
    for given in paths:
        path = Path(given)
        mode = path_mode(path, LogFormatError)
        if mode is None:
            raise LogFormatError(f"{given}: no such file or folder")
        if stat.S_ISDIR(mode):
            inside = _folder_entries(path)
            if not inside:
                raise LogFormatError(f"{path}: folder has no files")
            found.extend((p, str(p), False) for p in inside)
        else:
            found.append((path, str(given), True))
    return found


def _read_text(path: Path, display: str, explicit: bool) -> str:
    """The log's text, read by :func:`meshtune.io.read_bytes` (size cap included). A file found
    in a folder must be a regular file (a FIFO there would block the whole run)."""
    if not explicit:
        mode = path_mode(path, UnusableFileError)
        if mode is None:
            raise UnusableFileError(f"{display}: a broken symbolic link")
        if not stat.S_ISREG(mode):
            raise UnusableFileError(f"{display}: not a regular file")
    return _decode(read_bytes(path, "a benchmark log", LogFormatError, name=display), display)


MAX_STREAMED_BYTES = 2**30
"""The largest log read as a stream (1 GiB: some ten million nccl-tests rows)."""

_PIECE_BYTES = 1 << 22
"""Bytes per piece of a streamed log (4 MiB)."""


def _streamed_size(path: Path) -> int | None:
    """The size of ``path`` when it is a regular file over the input limit (to be read as a
    stream), else ``None`` (read whole, as every smaller input is)."""
    try:
        info = path.stat()
    except (OSError, ValueError):
        return None  # reading it says why
    if stat.S_ISREG(info.st_mode) and info.st_size > MAX_INPUT_BYTES:
        return info.st_size
    return None


def _pieces(path: Path, display: str) -> Iterator[str]:
    """The text of ``path`` in pieces of about 4 MiB, each ending at a line end, decoded as
    UTF-8 (only one piece is held at a time)."""
    try:
        with path.open("rb") as handle:
            rest = b""
            while chunk := handle.read(_PIECE_BYTES):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                if not cut and len(data) > _PIECE_BYTES:
                    raise UnusableFileError(f"{display}: a line of over 4 MiB, not a log")
                rest = data[cut:] if cut else data
                if cut:
                    yield _decode(data[:cut], display)
            if rest:
                yield _decode(rest, display)
    except OSError as exc:
        raise LogFormatError(f"{display}: cannot read: {exc.strerror or exc}") from None


def _decode(data: bytes, display: str) -> str:
    """``data`` as UTF-8 text; bytes that are not are the file's error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnusableFileError(f"{display}: not UTF-8 text (a binary file?)") from None


def _parse_streamed(
    path: Path, display: str, size: int, forced: LogFormat | None, options: ParseOptions
) -> FileLog:
    """A log over the input limit: its format told from its first piece, read as a stream by
    a format that can (nccl-tests), else refused as too large."""
    if size > MAX_STREAMED_BYTES:
        raise LogFormatError(f"{display}: larger than the 1 GiB limit for a benchmark log")
    pieces = _pieces(path, display)
    try:
        head = next(pieces, "")
    except UnusableFileError:  # binary, or no line end: no format reads it
        head = ""
    detected = forced or detect_format(head)
    parser = PARSERS[detected] if detected is not None else None
    if parser is None or parser.parse_chunks is None:
        raise LogFormatError(
            f"{display}: larger than the {MAX_INPUT_BYTES // 2**20} MiB input limit; expected "
            "a benchmark log (a nccl-tests log is read as a stream, up to 1 GiB)"
        )
    return parser.parse_chunks(display, chain([head], pieces), options)


def _check_stated(log: FileLog, ranks: int | None, op: MeasuredOp | None) -> None:
    """A per-file ``--ranks`` / ``--op`` must agree with what the log itself states."""
    for m in log.measurements:
        if ranks is not None and m.ranks != ranks:
            raise LogFormatError(
                f"{m.source}:{m.line}: the log measured {m.ranks} ranks but --ranks says {ranks}"
            )
        if op is not None and m.op is not op:
            raise LogFormatError(
                f"{m.source}:{m.line}: the log measured {m.op.value} but --op says {op.value}"
            )


def _parse_text(
    text: str, display: str, forced: LogFormat | None, options: ParseOptions
) -> FileLog:
    """One log read whole: its format detected (unless ``forced``), then parsed."""
    if not text.strip():
        raise UnusableFileError(f"{display}: empty file")
    detected = forced or detect_format(text)
    if detected is None:
        raise UnusableFileError(
            f"{display}: unrecognised format (not "
            + ", ".join(p.label for p in PARSERS.values())
            + "); pass --format to force one"
        )
    return PARSERS[detected].parse(display, text, options)


def parse_logs(
    paths: Sequence[str | Path],
    fmt: LogFormat | str | None = None,
    *,
    strict: bool = False,
    ranks: Mapping[str, int] | None = None,
    ops: Mapping[str, MeasuredOp] | None = None,
) -> ParsedLogs:
    """Read benchmark logs (files, or folders searched recursively) into measurements.

    ``fmt`` forces one format for every file (else each file's is detected). ``ranks`` and
    ``ops`` map a file (its path or base name) or ``"*"`` to the ring size / collective for
    logs that do not state it; a per-file value the log contradicts is an error. ``strict``
    turns a skipped line into an error. Raises :class:`LogFormatError` naming the file (and
    line) for anything unreadable.
    """
    forced = LogFormat(fmt) if fmt is not None else None
    ranks = dict(ranks or {})
    ops = dict(ops or {})
    files = _collect(paths)
    displays = [display for _, display, _ in files]
    check_keys("--ranks", ranks, displays)
    check_keys("--op", ops, displays)
    logs: list[FileLog] = []
    left_out: list[str] = []
    for path, display, explicit in files:
        own_ranks, own_op = file_value(ranks, display), file_value(ops, display)
        options = ParseOptions(
            strict=strict,
            ranks=own_ranks if own_ranks is not None else ranks.get(WILDCARD),
            op=own_op if own_op is not None else ops.get(WILDCARD),
        )
        try:
            streamed = _streamed_size(path)
            if streamed is not None:
                log = _parse_streamed(path, display, streamed, forced, options)
            else:
                log = _parse_text(_read_text(path, display, explicit), display, forced, options)
        except LogFormatError as exc:  # UnusableFileError included
            if explicit or strict:
                raise
            left_out.append(f"left out {exc}")
            continue
        _check_stated(log, own_ranks, own_op)
        logs.append(log)
    if not logs:
        raise LogFormatError("no usable measurements in " + ", ".join(str(p) for p in paths))
    return ParsedLogs(files=tuple(logs), left_out=tuple(left_out))
