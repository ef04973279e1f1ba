"""Safe output (meshtune.io): symlinks, FIFOs, devices, stdout; `-o -` and `verify -` end to end."""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import stat
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshtune.catalog import load_model
from meshtune.cli import app
from meshtune.errors import PlanFileError, SpecError, printable
from meshtune.io import (
    MAX_INPUT_BYTES,
    check_writable,
    is_folder,
    path_mode,
    read_bytes,
    read_text,
    write_atomic,
    writes_stdout,
)

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
    """A reader of ``fifo``, open before this returns (a writer is refused while none is)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader now, without waiting for a writer
    os.set_blocking(fd, True)

    def read() -> None:
        waiting = select.poll()
        waiting.register(fd, select.POLLIN)
        waiting.poll()  # until the writer's first bytes (a FIFO never written has no EOF yet)
        with os.fdopen(fd, "rb") as handle:
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


# --------------------------------------------------------------------------- issue 20


def test_fifo_without_a_reader_is_refused_not_waited_for(tmp_path: Path) -> None:
    fifo = tmp_path / "nobody.fifo"
    os.mkfifo(fifo)
    with pytest.raises(PlanFileError, match=r"nobody\.fifo: cannot write: no process is reading"):
        write_atomic(fifo, "x")
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_racing_writers_of_a_new_path_exactly_one_wins(tmp_path: Path) -> None:
    writers, rounds = 4, 25
    for round_ in range(rounds):
        dest = tmp_path / f"fresh{round_}.json"
        start = threading.Barrier(writers)
        outcomes: list[str] = []

        def write(
            text: str,
            dest: Path = dest,
            start: threading.Barrier = start,
            outcomes: list[str] = outcomes,
        ) -> None:
            start.wait()
            try:
                write_atomic(dest, text)
                outcomes.append("wrote")
            except PlanFileError as exc:
                outcomes.append(str(exc))

        threads = [
            threading.Thread(target=write, args=(f"writer {i}\n" * 1000,)) for i in range(writers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert outcomes.count("wrote") == 1, outcomes
        assert outcomes.count(f"{dest}: already exists; pass --force to overwrite") == writers - 1
        text = dest.read_text(encoding="utf-8")
        assert text in {f"writer {i}\n" * 1000 for i in range(writers)}  # one writer's, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"fresh{r}.json" for r in range(rounds)
    )  # no temporary file left behind


def test_force_replaces_and_a_refusal_leaves_the_old_file(tmp_path: Path) -> None:
    dest = tmp_path / "plan.json"
    write_atomic(dest, "one")
    with pytest.raises(PlanFileError, match="already exists"):
        write_atomic(dest, "two")
    assert dest.read_text(encoding="utf-8") == "one"
    write_atomic(dest, "three", force=True)
    assert dest.read_text(encoding="utf-8") == "three"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_dev_stdout_is_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    assert writes_stdout(Path("/dev/stdout")) and writes_stdout(Path("-"))
    assert not writes_stdout(Path("/dev/stdout2"))
    check_writable(Path("/dev/stdout"))
    write_atomic(Path("/dev/stdout"), "through stdout\n")
    assert capfd.readouterr().out == "through stdout\n"


def test_reading_stops_at_the_cap(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    with big.open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk used
    with pytest.raises(SpecError, match=r"big\.toml: larger than the 64 MiB input limit"):
        load_model(big)
    exact = tmp_path / "exact.bin"
    exact.write_bytes(b"x" * 1000)
    assert read_bytes(exact, "x", limit=1000) == b"x" * 1000
    with pytest.raises(PlanFileError, match="larger than the 999 bytes input limit"):
        read_bytes(exact, "x", limit=999)


def test_reading_refuses_every_special_file_but_a_fifo_at_once(tmp_path: Path) -> None:
    """Devices (endless like /dev/zero, silent like /dev/null, blocking like /dev/kmsg) and
    sockets, given directly or behind links, are refused before they are opened."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        (tmp_path / "to-null").symlink_to("/dev/null")
        (tmp_path / "to-link").symlink_to(tmp_path / "to-null")
        (tmp_path / "to-sock").symlink_to(tmp_path / "sock")
        refused = {
            "/dev/zero": "a character device",
            str(tmp_path / "to-link"): "a character device",
            str(tmp_path / "to-sock"): "a socket",
        }
        for path, kind in refused.items():  # refused by its kind: /dev/zero is never read
            with pytest.raises(SpecError) as info:
                read_bytes(Path(path), "a TOML file", SpecError)
            assert str(info.value) == (
                f"{path}: {kind}, not a regular file or FIFO; expected a TOML file"
            )
    finally:
        sock.close()


