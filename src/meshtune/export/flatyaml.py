"""The flat ``key: value`` subset of YAML that MaxText configs use, read without a YAML library.

A MaxText config (``base.yml`` and the files that override it) is a mapping of top-level keys
to scalars (integers, floats, ``true`` / ``false``, quoted or plain strings) and flow collections
(``[...]``, ``{...}``, possibly over several lines, as ``logical_axis_rules``).
:func:`read_flat_yaml` returns the scalars parsed and each collection as its raw text
(meshtune reads none); ``#``
comments and blank lines are skipped. Anything else (indented blocks, anchors, several
documents) is refused with the line number, so a file is never half read. PyYAML is not a
dependency: this subset is all the reader needs.
"""

from __future__ import annotations

import re

from meshtune.errors import SetupFileError

Scalar = int | float | bool | str
_MAX_DIGITS = 64  # far beyond any config value; keeps int() under Python's digit limit
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:(?:\s+(.*))?$")
_INT = re.compile(r"[-+]?[0-9][0-9_]*")
_FLOAT = re.compile(
    r"[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*|[0-9][0-9_]*(?=[eE]))(?:[eE][-+]?[0-9]+)?"
)


def _strip_comment(text: str) -> str:
    """``text`` without a ``#`` comment outside quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text.rstrip()


def _scalar(text: str, where: str) -> Scalar:
    """A YAML scalar: quoted string, boolean, integer, float or plain string."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text[:1] in "'\"{&*!|>%@`":
        raise SetupFileError(f"{where}: {text[:40]!r} is not a plain YAML scalar")
    if len(text) > _MAX_DIGITS and (_INT.fullmatch(text) or _FLOAT.fullmatch(text)):
        raise SetupFileError(f"{where}: a number of {len(text)} digits is not a config value")
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if _INT.fullmatch(text):
        return int(text.replace("_", ""))
    if _FLOAT.fullmatch(text):
        return float(text.replace("_", ""))
    return text


def _depth(text: str) -> int:
    """Opened minus closed brackets (``[`` and ``{``) in ``text``."""
    return text.count("[") + text.count("{") - text.count("]") - text.count("}")


def _collection(first: str, lines: list[str], i: int, what: str) -> tuple[str, int]:
    """The flow collection opening with ``first`` and continued on ``lines[i:]`` until its
    brackets close, as one line of text, and the index of the line after it; each line is
    stripped of its comment once and the pieces joined once, so the work is linear in the
    collection's length. :class:`SetupFileError` naming ``what`` when the brackets never
    close."""
    parts, depth = [first], _depth(first)
    while depth > 0 and i < len(lines):
        more = _strip_comment(lines[i]).strip()
        i += 1
        parts.append(more)
        depth += _depth(more)
    if depth:
        raise SetupFileError(f"{what} is not closed")
    return " ".join(parts), i


def read_flat_yaml(text: str, source: str) -> dict[str, Scalar]:
    """The top-level keys of a flat YAML file (module docstring); :class:`SetupFileError`
    naming ``source`` and the line for anything outside the subset or a key given twice."""
    out: dict[str, Scalar] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number, line = i + 1, _strip_comment(lines[i])
        i += 1
        if not line.strip() or (line.strip() == "---" and number == 1):
            continue
        found = _KEY.match(line)
        if found is None or line[:1].isspace():
            raise SetupFileError(
                f"{source}:{number}: not a flat 'key: value' line (MaxText configs are flat)"
            )
        key, value = found[1], (found[2] or "").strip()
        if key in out:
            raise SetupFileError(f"{source}:{number}: key {key!r} appears twice")
        if value.startswith(("[", "{")):
            out[key], i = _collection(value, lines, i, f"{source}:{number}: list of {key!r}")
            continue
        if not value:
            raise SetupFileError(
                f"{source}:{number}: {key!r} has no value (nested blocks are "
                "not part of MaxText's flat config)"
            )
        out[key] = _scalar(value, f"{source}:{number}")
    return out
