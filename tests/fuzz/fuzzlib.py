"""Seeded mutation of real input files, and the contract every fuzzed command must keep.

The contract (issues 6 and 20): exit code 0, 1 or 2; no traceback; on exit 2 exactly one stderr
line; no file replaced without ``--force`` (:attr:`Case.keep`); no hang. Work is bounded by CPU
time, never by the wall clock (the suite runs on shared, loaded machines): a case may use
:data:`CASE_CPU_SECONDS` of CPU, and one still running after :data:`HANG_CPU_SECONDS` of CPU is
interrupted. :func:`check_all` runs cases through typer's CliRunner in this process (`run`'s JAX
engine hidden: tests/engines covers it) or, for inputs that may block or exhaust memory, in a
child process (:attr:`Case.child`) under a memory cap, a CPU cap and a wall-clock hang detector
of :data:`CHILD_HANG_SECONDS`. A failure holds everything needed to reproduce it.

``MESHTUNE_FUZZ_CASES=N`` runs N cases per target instead of each target's default;
``MESHTUNE_FUZZ_LOG=FILE`` appends every broken contract, in full, to FILE.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import resource
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from typer.testing import CliRunner, Result

import meshtune.engines
from meshtune.cli import app
from meshtune.errors import EngineError

REPO = Path(__file__).resolve().parents[2]
CASE_CPU_SECONDS = 20.0
"""CPU seconds one case may use (``time.process_time``: a loaded machine inflates it far less
than the wall clock, but shared caches still slow a process down: a 4 s case once passed 10 s
beside five test suites). Most commands on the fuzzed inputs need well under a second; the
slowest, ``plan llama3-405b --chips 256 --seq 1`` (every split fits a one-token sequence) and
``compare``, about four on a quiet machine. A bound for blow-ups, not for speed (bench/)."""
HANG_CPU_SECONDS = 60.0
"""A case that has used this much CPU is interrupted (``ITIMER_PROF``) and reported as a hang."""
CHILD_HANG_SECONDS = 60.0
"""Hang detector of a child-process case: a read blocked on a FIFO uses no CPU, so only the
wall clock can see it. A child is hung when it used under a CPU second in this long (a starved
child on a loaded machine still gets more), so no load on the machine can trip it."""
CHILD_MEMORY_BYTES = 2 << 30
"""Address-space cap of a child-process case: reading ``/dev/zero`` must fail, not fill memory."""

_SPECIAL = ("fifo", "dev-zero")
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
    """Raised inside a case that used :data:`HANG_CPU_SECONDS` of CPU."""


def _meshtune_module(frames: list[traceback.FrameSummary]) -> str:
    """The innermost meshtune module among ``frames`` ('' if none)."""
    inner = [f for f in frames if "/meshtune/" in f.filename]
    return inner[-1].filename.split("/meshtune/", 1)[1] if inner else ""


class _Watch:
    """SIGPROF guard of one case: notes where a slow case is at the CPU bound, stops a hang."""

    def __init__(self) -> None:
        self.slow_in = ""

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.slow_in and frame is not None:
            self.slow_in = _meshtune_module(traceback.extract_stack(frame)) or "?"
            signal.setitimer(signal.ITIMER_PROF, HANG_CPU_SECONDS - CASE_CPU_SECONDS)
            return
        raise CaseHungError(f"still running after {HANG_CPU_SECONDS:g} CPU seconds")


@dataclass(frozen=True)
class Case:
    """One fuzz case: the command line, optional stdin/env, and how its input was made.

    ``keep``: files that must be byte-identical afterwards (an output named without --force).
    ``child``: run it as ``python -m meshtune`` in a child process (inputs that may block or
    exhaust memory). ``kind``: the mutation class (for the reports).
    ``expect``: a further oracle of this case (e.g. the exported module compiles); it returns
    what is wrong, or None.
    """

    args: list[str]
    how: str
    data: bytes | None = None
    stdin: bytes | None = None
    env: dict[str, str] | None = None
    keep: tuple[Path, ...] = ()
    child: bool = False
    kind: str = ""
    expect: Callable[[Outcome], str | None] | None = None

    def describe(self) -> str:
        shown = self.data if self.data is not None else self.stdin
        text = repr(shown[:600]) if shown else ""
        if shown and len(shown) > 600:
            text += "... (truncated)"
        env = " ".join(f"{k}={v}" for k, v in (self.env or {}).items())
        return (
            f"command: {env + ' ' if env else ''}meshtune {' '.join(map(repr, self.args))}\n"
            f"mutation: {self.kind + ': ' if self.kind else ''}{self.how}\n"
            f"input ({len(shown or b'')} bytes): {text}"
        )


@dataclass
class Outcome:
    """What a case did: exit code, the two streams, an uncaught exception (in-process only)."""

    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _refuse_jax() -> None:
    hint = meshtune.engines.INSTALL_HINT
    raise EngineError(
        f"the JAX engine is hidden from the fuzz cases (tests/engines runs it): {hint}"
    )


@contextlib.contextmanager
def _without_jax() -> Iterator[None]:
    """`run` reads, checks and sizes the plan, then stops where it would compile with JAX."""
    saved = meshtune.engines.require_jax
    meshtune.engines.require_jax = _refuse_jax
    try:
        yield
    finally:
        meshtune.engines.require_jax = saved


def _in_process(case: Case) -> tuple[Outcome, float, str]:
    watch = _Watch()
    previous = signal.signal(signal.SIGPROF, watch)
    signal.setitimer(signal.ITIMER_PROF, CASE_CPU_SECONDS)
    start = time.process_time()
    try:
        with _without_jax():
            result: Result = runner().invoke(app, case.args, input=case.stdin, env=case.env)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    cpu = time.process_time() - start
    outcome = Outcome(result.exit_code, result.stdout, result.stderr, result.exception)
    return outcome, cpu, watch.slow_in


def _child_limits() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    cpu = int(HANG_CPU_SECONDS)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))


def _child_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running child has used, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _in_child(case: Case) -> tuple[Outcome, float, str]:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", **(case.env or {})}
    env.pop("FORCE_COLOR", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    notes = []
    with subprocess.Popen(
        [sys.executable, "-m", "meshtune", *case.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=_child_limits,
    ) as child:
        used = 0.0
        while True:
            try:
                out, err = child.communicate(case.stdin or b"", timeout=CHILD_HANG_SECONDS)
                break
            except subprocess.TimeoutExpired:
                # slow (a loaded machine) or blocked? only a blocked child used no CPU
                now = _child_cpu(child.pid)
                if now - used >= 1.0:
                    used = now
                    continue
                child.kill()
                out, err = child.communicate()
                notes.append(f"hang: blocked for {CHILD_HANG_SECONDS:g} s using no CPU")
                break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    text = [raw.decode("utf-8", errors="replace") for raw in (out, err)]
    return Outcome(child.returncode, text[0], text[1], notes=notes), cpu, ""


def run(case: Case) -> tuple[Outcome, float, str]:
    """Run the case with a hang guard; return what it did, its CPU seconds and, if it ran past
    :data:`CASE_CPU_SECONDS`, the meshtune module it was in at that moment."""
    snapshot = {path: path.read_bytes() if path.is_file() else None for path in case.keep}
    outcome, cpu, slow_in = (_in_child if case.child else _in_process)(case)
    for path, before in snapshot.items():
        now = path.read_bytes() if path.is_file() else None
        if now != before:
            outcome.notes.append(f"{path.name} was replaced without --force")
    wrong = case.expect(outcome) if case.expect is not None and outcome.exception is None else None
    if wrong:
        outcome.notes.append(wrong)
    return outcome, cpu, slow_in


RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""A control character other than newline and tab: a terminal would act on it (issue 38)."""


