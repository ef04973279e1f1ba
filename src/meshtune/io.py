"""Safe input and output: every file meshtune reads or writes goes through this module.

Reading (:func:`read_bytes`, :func:`read_text`): ``-`` is standard input; a regular file or a
FIFO (links followed) is read in chunks and refused past :data:`MAX_INPUT_BYTES` (a never-ending
FIFO stops there). Anything else (a device such as ``/dev/zero`` or ``/dev/kmsg``, a socket, a
folder) is refused before it is opened, and a kernel file that would make the read wait
(``/proc/kmsg``) is refused at once. A FIFO is read as ``cat`` reads it: the command waits for
its writer, at most :data:`FIFO_WAIT_ENV` seconds of silence. Every failure is one
:class:`~meshtune.errors.MeshtuneError` naming the file.

Writing (:func:`check_writable`, :func:`write_atomic`). A destination is one of:

* ``-``, ``/dev/stdout``, ``/dev/fd/1``: standard output (:func:`writes_stdout`);
* a new path, or an existing regular file: the data goes to a temporary file in the same folder,
  which is then renamed over the destination (atomic). Without ``force`` the destination must not
  exist, and the temporary file is hard-linked to it (``link`` fails if the name exists), so of
  two writers racing for a new name exactly one succeeds and the other is refused;
* a character device (``/dev/null``) or a FIFO: written through, like a shell redirection (the
  device or pipe is never replaced, and needs no ``force``: nothing is overwritten); a FIFO that
  no process reads is refused at once (``ENXIO``) instead of blocking forever;
* a symbolic link: followed, and its target handled as above (the link itself stays).

Anything else (a folder, a block device, a socket) is refused.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import select
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from meshtune.errors import MeshtuneError, PlanFileError

MAX_INPUT_BYTES = 64 * 2**20
"""The largest input meshtune reads (plans, models, profiles, logs): far above any real one."""

FIFO_WAIT_ENV = "MESHTUNE_FIFO_WAIT_S"
"""Environment variable: seconds an input FIFO may stay silent before it is refused."""
FIFO_WAIT_S = 60.0
"""Default of :data:`FIFO_WAIT_ENV`: a FIFO with no writer is refused after this long (one
line naming it) instead of blocking forever, as ``open()`` of a FIFO does."""


def _fifo_wait_s() -> float:
    """:data:`FIFO_WAIT_ENV` when it is a number of seconds ≥ 0, else :data:`FIFO_WAIT_S`."""
    try:
        value = float(os.environ.get(FIFO_WAIT_ENV, FIFO_WAIT_S))
    except ValueError:
        return FIFO_WAIT_S
    return value if 0 <= value < float("inf") else FIFO_WAIT_S


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (for a refusal)."""
    kinds = (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    )
    return next((words for test, words in kinds if test(mode)), "a special file")


def _refuse_special(mode: int, source: str, what: str, error: type[MeshtuneError]) -> None:
    """Raise ``error`` unless ``mode`` is a regular file or a FIFO, the only inputs read."""
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder", source)
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        raise error(f"{source}: {_kind(mode)}, not a regular file or FIFO; expected {what}")


