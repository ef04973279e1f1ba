"""No test bounds the wall clock (issue 20, finding 12).

The suite runs on shared, loaded machines (CI, a 2-core box with other jobs): a test that fails
when a case takes 3 s of wall time fails for the machine, not the code. Work is bounded by what
the code does (operation counts, sizes, CPU time with wide margins); the wall clock may only
catch a hang, at a minute or more, in the places :data:`HANG_DETECTORS` lists. This test reads
every Python file under tests/ and fails on a new wall-clock read, a timeout not in that list or
under a minute, a hypothesis deadline, or a real-time signal.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent

HANG_DETECTORS: dict[str, str] = {
    "engines/test_jax_engine.py": "children that compile and run JAX programs (HANG_SECONDS)",
    "fuzz/fuzzlib.py": "a fuzz case in a child process blocked on a FIFO (CHILD_HANG_SECONDS)",
    "test_io.py": "the thread reading a FIFO, joined after the write (600 s)",
}
"""Files that may pass ``timeout=`` (a hang detector of at least :data:`MIN_HANG_SECONDS`), and
why."""

MIN_HANG_SECONDS = 60.0

WALL_CLOCK = {
    "time.time",
    "time.time_ns",
    "time.monotonic",
    "time.monotonic_ns",
    "time.perf_counter",
    "time.perf_counter_ns",
    "datetime.now",
    "datetime.utcnow",
    "datetime.datetime.now",
    "signal.alarm",
    "threading.Timer",
}
_TIME_NAMES = {name.rsplit(".", 1)[1] for name in WALL_CLOCK if name.startswith("time.")}
_WAITS = {"join", "wait", "communicate", "acquire"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _constants(tree: ast.Module) -> dict[str, object]:
    """Module-level ``NAME = <number>`` assignments."""
    out: dict[str, object] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            out[target.id] = value.value
    return out


def _seconds(node: ast.expr, constants: dict[str, object]) -> float | None:
    value = node.value if isinstance(node, ast.Constant) else constants.get(_dotted(node))
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if is_number else None  # type: ignore[arg-type]


def wall_clock_bounds(source: str, name: str) -> list[str]:
    """Every wall-clock bound in ``source`` (a test file called ``name``), one line each."""
    tree = ast.parse(source)
    constants = _constants(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            for alias in node.names:
                if alias.name in _TIME_NAMES:
                    found.append(f"{where}: imports time.{alias.name}")
        if not isinstance(node, ast.Call):
            continue
        called = _dotted(node.func)
        if called in WALL_CLOCK:
            found.append(f"{where}: calls {called}()")
        if called.endswith("setitimer") and node.args and "ITIMER_REAL" in _dotted(node.args[0]):
            found.append(f"{where}: a real-time (wall-clock) interval timer")
        waits = called.rpartition(".")[2] in _WAITS and node.args
        if waits and _seconds(node.args[0], constants) is not None:
            found.append(f"{where}: {called}() with a positional timeout")
        for keyword in node.keywords:
            if keyword.arg == "deadline":
                if not (isinstance(keyword.value, ast.Constant) and keyword.value.value is None):
                    found.append(f"{where}: a hypothesis deadline (use deadline=None)")
            elif keyword.arg == "timeout":
                seconds = _seconds(keyword.value, constants)
                if name not in HANG_DETECTORS:
                    found.append(f"{where}: timeout= outside the listed hang detectors")
                elif seconds is None or seconds < MIN_HANG_SECONDS:
                    found.append(f"{where}: timeout={seconds} is under {MIN_HANG_SECONDS:g} s")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def test_no_test_bounds_the_wall_clock() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(TESTS).as_posix()
        found += wall_clock_bounds(path.read_text(encoding="utf-8"), name)
    assert found == [], "\n".join(found)


def test_hang_detectors_are_still_there() -> None:
    """The allowlist names files that exist and still use ``timeout=`` (no stale entries)."""
    for name in HANG_DETECTORS:
        assert "timeout=" in (TESTS / name).read_text(encoding="utf-8"), name


def test_hypothesis_has_no_deadline() -> None:
    """conftest.py loads a profile without deadline, so a bare @given has none either."""
    assert settings.default.deadline is None


def test_the_scan_finds_each_kind_of_bound() -> None:
    source = """
import signal, time
from time import monotonic
LIMIT = 5
start = time.perf_counter()
signal.alarm(3)
signal.setitimer(signal.ITIMER_REAL, 2.0)
signal.setitimer(signal.ITIMER_PROF, 2.0)
thread.join(5)
thread.join(timeout=LIMIT)
proc.communicate(timeout=600)
settings(deadline=200)
settings(deadline=None)
", ".join(parts)
cpu = time.process_time()
"""
    found = wall_clock_bounds(source, "test_io.py")
    assert [line.split(": ", 1)[1] for line in found] == [
        "imports time.monotonic",
        "calls time.perf_counter()",
        "calls signal.alarm()",
        "a real-time (wall-clock) interval timer",
        "thread.join() with a positional timeout",
        "timeout=5.0 is under 60 s",
        "a hypothesis deadline (use deadline=None)",
    ]
    assert wall_clock_bounds("run(x, timeout=600)", "test_other.py") == [
        "test_other.py:1: timeout= outside the listed hang detectors"
    ]
