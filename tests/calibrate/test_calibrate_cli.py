"""`meshtune calibrate` through typer's CliRunner: the user's path, and every bad input.

Bad input means exit code 2, exactly one `meshtune: error:` line on stderr and no traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from logsynth import AG, RINGS, RS, SR, TRUE, close, gemm_csv, nccl_log
from typer.testing import CliRunner, Result

from meshtune.calibrate import parse_logs
from meshtune.catalog import load_profile
from meshtune.cli import app
from meshtune.hardware.calibration import MeasuredOp
from meshtune.io import MAX_INPUT_BYTES

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, ["calibrate", *map(str, args)])


def bad_input(result: Result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("meshtune: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nccl-tests logs of all_gather, reduce_scatter and sendrecv on rings of 2, 4 and 8."""
    folder = tmp_path_factory.mktemp("nccl")
    rng = np.random.default_rng(7)
    names = {AG: "all_gather_perf", RS: "reduce_scatter_perf", SR: "sendrecv_perf"}
    for op, name in names.items():
        for ranks in RINGS:
            (folder / f"{name}_{ranks}.log").write_text(nccl_log(op, ranks, rng), encoding="utf-8")
    (folder / "gemm.csv").write_text(gemm_csv(rng), encoding="utf-8")
    return folder


def test_logs_to_profile_to_plan(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "lab8.toml"
    result = invoke(logs, "--axis-map", "both", "--peak-flops", "312e12", "-o", out)
    assert result.exit_code == 0, result.output
    assert "Communication fit" in result.stdout and f"wrote {out}" in result.stdout
    # send_recv is always one shift: its confounding is the only warning
    warnings = result.stderr.splitlines()
    assert warnings and all(
        w.startswith("meshtune: warning: send_recv axis 0: t_sync and t_launch") for w in warnings
    )
    profile = load_profile(out)
    assert profile.name == "lab8" and profile.bytes_per_element == 2  # from the bf16 GeMMs
    for op in (AG, RS):
        t_launch, t_sync, bw = TRUE[op]
        for axis in (0, 1):
            link = profile.link(op, axis)
            assert close(link.bw_bytes_per_s, bw, 0.03)
            assert close(link.t_launch_s, t_launch, 0.10) and close(link.t_sync_s, t_sync, 0.10)
    args = ["plan", "gpt3", "--chips", "16", "--profile", str(out), "--json", "--mesh-only"]
    plan = runner.invoke(app, args)
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout)["mesh"]