def test_a_file_that_would_block_the_read_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/proc/kmsg is a regular file whose read waits for the kernel: it is read without
    blocking, and "nothing yet" is a refusal (os.read stands in for it here)."""
    path = tmp_path / "kmsg"
    path.write_bytes(b"")

    def would_block(fd: int, size: int) -> bytes:
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "read", would_block)
    with pytest.raises(PlanFileError, match=r"kmsg: has nothing to read without waiting"):
        read_text(path)


def test_a_never_ending_fifo_stops_at_the_cap(tmp_path: Path) -> None:
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)

    def write_forever() -> None:
        try:
            with fifo.open("wb") as handle:
                while True:
                    handle.write(b"{" * 65536)
        except BrokenPipeError:  # the reader stopped at its cap
            pass

    writer = threading.Thread(target=write_forever, daemon=True)
    writer.start()
    with pytest.raises(PlanFileError, match=r"endless: larger than the 1 MiB input limit"):
        read_bytes(fifo, "a plan JSON file", limit=2**20)
    writer.join()


def test_an_input_fifo_nothing_writes_to_is_refused_after_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "silent"
    os.mkfifo(fifo)
    monkeypatch.setenv("MESHTUNE_FIFO_WAIT_S", "0.2")
    with pytest.raises(PlanFileError, match=r"silent: a FIFO nothing wrote to in 0\.2 s"):
        read_text(fifo)
    # A writer that comes (here before the read, as a shell's `meshtune verify p & gen > p`
    # may) is read whole.
    writer = threading.Thread(target=lambda: fifo.write_bytes(b'{"a": 1}'), daemon=True)
    writer.start()
    monkeypatch.setenv("MESHTUNE_FIFO_WAIT_S", "600")
    assert read_text(fifo) == '{"a": 1}'
    writer.join()


def test_a_fifo_whose_writer_stalls_is_refused_after_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "stalled"
    os.mkfifo(fifo)
    monkeypatch.setenv("MESHTUNE_FIFO_WAIT_S", "0.3")
    done = threading.Event()

    def write_then_stall() -> None:
        with fifo.open("wb") as handle:
            handle.write(b'{"a": ')
            handle.flush()
            done.wait()  # set once the reader gave up

    writer = threading.Thread(target=write_then_stall, daemon=True)
    writer.start()
    try:
        silent = r"stalled: a FIFO whose writer went silent for 0\.3 s"
        with pytest.raises(PlanFileError, match=silent):
            read_text(fifo)
    finally:
        done.set()
        writer.join()


def test_reading_a_folder_or_an_impossible_name_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(PlanFileError, match="is a folder; expected a plan JSON file"):
        read_text(tmp_path)
    with pytest.raises(PlanFileError, match="cannot read: File name too long"):
        read_text(tmp_path / ("x" * 300))
    with pytest.raises(PlanFileError, match="the name holds a NUL character"):
        read_text(Path("nul\0name"))
    assert path_mode(tmp_path / "missing", PlanFileError) is None
    with pytest.raises(SpecError, match="File name too long"):
        path_mode(tmp_path / ("x" * 300), SpecError)
    assert not is_folder(tmp_path / ("x" * 300)) and is_folder(tmp_path)


def test_printable_escapes_what_a_terminal_or_encoder_would_choke_on() -> None:
    hostile = "a\nb\x00c\x1b[31md\ud800e ×"
    assert printable(hostile) == "a\\nb\\x00c\\x1b[31md\\ud800e ×"
    assert str(SpecError(hostile)) == printable(hostile)
    printable(hostile).encode("utf-8")  # does not raise
