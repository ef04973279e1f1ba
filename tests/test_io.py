"""Safe output (meshtune.io): symlinks, FIFOs, devices, stdout; `-o -` and `verify -` end to end."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshtune.cli import app
from meshtune.errors import PlanFileError
from meshtune.io import check_writable, write_atomic

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

PLAN_FILE = Path(__file__).resolve().parents[1] / "plans" / "gpt3-256.json"


def test_symlink_is_written_through_to_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(PlanFileError, match=r"link\.json: already exists"):
        write_atomic(link, "new")
    write_atomic(link, "new", force=True)
    assert link.is_symlink() and link.resolve() == target
    assert target.read_text(encoding="utf-8") == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "made.json")
    write_atomic(link, "x")
    assert link.is_symlink()
    assert (tmp_path / "made.json").read_text(encoding="utf-8") == "x"


def test_symlink_loop_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(PlanFileError, match=r"a: cannot write"):
        write_atomic(a, "x", force=True)
    assert a.is_symlink() and b.is_symlink()


def _drain(fifo: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with fifo.open("rb") as handle:
            into.append(handle.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_fifo_is_written_through_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = _drain(fifo, received)
    write_atomic(fifo, "through the pipe\n")  # no force needed: nothing is overwritten
    reader.join(timeout=600)  # a hang detector only
    assert received == [b"through the pipe\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def test_plan_output_onto_a_fifo(tmp_path: Path, runner: CliRunner) -> None:
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = _drain(fifo, received)
    result = runner.invoke(app, ["plan", "gpt3", "-n", "16", "--mesh-only", "-o", str(fifo)])
    reader.join(timeout=600)  # a hang detector only
    assert result.exit_code == 0, result.output
    assert json.loads(received[0])["inputs"]["chips"] == 16
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_folder_and_socket_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanFileError, match=r"cannot write: it is a folder"):
        check_writable(tmp_path, force=True)
    import socket

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(PlanFileError, match=r"not a regular file, character device or FIFO"):
            write_atomic(sock_path, "x", force=True)
    assert stat.S_ISSOCK(sock_path.stat().st_mode)


def test_unwritable_names_are_one_error(tmp_path: Path) -> None:
    with pytest.raises(PlanFileError, match=r"cannot write"):
        write_atomic(tmp_path / ("x" * 5000), "x")
    with pytest.raises(PlanFileError, match=r"cannot write"):
        write_atomic(Path("bad\0name"), "x")


def test_dash_is_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    check_writable(Path("-"))
    write_atomic(Path("-"), "to stdout\n")
    assert capfd.readouterr().out == "to stdout\n"


def test_plan_dash_o_writes_the_plan_json_to_stdout(runner: CliRunner) -> None:
    result = runner.invoke(app, ["plan", "gpt3", "-n", "256", "--mesh-only", "-o", "-"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["mesh"] == {"rows": 32, "cols": 8, "depth": 1}
    both = runner.invoke(app, ["plan", "gpt3", "-n", "256", "--mesh-only", "-o", "-", "--json"])
    assert both.stdout == result.stdout  # printed once


def test_verify_dash_reads_stdin(runner: CliRunner) -> None:
    text = PLAN_FILE.read_text(encoding="utf-8")
    result = runner.invoke(app, ["verify", "-", "--json"], input=text)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True


def test_verify_dash_with_bad_stdin_names_stdin(runner: CliRunner) -> None:
    result = runner.invoke(app, ["verify", "-"], input=b"\xff\xfe not json")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "meshtune: error: <stdin>: not UTF-8 text (byte 0); expected a plan JSON file"
    ]


def test_verify_of_a_folder_says_folder(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["verify", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"meshtune: error: {tmp_path}: is a folder; expected a plan JSON file\n"
    )


NCCL_LOG = Path(__file__).resolve().parent / "calibrate" / "samples" / "nccl_all_gather_2ranks.log"


def test_calibrate_dash_o_writes_the_profile_toml_to_stdout(runner: CliRunner) -> None:
    args = ["calibrate", str(NCCL_LOG), "--axis-map", "both", "--base", "tpuv4", "-o", "-"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    profile = tomllib.loads(result.stdout)  # only the TOML: no report, no "wrote -"
    assert profile["all_gather"]["axis0"]["bw_bytes_per_s"] > 0
    both = runner.invoke(app, [*args, "--json"])
    assert both.exit_code == 2
    assert both.stderr == "meshtune: error: -o - and --json both write to stdout; choose one\n"