def test_refuses_to_overwrite_without_force(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.toml"
    out.write_text("keep me", encoding="utf-8")
    args = (logs, "--axis-map", "both", "--base", "tpuv4", "-o", out)
    bad_input(invoke(*args), f"{out}: already exists; pass --force to overwrite")
    assert out.read_text(encoding="utf-8") == "keep me"
    assert invoke(*args, "--force").exit_code == 0
    assert load_profile(out).calibration is not None


def test_json_output(logs: Path) -> None:
    result = invoke(
        logs / "all_gather_perf_4.log",
        logs / "all_gather_perf_8.log",
        "--axis-map",
        "all_gather=0",
        "--base",
        "tpuv4",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (fit,) = data["fits"]
    assert fit["op"] == "all_gather" and fit["ring_sizes"] == [4, 8] and not fit["confounded"]
    residuals = fit["point_residuals"]
    assert len(residuals) == 34 and {"rel_error", "in_fit", "line"} <= set(residuals[0])
    assert fit["points"] == sum(r["in_fit"] for r in residuals)
    assert data["profile"]["name"] == "calibrated" and data["missing"] == []
    assert data["origins"]["reduce_scatter.axis0"] == {
        "kind": "base",
        "detail": "from base profile 'tpuv4'",
    }


def test_confounding_warning_on_one_ring(logs: Path) -> None:
    result = invoke(logs / "reduce_scatter_perf_8.log", "--axis-map", "0", "--base", "tpuv4")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(
        "meshtune: warning: reduce_scatter axis 0: t_sync and t_launch are confounded "
        "(one ring size only, P = 8)"
    )
    assert "confounded" in result.stdout


def test_template() -> None:
    result = invoke("--template")
    assert result.exit_code == 0
    assert "op,axis,ranks,bytes,seconds,repeats" in result.stdout
    assert "m,n,k,dtype,seconds" in result.stdout


def test_plot(logs: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the optional 'plot' extra is not installed")
    png = tmp_path / "residuals.png"
    result = invoke(
        logs / "all_gather_perf_4.log",
        logs / "all_gather_perf_16.log",
        "--axis-map",
        "both",
        "--base",
        "tpuv4",
        "--plot",
        png,
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib(
    logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = invoke(logs, "--axis-map", "both", "--base", "tpuv4", "--plot", tmp_path / "r.png")
    bad_input(result, "--plot needs matplotlib: pip install 'meshtune[plot]'")


SAMPLES = Path(__file__).parent / "samples"
NCCL_TWO_RANKS = (SAMPLES / "nccl_all_gather_2ranks.log").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("t1", "needles"),
    [
        ("nan", ["all_gather.log:6: time is NaN"]),
        ("-20.5", ["all_gather.log:6: time is negative"]),
        ("2O.50", ["all_gather.log:6: time '2O.50' is not a number (--strict)"]),
    ],
)
def test_bad_times(tmp_path: Path, t1: str, needles: list[str]) -> None:
    path = tmp_path / "all_gather.log"
    path.write_text(NCCL_TWO_RANKS.replace(" 20.50 ", f" {t1} ", 1), encoding="utf-8")
    bad_input(invoke(path, "--axis-map", "both", "--base", "tpuv4", "--strict"), *needles)


def test_unparseable_line_is_skipped_with_a_count(tmp_path: Path) -> None:
    path = tmp_path / "all_gather.log"
    path.write_text(NCCL_TWO_RANKS.replace(" 20.50 ", " 2O.50 ", 1), encoding="utf-8")
    result = invoke(path, "--axis-map", "both", "--base", "tpuv4")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[:2] == [
        f"meshtune: warning: skipped {path}:6: time '2O.50' is not a number",
        "meshtune: warning: 1 unparseable line(s) skipped",
    ]


def test_mixed_units(tmp_path: Path) -> None:
    path = tmp_path / "bench.out"
    path.write_text(
        "Running benchmark on (2, 2) devices.\nAllgather_x: dim=0\n"
        "Size: 8KB,\t Time: 0.0200+-0.0010ms\nSize: 16KB,\t Time: 21.5+-1.0us\n",
        encoding="utf-8",
    )
    bad_input(invoke(path, "--base", "tpuv4"), f"{path}:4: mixed time units (ms, us)")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "empty file"),
        ("lorem ipsum\n", "unrecognised format"),
        (
            "# Collective test starting: broadcast_perf\n# nThread 1 nGpus 8 minBytes 8\n",
            "benchmark(s) broadcast are not ones the cost model uses",
        ),
    ],
)
def test_unusable_files_are_named(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "x.log"
    path.write_text(content, encoding="utf-8")
    bad_input(invoke(path, "--base", "tpuv4"), str(path), needle)


def test_not_text(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"\xff\xfe\x00garbage")
    bad_input(invoke(path), f"{path}: not UTF-8 text")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "no benchmark logs given"),
        (("missing.log",), "missing.log: no such file or folder"),
        (
            ("{ag}", "--axis-map", "all_gather=2"),
            "--axis-map 'all_gather=2': the axis must be 0, 1 or both",
        ),
        (("{ag}", "--ranks", "x=1"), "--ranks 'x=1': the ring size must be an integer >= 2"),
        (
            ("{ag}", "--op", "{ag}=broadcast"),
            "the op must be one of all_gather, reduce_scatter, send_recv, all_reduce, all_to_all",
        ),
        (("{ag}", "--min-bytes", "lots"), "--min-bytes 'lots'"),
        (("{ag}", "--axis-map", "0", "--base", "nope"), "unknown profile 'nope'"),
        (("{ag}", "-o", "{out}"), "writing a profile needs the chip's peak FLOP/s"),
        (
            ("{ag}", "--axis-map", "0", "--peak-flops", "312e12", "-o", "{out}"),
            "cannot write a profile, nothing gives: all_gather.axis1 (no logs measure it",
        ),
        (("{ag}", "--peak-flops", "inf", "-o", "{out}"), "--peak-flops inf: expected a positive"),
        (("{ag}", "--peak-flops", "-1"), "--peak-flops -1: expected a positive finite number"),
        (("{ag}", "--effective-flops", "nan"), "--effective-flops nan: expected a positive"),
        (("{ag}", "--slice-block", "0"), "--slice-block 0: expected an integer >= 1"),
        (
            ("{ag}", "--peak-flops", "1e12", "--effective-flops", "2e12"),
            "--effective-flops 2e+12 exceeds --peak-flops 1e+12",
        ),
        (("{ag}", "--format", "osu", "--axis-map", "0"), "no measurements"),
        (("{ag}", "--format", "xml"), "Invalid value for '--format'"),
        (("{ag}", "--template"), "--template prints the format and takes no logs"),
    ],
)
def test_bad_options(logs: Path, tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    ag, out = str(logs / "all_gather_perf_4.log"), str(tmp_path / "p.toml")
    bad_input(invoke(*(a.format(ag=ag, out=out) for a in args)), needle)
    assert not Path(out).exists()


def test_options_are_checked_before_any_log_is_read(tmp_path: Path) -> None:
    # the log is unreadable, yet the bad option is what is reported
    bad_input(invoke(tmp_path / "missing.log", "--peak-flops", "-1"), "--peak-flops -1")


def test_a_tiny_time_is_dropped_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "all_gather.log"
    path.write_text(NCCL_TWO_RANKS.replace(" 20.50 ", " 1e-300 ", 1), encoding="utf-8")
    result = invoke(path)
    assert result.exit_code == 0, result.output
    assert "LinAlgError" not in result.output and "LAPACK" not in result.output
    assert result.stderr.startswith(
        f"meshtune: warning: skipped {path}:6: time 1e-306 s is not a plausible time"  # 1e-300 µs
    )


def test_min_bytes_fixes_the_fit_range(logs: Path) -> None:
    files = (logs / "all_gather_perf_4.log", logs / "all_gather_perf_8.log")
    result = invoke(*files, "--axis-map", "0", "--base", "tpuv4", "--min-bytes", "1MiB", "--json")
    assert result.exit_code == 0, result.output
    (fit,) = json.loads(result.stdout)["fits"]
    assert fit["min_shard_bytes"] == 2**20 and not fit["cutoff_chosen"]
    assert fit["points"] == 2 * 10  # 1 MiB .. 512 MiB on 2 rings


def test_no_options_reports_every_log_and_what_a_profile_still_needs(logs: Path) -> None:
    result = invoke(logs)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(
        "meshtune: warning: 12 log(s) do not say which mesh axis they measured; each ring is "
        "used for both axes"
    )
    for op in ("all_gather", "reduce_scatter", "send_recv"):
        assert (
            f"{op} axis 0" in result.stdout and f"{op} axis 1 (= axis 0, one ring)" in result.stdout
        )
    assert "To write a profile (-o PATH), also give: peak_flops_per_s" in result.stdout
    assert "pass -o PATH" not in result.stdout


def test_no_options_on_a_folder_of_every_format(tmp_path: Path) -> None:
    """The README's `meshtune calibrate logs/`: every format in one folder, no option."""
    samples = Path(__file__).parent / "samples"
    for name in (  # one made-up cluster's logs, in every layout they may come in
        "nccl_all_reduce_mpi_tagged.log",
        "rccl_all_gather.csv",
        "rccl_reduce_scatter.json",
        "gemm_square_tflops.md",
        "nccl_sendrecv_tagged_output.log",
    ):
        (tmp_path / name).write_text((samples / name).read_text(encoding="utf-8"), "utf-8")
    (tmp_path / "NOTES.txt").write_text("ran on the new partition\n", encoding="utf-8")
    result = invoke(tmp_path, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert sorted(Path(f["path"]).name for f in data["files"]) == [
        "gemm_square_tflops.md",
        "nccl_all_reduce_mpi_tagged.log",
        "nccl_sendrecv_tagged_output.log",
        "rccl_all_gather.csv",
        "rccl_reduce_scatter.json",
    ]
    assert len(data["left_out"]) == 1 and "NOTES.txt: unrecognised format" in data["left_out"][0]
    fitted = {(f["op"], f["axis"]) for f in data["fits"]}
    assert fitted == {
        (op, axis)
        for op in ("all_gather", "reduce_scatter", "all_reduce", "send_recv")
        for axis in (0, 1)
    }
    assert data["compute"]["dtype"] == "bf16" and data["profile"] is None
    assert data["missing"] == ["peak_flops_per_s (the datasheet peak or a base profile)"]
    # with the one value no log measures, the same folder writes a profile
    out = tmp_path.parent / f"{tmp_path.name}-lab.toml"
    assert invoke(tmp_path, "--peak-flops", "400e12", "-o", out).exit_code == 0
    profile = load_profile(out)
    assert profile.gemm_efficiency is not None and profile.bytes_per_element == 2


# --------------------------------------------------------------------------- issue 20


def test_a_rank_line_with_a_huge_number_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "all_gather.log"
    huge = "9" * 5000  # more digits than int() converts
    path.write_text(NCCL_TWO_RANKS.replace("Rank  1 Group", f"Rank  {huge} Group"), "utf-8")
    digits = sys.get_int_max_str_digits()
    bad_input(invoke(path, "--base", "tpuv4"), f"{path}:3: a number of more than {digits} digits")


def test_a_csv_field_over_the_csv_module_limit_is_a_skipped_value(tmp_path: Path) -> None:
    path = tmp_path / "canonical.csv"
    rows = SAMPLES.joinpath("canonical.csv").read_text(encoding="utf-8").splitlines()
    huge = "abc" * 70_000  # the csv module's default field limit is 131072 characters
    path.write_text("\n".join([*rows, f"all_gather,0,4,{huge},1e-3,1"]) + "\n", "utf-8")
    parsed = parse_logs([path])  # no csv.Error: the field is read, then refused as a number
    assert [(s.line, s.reason[:12]) for s in parsed.skipped] == [(len(rows) + 1, "bytes 'abcab")]
    table = tmp_path / "table.csv"
    table.write_text(f"size_bytes,time_us\n1024,{huge}\n2048,5.0\n", encoding="utf-8")
    parse_logs([table], ranks={"*": 2}, ops={"*": MeasuredOp.ALL_GATHER})  # no csv.Error


def test_folder_entries_that_cannot_be_read_are_left_out_with_the_reason(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "all_gather.log").write_text(NCCL_TWO_RANKS, encoding="utf-8")
    (folder / "broken.log").symlink_to(folder / "nowhere")
    (folder / "loop.log").symlink_to(folder / "loop.log")
    os.mkfifo(folder / "pipe.log")  # reading it would wait for a writer forever
    result = invoke(folder, "--axis-map", "both", "--base", "tpuv4")
    assert result.exit_code == 0, result.output
    assert f"left out {folder / 'broken.log'}: a broken symbolic link" in result.output
    assert f"left out {folder / 'loop.log'}: cannot read: Too many levels" in result.output
    assert f"left out {folder / 'pipe.log'}: not a regular file" in result.output


def test_a_tree_too_large_for_logs_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`calibrate /` walked the whole file system and said "No such file or directory" (an
    entry of /proc that vanished): a tree over the cap is refused, naming what is wrong."""
    import meshtune.calibrate.formats.detect as detect

    monkeypatch.setattr(detect, "MAX_FOLDER_ENTRIES", 5)
    (tmp_path / "logs").mkdir()
    for index in range(6):
        (tmp_path / "logs" / f"{index}.log").write_text(NCCL_TWO_RANKS, encoding="utf-8")
    bad_input(
        invoke(tmp_path),
        f"{tmp_path}: more than 5 files and folders under it, not a folder of benchmark logs",
    )
    monkeypatch.setattr(detect, "MAX_FOLDER_ENTRIES", 7)
    found = detect._folder_entries(tmp_path)
    assert found == [tmp_path / "logs" / f"{index}.log" for index in range(6)]


def test_a_log_over_the_cap_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    with path.open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)
    bad_input(invoke(path), f"{path}: larger than the 64 MiB input limit; expected a benchmark log")


def test_an_output_that_fails_is_the_only_line(tmp_path: Path) -> None:
    path = tmp_path / "all_gather.log"
    path.write_text(NCCL_TWO_RANKS, encoding="utf-8")  # one ring size: warnings follow a fit
    result = invoke(path, "--axis-map", "both", "--base", "tpuv4", "-o", "/dev/full")
    bad_input(result, "/dev/full: cannot write: No space left on device")