def raw_control(result: Outcome) -> str | None:
    """The first raw control character in ``result``'s stdout or stderr, with its context."""
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        found = RAW_CONTROL.search(text)
        if found:
            context = text[max(found.start() - 40, 0) : found.end() + 40]
            return f"a raw control character in {name}: {context!r}"
    return None


def violation(result: Outcome, seconds: float) -> str | None:
    """What part of the contract ``result`` breaks (``seconds``: CPU time), or None."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc = result.exception
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        place = f" at {where.filename}:{where.lineno}" if where else ""
        return f"uncaught {type(exc).__name__}: {str(exc)[:300]}{place}"
    if result.notes:
        return "; ".join(result.notes)
    if "Traceback" in result.output:
        last = result.stderr.strip().splitlines()[-1:] or [""]
        return f"a traceback in the output: {last[0][:200]}"
    raw = raw_control(result)
    if raw:
        return raw
    if result.exit_code not in (0, 1, 2):
        return f"exit code {result.exit_code}: {result.stderr[-300:]!r}"
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        if len(lines) != 1 or not lines[0].startswith("meshtune: error: "):
            return f"exit 2 with {len(lines)} stderr line(s): {result.stderr[:500]!r}"
    if seconds > CASE_CPU_SECONDS:
        return f"took {seconds:.2f} CPU s (bound {CASE_CPU_SECONDS:g} s)"
    return None


def origin(result: Outcome, slow_in: str = "") -> str:
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
