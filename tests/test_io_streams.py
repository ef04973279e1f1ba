"""The standard streams of a real ``python -m meshtune`` process (issue 20): closed stdout and
stdin, a pipe whose reader has gone, ``-o /dev/stdout`` onto a pipe, a FIFO nobody reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLAN_FILE = Path(__file__).resolve().parents[1] / "plans" / "gpt3-256.json"
MESHTUNE = [sys.executable, "-m", "meshtune"]
PLAN = [*MESHTUNE, "plan", "gpt3", "--chips", "16", "--mesh-only"]


def _run_with(redirect: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``args`` run by the shell with ``redirect`` (``>&-``) applied to the process."""
    script = f'exec "$@" {redirect}'
    return subprocess.run(
        ["sh", "-c", script, "sh", *args], capture_output=True, text=True, check=False
    )


def test_closed_stdout_is_one_line_exit_2() -> None:
    for extra in ((), ("--json",), ("-o", "-")):
        got = _run_with(">&-", *PLAN, *extra)
        assert got.returncode == 2, got.stderr
        assert got.stderr == (
            "meshtune: error: standard output is closed; redirect it to a file or /dev/null\n"
        )


def test_closed_stdin_is_one_line_exit_2() -> None:
    got = _run_with("<&-", *MESHTUNE, "verify", "-")
    assert got.returncode == 2
    assert got.stderr == "meshtune: error: <stdin>: cannot read: standard input is closed\n"


def _into_a_gone_reader(*args: str) -> tuple[int, bytes]:
    """Run ``args`` with stdout a pipe whose reading end is closed before the process starts."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(args, stdout=write_end, stderr=subprocess.PIPE, check=False)
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


def test_a_reader_that_has_gone_ends_the_command_quietly_with_0() -> None:
    for extra in (("--json",), ("-o", "-"), ()):
        code, stderr = _into_a_gone_reader(*PLAN, *extra)
        assert (code, stderr) == (0, b""), extra
    code, stderr = _into_a_gone_reader(*MESHTUNE, "export", str(PLAN_FILE), "-o", "-")
    assert (code, stderr) == (0, b"")


def test_dev_stdout_onto_a_pipe_writes_the_data_only() -> None:
    got = subprocess.run([*PLAN, "-o", "/dev/stdout"], capture_output=True, text=True, check=False)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["inputs"]["chips"] == 16  # no report, no "wrote"
    assert got.stderr == ""


def test_export_and_timeline_dash_o_print_only_the_data() -> None:
    got = subprocess.run(
        [*MESHTUNE, "export", str(PLAN_FILE), "-o", "-"], capture_output=True, text=True
    )
    assert got.returncode == 0 and "wrote" not in got.stdout
    compile(got.stdout, "exported.py", "exec")  # the module alone
    got = subprocess.run(
        [*MESHTUNE, "timeline", str(PLAN_FILE), "-o", "-"], capture_output=True, text=True
    )
    assert got.returncode == 0, got.stderr
    assert "traceEvents" in json.loads(got.stdout)  # the trace alone: no drawing, no "wrote"


def test_a_fifo_nobody_reads_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = subprocess.run([*PLAN, "-o", str(fifo)], capture_output=True, text=True, check=False)
    assert got.returncode == 2
    assert got.stderr == (
        f"meshtune: error: {fifo}: cannot write: no process is reading it (start the FIFO's "
        "reader first)\n"
    )


def test_a_name_no_encoding_can_print_is_printed_escaped(tmp_path: Path) -> None:
    plan = os.fsdecode(os.fsencode(tmp_path) + b"/\xff.json")  # "\udcff" once decoded
    Path(plan).write_bytes(PLAN_FILE.read_bytes())
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # strict: a surrogate cannot be encoded
    got = subprocess.run(
        [*MESHTUNE, "timeline", plan], capture_output=True, text=True, env=env, check=False
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith(f"{tmp_path}/\\udcff.json: 32x8 mesh")
    out = os.fsdecode(os.fsencode(tmp_path) + b"/\xfe.json")
    got = subprocess.run([*PLAN, "-o", out], capture_output=True, text=True, env=env, check=False)
    assert got.returncode == 0, got.stderr
    assert got.stdout.rstrip().endswith(f"wrote {tmp_path}/\\udcfe.json")
