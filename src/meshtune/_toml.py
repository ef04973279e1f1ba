"""Reading TOML data files into pydantic models with one-line, file-naming errors."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from meshtune.errors import MeshtuneError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

M = TypeVar("M", bound=BaseModel)


def read_toml(path: Path, error: type[MeshtuneError]) -> dict[str, Any]:
    """Parse ``path`` as TOML; raise ``error`` naming the file (and line) on failure."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python < 3.14 puts the position only in the message: "... (at line 3, column 10)".
        found = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        line = getattr(exc, "lineno", None) or (int(found[1]) if found else None)
        msg = getattr(exc, "msg", None) or re.sub(r"\s*\(at line .*\)$", "", str(exc))
        where = f"{path}:{line}" if line else str(path)
        raise error(f"{where}: invalid TOML: {msg}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """Render a pydantic error as ``field 'a.b': message; field 'c': message``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"field '{loc}': {err['msg']}")
    return "; ".join(parts)


def load_model_file(path: Path, model: type[M], error: type[MeshtuneError], **injected: Any) -> M:
    """Read ``path`` and validate it as ``model``; ``injected`` fields come from outside the file.

    A file may not set an injected field itself (the ``name`` of a data file is its stem).
    """
    data = read_toml(path, error)
    for key in injected:
        if key in data:
            raise error(f"{path}: field '{key}' is not allowed in the file (it is the file stem)")
    try:
        return model.model_validate({**data, **injected})
    except ValidationError as exc:
        raise error(f"{path}: {describe_validation_error(exc)}") from None