def _open_input(path: Path, source: str, what: str, error: type[MeshtuneError]) -> int:
    """A non-blocking descriptor of ``path``, which must be a regular file or a FIFO (links
    followed): anything else is refused before it is opened (opening a device may block or act).
    """
    _refuse_special(path.stat().st_mode, source, what, error)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _refuse_special(os.fstat(fd).st_mode, source, what, error)  # replaced meanwhile
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_fd(fd: int, source: str, what: str, error: type[MeshtuneError], limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the non-blocking descriptor ``fd`` (one more says "too
    large"). A FIFO may stay silent :func:`_fifo_wait_s` seconds before each read (``cat``
    waits for its writer; meshtune refuses one that never writes or stalls); a file that has
    no data without waiting (a kernel file such as ``/proc/kmsg``) is refused at once."""
    fifo = stat.S_ISFIFO(os.fstat(fd).st_mode)
    waiting = select.poll()
    waiting.register(fd, select.POLLIN | select.POLLHUP | select.POLLPRI)
    wait_s = _fifo_wait_s()
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        if fifo and not waiting.poll(int(wait_s * 1000)):
            said = "nothing wrote to in" if size == 0 else "whose writer went silent for"
            raise error(
                f"{source}: a FIFO {said} {wait_s:g} s (start its writer first, or set "
                f"{FIFO_WAIT_ENV}); expected {what}"
            )
        try:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        except BlockingIOError:
            if fifo:
                continue  # woken by a writer that has not written yet
            raise error(
                f"{source}: has nothing to read without waiting (a kernel file?); expected {what}"
            ) from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


_CHUNK = 2**20

STDOUT = "-"
"""The path that means standard output (``-o -``) or standard input (``verify -``)."""

# Other names of this process's standard output.
_STDOUT_NAMES = re.compile(r"/dev/stdout|/dev/fd/1|/proc/self/fd/1")


def is_std_stream(path: Path | str) -> bool:
    """Whether ``path`` is ``-``, the conventional name of standard output / input."""
    return str(path) == STDOUT


def writes_stdout(path: Path | str) -> bool:
    """Whether writing ``path`` writes standard output (``-``, ``/dev/stdout``, ``/dev/fd/1``).

    A command that writes its data there prints no report or status line on stdout.
    """
    return is_std_stream(path) or _STDOUT_NAMES.fullmatch(str(path)) is not None


# --------------------------------------------------------------------------- reading


def _size_words(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"


def _read_capped(handle: BinaryIO, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``handle``, read in chunks (one more says "too large")."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = handle.read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read_stdin(limit: int) -> bytes:
    if sys.stdin is None:  # started with standard input closed (<&-)
        raise OSError(errno.EBADF, "standard input is closed")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stream (some test runners)
        return sys.stdin.read(limit + 1).encode("utf-8")
    return _read_capped(buffer, limit)


def read_bytes(
    path: Path,
    what: str,
    error: type[MeshtuneError] = PlanFileError,
    *,
    limit: int = MAX_INPUT_BYTES,
    name: str | None = None,
) -> bytes:
    """The bytes of ``path`` (``-``: standard input), ``what`` it should be (``a TOML file``).

    A regular file or FIFO is read in chunks of 1 MiB; more than ``limit`` bytes is refused.
    Raises ``error`` naming the file (``name``, else the path, else ``<stdin>``) and the reason:
    unreadable, a folder, a device or socket, a file that would block, a silent FIFO, or over
    the limit.
    """
    source = name or ("<stdin>" if is_std_stream(path) else str(path))
    try:
        if is_std_stream(path):
            data = _read_stdin(limit)
        else:
            fd = _open_input(path, source, what, error)
            try:
                data = _read_fd(fd, source, what, error, limit)
            finally:
                os.close(fd)
    except IsADirectoryError:
        raise error(f"{source}: is a folder; expected {what}") from None
    except OSError as exc:
        raise error(f"{source}: cannot read: {exc.strerror or exc}") from None
    except ValueError:  # a NUL character in the name
        raise error(f"{source}: cannot read: the name holds a NUL character") from None
    if len(data) > limit:
        raise error(f"{source}: larger than the {_size_words(limit)} input limit; expected {what}")
    return data


def read_text(
    path: Path, what: str = "a plan JSON file", error: type[MeshtuneError] = PlanFileError
) -> str:
    """The UTF-8 text of ``path`` (``-``: standard input), read by :func:`read_bytes`.

    Raises ``error`` naming the file (or ``<stdin>``) and the reason: missing, a folder,
    unreadable, too large, or not UTF-8 text.
    """
    raw = read_bytes(path, what, error)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        source = "<stdin>" if is_std_stream(path) else str(path)
        raise error(f"{source}: not UTF-8 text (byte {exc.start}); expected {what}") from None


def path_mode(path: Path, error: type[MeshtuneError], doing: str = "read") -> int | None:
    """The mode of ``path`` (links followed), or ``None`` when nothing is there.

    Unlike :meth:`Path.is_dir` it never raises an ``OSError``: a name too long, a link loop or a
    folder that cannot be searched is ``error`` naming the path (``cannot <doing>: ...``).
    """
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise error(f"{path}: cannot {doing}: {exc.strerror or exc}") from None
    except ValueError:
        raise error(f"{path}: cannot {doing}: the name holds a NUL character") from None


def is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder (links followed); ``False`` when it cannot be examined."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------- writing


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
    mode = path_mode(path, PlanFileError, "write")
    if mode is not None:
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            # Opened by the name given: /dev/stderr or /dev/fd/N reach the process's own pipe.
            return _Destination(path, stream=True)
        if stat.S_ISDIR(mode):
            raise PlanFileError(f"{path}: cannot write: it is a folder")
        if not stat.S_ISREG(mode):
            raise PlanFileError(
                f"{path}: cannot write: not a regular file, character device or FIFO"
            )
        if not force:
            raise PlanFileError(f"{path}: already exists; pass --force to overwrite")
    target = Path(os.path.realpath(path))  # a link's target: the file created or replaced
    folder = path_mode(target.parent, PlanFileError, "write")
    if folder is None or not stat.S_ISDIR(folder):
        raise PlanFileError(f"{path}: folder {path.parent} does not exist")
    return _Destination(target, stream=False)


def writes_through(path: Path) -> bool:
    """Whether :func:`write_atomic` writes ``path`` through instead of creating or replacing a
    file: standard output, a character device or a FIFO (links followed; classified as
    :func:`write_atomic` classifies it). A file meant to lie beside such a destination has no
    place to go. Raises :class:`PlanFileError` for a destination :func:`check_writable`
    refuses whatever ``--force`` says (a folder, a socket, a missing folder)."""
    return writes_stdout(path) or _destination(path, force=True).stream


def check_writable(path: Path, *, force: bool = False) -> None:
    """Refuse what :func:`write_atomic` would refuse, before any work is done.

    Raises :class:`PlanFileError`. Commands call it before long work so that a refusal comes
    first; :func:`write_atomic` checks again at write time. (Whether a FIFO has a reader, or a
    device has room, shows only when writing: opening a FIFO to probe it would end its reader.)
    """
    if not writes_stdout(path):
        _destination(path, force=force)


def _write_stdout(payload: bytes) -> None:
    """Write to standard output; a closed pipe raises :class:`BrokenPipeError` for the CLI."""
    stream = sys.stdout
    try:
        if stream is None:  # started with standard output closed (>&-)
            raise OSError(errno.EBADF, "standard output is closed")
        stream.flush()
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(payload)
            buffer.flush()
        else:  # a text-only stream (some test runners): UTF-8 text is all we ever write there
            stream.write(payload.decode("utf-8", errors="replace"))
            stream.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise PlanFileError(f"{STDOUT}: cannot write: {exc.strerror or exc}") from None


def _write_through(path: Path, payload: bytes) -> None:
    # No O_CREAT: if the device or FIFO vanished since it was classified, fail instead of
    # creating a regular file in its place. O_NONBLOCK: a FIFO nobody reads fails (ENXIO)
    # instead of blocking in open() forever; the write itself then blocks as usual.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise PlanFileError(
                f"{path}: cannot write: no process is reading it (start the FIFO's reader first)"
            ) from None
        raise
    os.set_blocking(fd, True)
    with os.fdopen(fd, "wb") as handle:
        handle.write(payload)


def _link_new(tmp: str, path: Path, shown: Path) -> None:
    """Give the finished temporary file the name ``path``, which must not exist yet.

    ``link`` fails if the name exists, so two writers racing for it cannot both succeed. On a
    file system without hard links the name is claimed with ``O_EXCL``, then replaced.
    """
    exists = PlanFileError(f"{shown}: already exists; pass --force to overwrite")
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        raise exists from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        raise exists from None
    Path(tmp).replace(path)


def _write_replace(path: Path, shown: Path, payload: bytes, *, force: bool) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if force:
            Path(tmp).replace(path)
        else:
            _link_new(tmp, path, shown)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_atomic(path: Path, data: str | bytes, *, force: bool = False) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path``; see the module docstring.

    Standard output (:func:`writes_stdout`) is written directly. A regular file (or a new path)
    is replaced atomically: a crash mid-write leaves the old file (or nothing) in place, never a
    truncated one; an existing one is refused unless ``force``, also when another writer creates
    it meanwhile. A character device or FIFO is written through; a symbolic link is followed to
    its target. Raises :class:`PlanFileError` on refusal or I/O failure, and
    :class:`BrokenPipeError` when standard output's reader has gone (the CLI ends quietly).
    """
    payload = data.encode("utf-8", errors="backslashreplace") if isinstance(data, str) else data
    if writes_stdout(path):
        _write_stdout(payload)
        return
    dest = _destination(path, force=force)
    try:
        if dest.stream:
            _write_through(dest.path, payload)
        else:
            _write_replace(dest.path, path, payload, force=force)
    except OSError as exc:
        raise PlanFileError(f"{path}: cannot write: {exc.strerror or exc}") from None


MAX_JSON_DEPTH = 64
"""The deepest nesting of JSON arrays and objects meshtune parses: far beyond any of its
files, far below the recursion a few thousand brackets exhaust in :func:`json.loads`."""
_JSON_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` nests arrays and objects deeper than ``limit`` (brackets
    inside strings do not count); checked before :func:`json.loads`, in linear time."""
    depth = 0
    for token in _JSON_NESTING.finditer(text):
        bracket = token[0]
        if bracket in "[{":
            depth += 1
            if depth > limit:
                return True
        elif bracket in "]}":
            depth -= 1
    return False


class StrictJsonError(ValueError):
    """JSON that meshtune refuses although Python's parser would read it."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise StrictJsonError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise StrictJsonError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJsonError(f"the number {text[:40]} is out of range")
    return value


def strict_json(text: str) -> Any:
    """The JSON document ``text``, read strictly: a key twice in one object (which value
    counts would depend on the reader), ``NaN`` / ``Infinity`` (not JSON), numbers beyond a
    float (``1e400``) and nesting over :data:`MAX_JSON_DEPTH` raise :class:`StrictJsonError`
    naming the problem; invalid JSON raises :class:`json.JSONDecodeError`, an integer past
    Python's digit limit :class:`ValueError`."""
    if json_too_deep(text):
        raise StrictJsonError(f"nesting deeper than {MAX_JSON_DEPTH} arrays and objects")
    return json.loads(
        text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite
    )
