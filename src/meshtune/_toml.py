"""Reading TOML data files into pydantic models with one-line, file-naming errors."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from meshtune.errors import MeshtuneError
from meshtune.io import read_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

M = TypeVar("M", bound=BaseModel)

_SHOWN_INPUT_CHARS = 40


def read_toml(path: Path, error: type[MeshtuneError]) -> dict[str, Any]:
    """Parse ``path`` as TOML; raise ``error`` naming the file (and line) on failure."""
    raw = read_bytes(path, "a TOML file", error)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); expected a "
            "TOML file"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python < 3.14 puts the position only in the message: "... (at line 3, column 10)".
        found = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        line = getattr(exc, "lineno", None) or (int(found[1]) if found else None)
        msg = getattr(exc, "msg", None) or re.sub(r"\s*\(at line .*\)$", "", str(exc))
        where = f"{path}:{line}" if line else str(path)
        hint = " (this looks like JSON; expected TOML)" if text.lstrip().startswith("{") else ""
        raise error(f"{where}: invalid TOML: {msg}{hint}") from None
    except ValueError:
        # Python's int-string limit (sys.get_int_max_str_digits) raises inside the parser.
        raise error(
            f"{path}: invalid TOML: an integer has more than {sys.get_int_max_str_digits()} digits"
        ) from None
    except RecursionError:
        raise error(f"{path}: invalid TOML: arrays or tables nested too deeply") from None


def _shown(value: Any) -> str:
    """``value`` as a short one-line literal for an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    if len(text) > _SHOWN_INPUT_CHARS:
        text = text[: _SHOWN_INPUT_CHARS - 3] + "..."
    return text


_PLAIN = {
    "int_type": "should be an integer",
    "int_parsing": "should be an integer",
    "int_from_float": "should be an integer",
    "float_type": "should be a number",
    "float_parsing": "should be a number",
    "finite_number": "should be a finite number",
    "string_type": "should be a string",
    "bool_type": "should be true or false",
    "list_type": "should be a list",
    "tuple_type": "should be a list",
    "dict_type": "should be a table",
    "model_type": "should be a table",
    "model_attributes_type": "should be a table",
}


def _plain_message(err: Any, known: list[str] | None) -> str:
    """One pydantic error in plain words: what the value should be, and what it was."""
    kind = err["type"]
    has_input = kind not in ("missing", "extra_forbidden")
    got = f", got {_shown(err['input'])}" if has_input else ""
    if kind == "missing":
        return "required, but missing"
    if kind == "extra_forbidden":
        return "unknown field" + (f"; known fields: {', '.join(known)}" if known else "")
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    if kind in _PLAIN:
        return _PLAIN[kind] + got
    msg = str(err["msg"])
    msg = msg[0].lower() + msg[1:] if msg else kind
    return msg.removeprefix("input ") + got


def describe_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """Render a pydantic error in plain words: ``field 'a.b': should be ..., got ...; ...``.

    ``model`` (the validated class) lets an unknown top-level field name the known ones.
    """
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        known = None
        if model is not None and len(err["loc"]) == 1:
            known = [name for name in model.model_fields if name != "name"]
        message = _plain_message(err, known)
        if not loc:
            parts.append(message if err["type"] == "value_error" else f"the document {message}")
        else:
            parts.append(f"field '{loc}': {message}")
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
        raise error(f"{path}: {describe_validation_error(exc, model)}") from None
    except RecursionError:
        raise error(f"{path}: values nested too deeply") from None
