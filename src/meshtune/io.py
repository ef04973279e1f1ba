"""Safe output: atomic writes that never silently overwrite."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from meshtune.errors import PlanFileError


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


def check_writable(path: Path, *, force: bool = False) -> Path:
    """Refuse an existing ``path`` (unless ``force``) or a missing folder; return the folder.

    Raises :class:`PlanFileError`. Commands call it before long work so that a refusal comes
    first; :func:`write_atomic` calls it again at write time.
    """
    if path.exists() and not force:
        raise PlanFileError(f"{path}: already exists; pass --force to overwrite")
    folder = path.parent if str(path.parent) else Path()
    if not folder.is_dir():
        raise PlanFileError(f"{path}: folder {folder} does not exist")
    return folder


def write_atomic(path: Path, data: str | bytes, *, force: bool = False) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically.

    The data goes to a temporary file in the same folder, is fsynced, then renamed over ``path``.

    Refuses an existing ``path`` unless ``force``; a crash mid-write leaves the old file (or
    nothing) in place, never a truncated one. Raises :class:`PlanFileError` on refusal or I/O
    failure.
    """
    folder = check_writable(path, force=force)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
        try:
            payload = data.encode("utf-8") if isinstance(data, str) else data
            os.fchmod(fd, _file_mode(path))
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            Path(tmp).replace(path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise PlanFileError(f"{path}: cannot write: {exc.strerror or exc}") from None


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path``; raises :class:`PlanFileError` naming the file and the reason."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PlanFileError(f"{path}: cannot read: {reason}") from None
