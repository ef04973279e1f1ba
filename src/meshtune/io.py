"""Safe output: atomic writes that never silently overwrite, and never replace a non-file.

A destination is one of:

* ``-``: standard output;
* a new path, or an existing regular file: the data goes to a temporary file in the same folder,
  which is then renamed over the destination (atomic; an existing file needs ``force``);
* a character device (``/dev/null``) or a FIFO: written through, like a shell redirection (the
  device or pipe is never replaced, and needs no ``force``: nothing is overwritten);
* a symbolic link: resolved, and its target handled as above (the link itself stays).

Anything else (a folder, a block device, a socket) is refused.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from meshtune.errors import PlanFileError

STDOUT = "-"
"""The path that means standard output (``-o -``) or standard input (``verify -``)."""


def is_std_stream(path: Path | str) -> bool:
    """Whether ``path`` is ``-``, the conventional name of standard output / input."""
    return str(path) == STDOUT


@dataclass(frozen=True)
class _Destination:
    """Where ``write_atomic`` puts the bytes, once links are resolved."""

    path: Path
    stream: bool
    """Write through (character device, FIFO) instead of temporary file + rename."""


def _file_mode(path: Path) -> int:
    """The mode a plain ``open(path, "w")`` would give: the existing file's, else 0o666 & ~umask.

    ``tempfile.mkstemp`` creates files as 0o600, which would otherwise leak into the result.
    """
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _destination(path: Path, *, force: bool) -> _Destination:
    """Classify ``path`` (following symbolic links); raise :class:`PlanFileError` if refused."""
    try:
        target = path.resolve(strict=False) if path.is_symlink() else path
        mode: int | None = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except RuntimeError:  # Python < 3.13 reports a symbolic-link loop so
        raise PlanFileError(f"{path}: cannot write: symbolic link loop") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PlanFileError(f"{path}: cannot write: {reason}") from None
    if mode is not None:
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            return _Destination(target, stream=True)
        if stat.S_ISDIR(mode):
            raise PlanFileError(f"{path}: cannot write: it is a folder")
        if not stat.S_ISREG(mode):
            raise PlanFileError(
                f"{path}: cannot write: not a regular file, character device or FIFO"
            )
        if not force:
            raise PlanFileError(f"{path}: already exists; pass --force to overwrite")
    folder = target.parent if str(target.parent) else Path()
    if not folder.is_dir():
        raise PlanFileError(f"{path}: folder {folder} does not exist")
    return _Destination(target, stream=False)


def check_writable(path: Path, *, force: bool = False) -> None:
    """Refuse what :func:`write_atomic` would refuse, before any work is done.

    Raises :class:`PlanFileError`. Commands call it before long work so that a refusal comes
    first; :func:`write_atomic` checks again at write time.
    """
    if not is_std_stream(path):
        _destination(path, force=force)


def _write_stdout(payload: bytes) -> None:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        buffer.write(payload)
        buffer.flush()
    else:  # a text-only stream (some test runners): UTF-8 text is all we ever write there
        sys.stdout.write(payload.decode("utf-8", errors="replace"))
        sys.stdout.flush()


def _write_through(path: Path, payload: bytes) -> None:
    # No O_CREAT: if the device or FIFO vanished since it was classified, fail instead of
    # creating a regular file in its place.
    fd = os.open(path, os.O_WRONLY)
    with os.fdopen(fd, "wb") as handle:
        handle.write(payload)


def _write_replace(path: Path, payload: bytes) -> None:
    folder = path.parent if str(path.parent) else Path()
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: str | bytes, *, force: bool = False) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path``; see the module docstring.

    ``-`` is standard output. A regular file (or a new path) is replaced atomically: a crash
    mid-write leaves the old file (or nothing) in place, never a truncated one; an existing one is
    refused unless ``force``. A character device or FIFO is written through; a symbolic link is
    followed to its target. Raises :class:`PlanFileError` on refusal or I/O failure.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    dest = None if is_std_stream(path) else _destination(path, force=force)
    try:
        if dest is None:
            _write_stdout(payload)
        elif dest.stream:
            _write_through(dest.path, payload)
        else:
            _write_replace(dest.path, payload)
    except OSError as exc:
        raise PlanFileError(f"{path}: cannot write: {exc.strerror or exc}") from None


def read_text(path: Path) -> str:
    """The UTF-8 text of a plan file (``-``: standard input).

    Raises :class:`PlanFileError` naming the file (or ``<stdin>``) and the reason: missing,
    a folder, unreadable, or not UTF-8 text.
    """
    source = "<stdin>" if is_std_stream(path) else str(path)
    try:
        if is_std_stream(path):
            stdin = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
            raw = stdin.read() if stdin is not None else sys.stdin.read().encode("utf-8")
        elif path.is_dir():
            raise PlanFileError(f"{source}: is a folder; expected a plan JSON file")
        else:
            raw = path.read_bytes()
    except OSError as exc:
        raise PlanFileError(f"{source}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanFileError(
            f"{source}: not UTF-8 text (byte {exc.start}); expected a plan JSON file"
        ) from None
