"""Seeded mutation of real input files, and the contract every fuzzed command must keep.

The contract (issue 6): exit code 0, 1 or 2; no traceback; on exit 2 exactly one stderr line;
each case done in under :data:`CASE_SECONDS`. :func:`check` runs one case through typer's
CliRunner and returns a failure description that holds everything needed to reproduce it (the
command line and the mutated input), or None.

``MESHTUNE_FUZZ_CASES=N`` runs N cases per target instead of each target's default;
``MESHTUNE_FUZZ_LOG=FILE`` appends every broken contract, in full, to FILE.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from typer.testing import CliRunner, Result

from meshtune.cli import app

REPO = Path(__file__).resolve().parents[2]
CASE_SECONDS = 2.0
"""Wall-clock bound of one case (generous: the test machine is shared and noisy)."""
HANG_SECONDS = 3.0
"""A case still running after this long is interrupted and reported as a hang."""

Mutator = Callable[[random.Random, bytes], tuple[bytes, str]]


def cases(default: int) -> int:
    """How many cases a target runs: ``$MESHTUNE_FUZZ_CASES``, else ``default``."""
    return int(os.environ.get("MESHTUNE_FUZZ_CASES", default))


def runner() -> CliRunner:
    """A CliRunner with a plain 80-column terminal (the CI case)."""
    return CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "FORCE_COLOR": None})


# --------------------------------------------------------------------------- values

HUGE = "9" * 5000
"""A 5,000-digit integer: past Python's int-string conversion limit."""

TOML_VALUES = [
    "0",
    "-1",
    "1",
    "2",
    "3",
    "7",
    "8192",
    '"8192"',
    "8192.0",
    "1e30",
    "-1e30",
    "1e308",
    "inf",
    "-inf",
    "nan",
    "true",
    "false",
    '""',
    '"x"',
    "[]",
    "[1, 2]",
    "{}",
    "{ a = 1 }",
    HUGE,
    "-" + HUGE,
    "0x7fffffffffffffff",
    "99999999999999999999999",
    "1099511627777",
    "2199023255552",
    "4.5",
    "1979-05-27",
    '"' + "x" * 10_000 + '"',
    "[" * 2000 + "]" * 2000,
]

JSON_VALUES: list[Any] = [
    0,
    -1,
    -4096,
    -12288,
    65536,
    1,
    2,
    3,
    4,
    5,
    8,
    1e30,
    -1e30,
    1e-300,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    True,
    False,
    None,
    "",
    "x",
    "OS",
    "LS",
    "RS",
    "forward",
    "16x16",
    [],
    [1, 2],
    {},
    {"a": 1},
    "__huge__",
    "__neg_huge__",
    2**63,
    2**40 + 1,
    12288.5,
    "12288",
]


# --------------------------------------------------------------------------- mutators


def _random_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    size = rng.choice([0, 1, 16, 256, 4096])
    return rng.randbytes(size), f"random {size} bytes"


def _truncate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    cut = rng.randrange(len(data) + 1)
    return data[:cut], f"truncated at byte {cut}"


def _flip_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    out = bytearray(data)
    spots = sorted(rng.randrange(len(out)) for _ in range(rng.randint(1, 8))) if out else []
    for spot in spots:
        out[spot] = rng.randrange(256)
    return bytes(out), f"bytes changed at {spots}"


def _insert_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    at = rng.randrange(len(data) + 1)
    chunk = rng.choice([b"\x00", b"\xff\xfe", b"\n\n", b"[[", b"{", b'"', b"=", rng.randbytes(8)])
    return data[:at] + chunk + data[at:], f"inserted {chunk!r} at byte {at}"


