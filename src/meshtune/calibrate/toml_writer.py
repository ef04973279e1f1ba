"""A small TOML emitter for the data meshtune writes (profiles); no runtime dependency.

It covers what :meth:`pydantic.BaseModel.model_dump` in JSON mode yields: tables (dicts),
arrays of tables (lists of dicts), arrays of scalars, strings, booleans, integers and finite
floats. ``None`` values are left out (TOML has no null). Floats are written with ``repr`` and
so read back bit for bit; the output parses with :mod:`tomllib`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _string(text: str) -> str:
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"TOML output takes finite floats only, got {value!r}")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Sequence):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as a TOML value")


def _is_table_array(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and bool(value)
        and all(isinstance(v, Mapping) for v in value)
    )


def _array_value(key: str, value: Sequence[Any]) -> str:
    """Long arrays of strings one item per line; others on the key's line."""
    if len(value) > 1 and all(isinstance(v, str) for v in value):
        items = "".join(f"    {_string(v)},\n" for v in value)
        return f"{_key(key)} = [\n{items}]\n"
    return f"{_key(key)} = {_scalar(value)}\n"


def _has_plain(table: Mapping[str, Any]) -> bool:
    """Whether ``table`` has a key written as ``key = value`` (not a sub-table)."""
    return any(
        v is not None and not isinstance(v, Mapping) and not _is_table_array(v)
        for v in table.values()
    )


def _table(path: list[str], table: Mapping[str, Any], out: list[str]) -> None:
    plain = [(k, v) for k, v in table.items() if v is not None and not isinstance(v, Mapping)]
    plain = [(k, v) for k, v in plain if not _is_table_array(v)]
    for key, value in plain:
        if isinstance(value, Sequence) and not isinstance(value, str):
            out.append(_array_value(key, value))
        else:
            out.append(f"{_key(key)} = {_scalar(value)}\n")
    for key, value in table.items():
        if isinstance(value, Mapping):
            if _has_plain(value) or not value:  # else its sub-tables define it implicitly
                out.append("\n[" + ".".join(_key(p) for p in [*path, key]) + "]\n")
            _table([*path, key], value, out)
        elif _is_table_array(value):
            for item in value:
                out.append("\n[[" + ".".join(_key(p) for p in [*path, key]) + "]]\n")
                _table([*path, key], item, out)


def dumps(data: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    """``data`` as TOML text, after ``header`` lines written as ``#`` comments."""
    out = [f"# {line}\n" if line else "#\n" for line in header]
    if out:
        out.append("\n")
    _table([], data, out)
    return "".join(out)
