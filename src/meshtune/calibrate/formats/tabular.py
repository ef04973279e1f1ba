"""Tables in text: Markdown pipe tables, one CSV table, or JSON / JSONL records, read into
:class:`Table` records whose column headers :func:`column_name` splits into a name and a unit."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from meshtune.calibrate.formats.lines import clean_lines, csv_fields

_UNIT_IN_PARENS = re.compile(r"\(([^)]*)\)|\[([^\]]*)\]")
_UNIT_SUFFIX_NAME = re.compile(r"_(ns|us|ms|s|sec|gbps|gb_s|gib_s|mb_s|tflops|gflops|b|bytes)$")


def column_name(header: str) -> tuple[str, str]:
    """``(name, unit)`` of a table column header: ``'time (us)'`` → ``('time', 'us')``,
    ``'avg_time_ms'`` → ``('avg_time', 'ms')``, ``'algBw (GB/s)'`` → ``('algbw', 'gb/s')``."""
    text = header.strip().strip("#").strip().lower().replace("μ", "µ")
    unit = ""
    found = _UNIT_IN_PARENS.search(text)
    if found:
        unit = (found.group(1) or found.group(2) or "").strip()
        text = _UNIT_IN_PARENS.sub("", text)
    name = re.sub(r"[\s\-./]+", "_", text.strip()).strip("_")
    if not unit and (suffix := _UNIT_SUFFIX_NAME.search(name)):
        unit = suffix.group(1).replace("_", "/")
        name = name[: suffix.start()]
    return name, unit


@dataclass(frozen=True)
class Table:
    """One table of a file: its column headers and its rows, as ``(line, cells)``."""

    header_line: int
    headers: tuple[str, ...]
    rows: tuple[tuple[int, tuple[str, ...]], ...]
    heading: str = ""


def _json_tables(text: str) -> list[Table] | None:
    """Tables of a JSON document (a list of objects, or an object holding one) or JSONL."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    records: list[tuple[int, dict[str, object]]] = []
    try:
        doc = json.loads(stripped)
    except (ValueError, RecursionError):  # ValueError: also a number past the digit limit
        doc = None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                return None
            if isinstance(obj, dict):
                records.append((number, obj))
    if doc is not None:
        items = doc if isinstance(doc, list) else None
        if isinstance(doc, dict):
            items = next((v for v in doc.values() if isinstance(v, list)), [doc])
        records = [(i, r) for i, r in enumerate(items or [], 1) if isinstance(r, dict)]
    if not records:
        return None
    headers: list[str] = []
    for _, record in records:
        headers += [str(k) for k in record if str(k) not in headers]
    rows = tuple(
        (
            number,
            tuple("" if record.get(h) is None else str(record.get(h)) for h in headers),
        )
        for number, record in records
    )
    return [Table(records[0][0], tuple(headers), rows)]


def read_tables(text: str, source: str = "the log") -> list[Table]:
    """Every table in ``text``: Markdown pipe tables, one CSV table, or JSON / JSONL records.

    Launcher prefixes are removed; ``#`` lines before a table are its heading (the last one
    kept); Markdown separator rows (``|---|``) are skipped. ``source`` names the file in errors.
    """
    from_json = _json_tables(text)
    if from_json is not None:
        return from_json
    tables: list[Table] = []
    heading = ""
    lines = list(clean_lines(text))
    if not any(line.startswith("|") for _, line in lines):
        data = [(n, line) for n, line in lines if line and not line.startswith("#")]
        if data and "," in data[0][1]:
            header = csv_fields(data[0][1], f"{source}:{data[0][0]}")
            rows = tuple((n, tuple(csv_fields(line, f"{source}:{n}"))) for n, line in data[1:])
            return [Table(data[0][0], tuple(header), rows)]
        return []
    current: list[tuple[int, tuple[str, ...]]] = []
    header_line = 0
    headers: tuple[str, ...] = ()
    for number, line in [*lines, (0, "")]:
        if line.startswith("|"):
            cells = tuple(c.strip() for c in line.strip().strip("|").split("|"))
            if all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
                continue
            if not headers:
                header_line, headers = number, cells
            else:
                current.append((number, cells))
            continue
        if headers:
            tables.append(Table(header_line, headers, tuple(current), heading))
            headers, current = (), []
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
    return tables