def _delete_line(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    lines = data.split(b"\n")
    k = rng.randrange(len(lines))
    return b"\n".join(lines[:k] + lines[k + 1 :]), f"deleted line {k + 1}"


def _duplicate_line(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    lines = data.split(b"\n")
    k = rng.randrange(len(lines))
    return b"\n".join(lines[: k + 1] + lines[k:]), f"duplicated line {k + 1}"


_NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def _edit_number(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Replace one number of the text (a measurement, a size, a count) by an odd one."""
    found = list(_NUMBER.finditer(data))
    if not found:
        return _flip_bytes(rng, data)
    match = rng.choice(found)
    new = rng.choice(
        [b"0", b"-1", b"1e-300", b"1e300", b"nan", b"inf", b"-0", HUGE.encode(), b"1.5", b"x"]
    )
    edited = data[: match.start()] + new + data[match.end() :]
    return edited, f"number {match.group()!r} at byte {match.start()} -> {new[:20]!r}"


def byte_mutators() -> list[Mutator]:
    """Format-blind mutators."""
    return [_random_bytes, _truncate, _flip_bytes, _insert_bytes, _delete_line, _edit_number]


_TOML_KEY = re.compile(rb"^(\s*[A-Za-z_][\w.-]*\s*=\s*)(.*)$", re.M)


def _toml_value(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Give one ``key = value`` line another value (wrong type, huge, negative, nested ...)."""
    found = list(_TOML_KEY.finditer(data))
    if not found:
        return _flip_bytes(rng, data)
    match = rng.choice(found)
    value = rng.choice(TOML_VALUES)
    edited = data[: match.start(2)] + value.encode() + data[match.end(2) :]
    key = match.group(1).decode(errors="replace").strip(" =")
    return edited, f"{key} = {value[:40]}{'...' if len(value) > 40 else ''}"


def _toml_extra_key(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    key = rng.choice(["name", "hidden_size", "extra", "layers", "calibration"])
    line = f"{key} = {rng.choice(TOML_VALUES[:12])}\n".encode()
    return line + data, f"added line {line!r} at the top"


def toml_mutators() -> list[Mutator]:
    """TOML-aware mutators, plus the format-blind ones."""
    return [
        _toml_value,
        _toml_value,
        _toml_value,
        _toml_extra_key,
        _delete_line,
        _duplicate_line,
        *byte_mutators(),
    ]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_edit(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Parse, change one node (value, type, deletion, nesting), serialise."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return _flip_bytes(rng, data)
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return _flip_bytes(rng, data)
    numbers = [p for p in paths if _is_number(_at(doc, p))]
    path = rng.choice(numbers if numbers and rng.random() < 0.6 else paths)
    parent = _at(doc, path[:-1])
    last = path[-1]
    ops = ["value"] * 6 + ["delete", "delete", "nest", "duplicate", "empty"]
    if _is_number(parent[last]):
        ops += ["negate"] * 4 + ["scale"] * 2
    op = rng.choice(ops)
    what = op
    if op == "negate":
        parent[last] = -parent[last]
    elif op == "scale":
        factor = rng.choice([2, 3, 1000, 10**9, 10**30])
        parent[last] = parent[last] * factor
        what = f"scale x{factor}"
    elif op == "delete":
        del parent[last]
    elif op == "nest":
        parent[last] = "__nested__"
    elif op == "duplicate" and isinstance(parent, list):
        parent.insert(last, parent[last])
    elif op == "empty":
        parent[last] = type(parent[last])() if isinstance(parent[last], (list, dict, str)) else 0
    else:
        parent[last] = rng.choice(JSON_VALUES)
        what = f"value {_short(parent[last])}"
    text = json.dumps(doc, indent=1)
    for marker, raw in _RAW_JSON.items():
        text = text.replace(json.dumps(marker), raw)
    return text.encode(), f"{'.'.join(str(p) for p in path)}: {what}"


# Values json.dumps cannot write (Python's int-string limit, its recursion limit), spliced in.
_RAW_JSON = {"__huge__": HUGE, "__neg_huge__": "-" + HUGE, "__nested__": "[" * 5000 + "]" * 5000}


def _short(value: Any) -> str:
    return "<5000-digit integer>" if value in ("__huge__", "__neg_huge__") else repr(value)[:40]


def json_mutators() -> list[Mutator]:
    """JSON-aware mutators, plus the format-blind ones."""
    return [_json_edit] * 4 + byte_mutators()


def mutate(rng: random.Random, data: bytes, mutators: Sequence[Mutator]) -> tuple[bytes, str]:
    """Apply one to three mutators; return the result and what was done."""
    steps = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        data, what = rng.choice(mutators)(rng, data)
        steps.append(what)
    return data, "; ".join(steps)


# --------------------------------------------------------------------------- the contract


class CaseHungError(Exception):
    """Raised inside a case that ran past :data:`HANG_SECONDS`."""


def _meshtune_module(frames: list[traceback.FrameSummary]) -> str:
    """The innermost meshtune module among ``frames`` ('' if none)."""
    inner = [f for f in frames if "/meshtune/" in f.filename]
    return inner[-1].filename.split("/meshtune/", 1)[1] if inner else ""


class _Watch:
    """SIGALRM guard of one case: notes where a slow case is at the bound, stops a hang."""

    def __init__(self) -> None:
        self.slow_in = ""

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.slow_in and frame is not None:
            self.slow_in = _meshtune_module(traceback.extract_stack(frame)) or "?"
            signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS - CASE_SECONDS)
            return
        raise CaseHungError(f"still running after {HANG_SECONDS:g} s")


@dataclass(frozen=True)
class Case:
    """One fuzz case: the command line, optional stdin/env, and how its input was made."""

    args: list[str]
    how: str
    data: bytes | None = None
    stdin: bytes | None = None
    env: dict[str, str] | None = None

    def describe(self) -> str:
        shown = self.data if self.data is not None else self.stdin
        text = repr(shown[:3000]) if shown else ""
        if shown and len(shown) > 3000:
            text += "... (truncated)"
        env = " ".join(f"{k}={v}" for k, v in (self.env or {}).items())
        return (
            f"command: {env + ' ' if env else ''}meshtune {' '.join(self.args)}\n"
            f"mutation: {self.how}\ninput ({len(shown or b'')} bytes): {text}"
        )


def run(case: Case) -> tuple[Result, float, str]:
    """Invoke the case in-process with a hang guard.

    Returns the result, its wall time and, if it ran past :data:`CASE_SECONDS`, the meshtune
    module it was in at that moment.
    """
    watch = _Watch()
    previous = signal.signal(signal.SIGALRM, watch)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    start = time.perf_counter()
    try:
        result = runner().invoke(app, case.args, input=case.stdin, env=case.env)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return result, time.perf_counter() - start, watch.slow_in


def violation(result: Result, seconds: float) -> str | None:
    """What part of the contract ``result`` breaks, or None."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc = result.exception
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        place = f" at {where.filename}:{where.lineno}" if where else ""
        return f"uncaught {type(exc).__name__}: {str(exc)[:300]}{place}"
    if result.exit_code not in (0, 1, 2):
        return f"exit code {result.exit_code}"
    if "Traceback" in result.output:
        return "a traceback in the output"
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        if len(lines) != 1 or not lines[0].startswith("meshtune: error: "):
            return f"exit 2 with {len(lines)} stderr line(s): {result.stderr[:500]!r}"
    if seconds > CASE_SECONDS:
        return f"took {seconds:.2f} s (bound {CASE_SECONDS:g} s)"
    return None


def origin(result: Result, slow_in: str = "") -> str:
    """The innermost meshtune module of an uncaught exception (else where a slow case was)."""
    exc = result.exception
    if exc is None or isinstance(exc, SystemExit) or exc.__traceback__ is None:
        return slow_in
    return _meshtune_module(traceback.extract_tb(exc.__traceback__))


@dataclass(frozen=True)
class Failure:
    """A broken contract, with everything needed to reproduce it."""

    case: Case
    problem: str
    module: str

    def __str__(self) -> str:
        where = f" (raised in meshtune/{self.module})" if self.module else ""
        return f"{self.problem}{where}\n{self.case.describe()}"


def check_all(
    all_cases: Sequence[Case], write: Callable[[Case], None] | None = None
) -> list[Failure]:
    """Run every case (``write`` puts its input in place first); return the broken contracts."""
    failures = []
    for case in all_cases:
        if write is not None:
            write(case)
        result, seconds, slow_in = run(case)
        problem = violation(result, seconds)
        if problem is not None:
            failures.append(Failure(case, problem, origin(result, slow_in)))
    return failures


def assert_none(failures: Sequence[Failure], total: int) -> None:
    """Fail with a reproducible report of the failures."""
    if not failures:
        return
    log = os.environ.get("MESHTUNE_FUZZ_LOG")
    if log:
        with Path(log).open("a", encoding="utf-8") as handle:
            handle.writelines(f"=== {f}\n" for f in failures)
    message = report(failures, total)
    raise AssertionError(message)


def report(failures: Sequence[Failure], total: int) -> str:
    """A failure message: how many cases broke the contract, and the first few in full."""
    distinct: dict[str, Failure] = {}
    for failure in failures:
        key = failure.problem.split(":")[0] + failure.problem.rpartition(" at ")[2]
        distinct.setdefault(key, failure)
    shown = "\n\n".join(str(f) for f in list(distinct.values())[:5])
    return f"{len(failures)} of {total} cases broke the contract; distinct:\n\n{shown}"
