"""Each parser on realistic samples of its format.

The samples in ``samples/`` were written for these tests, following each tool's documented
layout; the numbers are invented:

- ``nccl_all_gather_2x2_srun.log``: current nccl-tests layout, two nodes × 2 GPUs under
  ``srun -l`` (every line prefixed ``0: ``), ``nGpus 1`` per process, NCCL INFO chatter.
- ``nccl_all_gather_old_layout.log``: old layout (no redop/root, ``error`` column of N/A),
  repeated zero-size rows, no command line.
- ``nccl_sendrecv_tagged_output.log``: OpenMPI ``--tag-output`` prefixes, the rank count only
  on the ``-g 4`` command line.
- ``osu_allgather_full.txt``: ``osu_allgather -f`` (average, min, max, iterations).
- ``meshslice_bench_2x4.out``: the artifact's BenchCollectives2D on a 2 × 4 mesh.
- ``canonical.csv``: the canonical format with comments and an empty axis.
- ``nccl_all_reduce_mpi_tagged.log``: ``all_reduce_perf_mpi`` under ``mpirun --tag-output``,
  with shell trace lines before, a stderr NCCL INFO line inside and a shell line after.
- ``osu_allreduce_sbatch.txt``: ``osu_allreduce`` in a SLURM job script: the rank count only in
  ``#SBATCH --nodes`` × ``--ntasks-per-node``.
- ``rccl_all_gather.csv`` / ``rccl_reduce_scatter.json``: rccl-tests ``--output_format`` style
  result files (in-place rows too, a config block in the JSON).
- ``tpu_all_gather_bandwidth.md``: a Markdown report of a JAX microbenchmark: prose, a heading
  naming the op, a table of matrix sizes in MiB and achieved bandwidth only, a row that failed.
- ``gemm_square_tflops.md``: a Markdown table of square GeMM sizes and TFLOP/s.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from meshtune.calibrate import LogFormat, ParseOptions, UnusableFileError, detect_format, parse_logs
from meshtune.calibrate.formats import artifact, canonical, gemm, nccl, osu, table
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp

AG, RS, SR = MeasuredOp.ALL_GATHER, MeasuredOp.REDUCE_SCATTER, MeasuredOp.SEND_RECV
AR = MeasuredOp.ALL_REDUCE
SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def raises(message: str) -> pytest.RaisesContext[LogFormatError]:
    return pytest.raises(LogFormatError, match=re.escape(message))


NCCL_MULTINODE = sample("nccl_all_gather_2x2_srun.log")
NCCL_OLD = sample("nccl_all_gather_old_layout.log")
NCCL_SENDRECV = sample("nccl_sendrecv_tagged_output.log")
OSU_ALLGATHER = sample("osu_allgather_full.txt")
ARTIFACT = sample("meshslice_bench_2x4.out")
CANONICAL = sample("canonical.csv")
NCCL_ALL_REDUCE = sample("nccl_all_reduce_mpi_tagged.log")
OSU_ALLREDUCE = sample("osu_allreduce_sbatch.txt")
RCCL_CSV = sample("rccl_all_gather.csv")
RCCL_JSON = sample("rccl_reduce_scatter.json")
TPU_MARKDOWN = sample("tpu_all_gather_bandwidth.md")
GEMM_MARKDOWN = sample("gemm_square_tflops.md")


def test_nccl_multinode_srun_prefixed() -> None:
    log = nccl.parse("runs/ag.log", NCCL_MULTINODE)
    assert log.format is LogFormat.NCCL and not log.skipped
    first, last = log.measurements[0], log.measurements[-1]
    assert {m.op for m in log.measurements} == {AG}
    assert {m.ranks for m in log.measurements} == {4}  # 4 'Rank' lines, though nGpus says 1
    assert first.shard_bytes == 1048576 / 4  # size is the gathered total: P × shard
    assert first.seconds == pytest.approx(61.20e-6)  # out-of-place time, µs → s
    assert last.shard_bytes == 8388608 / 4 and last.line == 18
    assert first.axis is None


def test_nccl_old_layout_zero_rows() -> None:
    log = nccl.parse("bench/nccl_allgather.log", NCCL_OLD)
    assert [m.shard_bytes for m in log.measurements] == [65536, 131072, 262144]
    assert log.measurements[1].seconds == pytest.approx(33.10e-6)
    assert log.notes == ("bench/nccl_allgather.log: 2 zero-byte rows ignored",)
    assert {m.ranks for m in log.measurements} == {4}


def test_nccl_sendrecv_ranks_from_command_line() -> None:
    log = nccl.parse("sr.txt", NCCL_SENDRECV)
    assert {(m.op, m.ranks) for m in log.measurements} == {(SR, 4)}
    assert log.measurements[0].shard_bytes == 67108864  # sendrecv: size is the message
    assert log.measurements[2].seconds == pytest.approx(3098.7e-6)


def test_nccl_reduce_scatter_converts_total_to_output_shard() -> None:
    text = NCCL_MULTINODE.replace("all_gather_perf", "reduce_scatter_perf")
    log = nccl.parse("x.log", text.replace(" none ", "  sum "))
    assert {m.op for m in log.measurements} == {RS}
    assert log.measurements[0].shard_bytes == 1048576 / 4


def test_nccl_split_groups_count_one_group() -> None:
    text = NCCL_MULTINODE.replace("Rank  2 Group  0", "Rank  2 Group  1")
    text = text.replace("Rank  3 Group  0", "Rank  3 Group  1")
    # two groups of 2: P = 2, but this sample's busbw/algbw = 0.75 is a 4-rank all-gather
    with raises("busbw/algbw = 0.750, but all_gather on 2 ranks gives 0.500"):
        nccl.parse("split.log", text)


def test_nccl_op_from_file_name_or_option() -> None:
    with raises("pass --op run7.log=all_gather|reduce_scatter|send_recv"):
        nccl.parse("run7.log", NCCL_OLD)  # no command line, no op in the name
    assert {m.op for m in nccl.parse("run7.log", NCCL_OLD, ParseOptions(op=AG)).measurements} == {
        AG
    }


def test_nccl_all_reduce_mpi_build_with_tagged_output_and_noise() -> None:
    log = nccl.parse("ar.log", NCCL_ALL_REDUCE)
    assert not log.skipped
    assert [(m.op, m.ranks, m.line) for m in log.measurements] == [
        (AR, 4, line) for line in (15, 16, 17, 18)
    ]
    # size is the reduced buffer: P shards, each reduce-scattered then all-gathered
    assert [m.shard_bytes for m in log.measurements] == [2**20 / 4, 2**21 / 4, 2**22 / 4, 2**23 / 4]
    assert [m.seconds for m in log.measurements] == pytest.approx([40e-6, 60e-6, 100e-6, 180e-6])


def test_nccl_busbw_ratio_catches_a_misnamed_all_reduce() -> None:
    text = NCCL_OLD  # named all_gather below, but busbw = 2(P-1)/P · algbw: an all-reduce
    for before, after in (("12.00    9.00", "12.00   18.00"), ("15.84   11.88", "15.84   23.76")):
        text = text.replace(before, after)
    text = text.replace("18.85   14.14", "18.85   28.28")
    with raises(
        "busbw/algbw = 1.500, but all_gather on 4 ranks gives 0.750 (it is that of all_reduce)"
    ):
        nccl.parse("nccl_allgather.log", text)


def test_nccl_bad_row_is_skipped_or_strict() -> None:
    text = NCCL_OLD.replace("   float    33.10", "   float    3x.10")
    log = nccl.parse("v.log", text, ParseOptions(op=AG))
    assert [str(s) for s in log.skipped] == ["v.log:15: time '3x.10' is not a number"]
    assert len(log.measurements) == 2
    with raises("v.log:15: time '3x.10' is not a number (--strict)"):
        nccl.parse("v.log", text, ParseOptions(op=AG, strict=True))


@pytest.mark.parametrize(
    ("value", "message"),
    [("nan", "time is NaN"), ("-21.84", "time is negative"), ("0.00", "time is zero")],
)
def test_nccl_impossible_times_are_errors(value: str, message: str) -> None:
    text = NCCL_OLD.replace("   float    21.84", f"   float    {value}")
    with raises(f"x.log:14: {message}"):
        nccl.parse("x.log", text, ParseOptions(op=AG))


def test_nccl_mixed_units_are_refused() -> None:
    second = NCCL_OLD.replace(
        "(us)  (GB/s)  (GB/s)            (us)", "(ms)  (GB/s)  (GB/s)            (ms)"
    )
    with raises("mixed time units (ms, us)"):
        nccl.parse("x.log", NCCL_OLD + second, ParseOptions(op=AG))


def test_osu_allgather_full_columns() -> None:
    launch = "mpirun -np 8 --map-by node ./osu_allgather -f\n"
    log = osu.parse("osu_ag.txt", launch + OSU_ALLGATHER)
    got = [(m.op, m.ranks, m.shard_bytes) for m in log.measurements]
    assert got == [(AG, 8, 1024), (AG, 8, 2048), (AG, 8, 4096)]  # size is each rank's part
    assert log.measurements[2].seconds == pytest.approx(13.90e-6)  # the Avg column


def test_osu_reduce_scatter_size_is_the_total() -> None:
    log = osu.parse(
        "osu_rs.txt", OSU_ALLGATHER.replace("Allgather", "Reduce_scatter"), ParseOptions(ranks=4)
    )
    assert [m.shard_bytes for m in log.measurements] == [256, 512, 1024]


def test_osu_latency_is_a_two_rank_send_recv() -> None:
    text = (
        "# OSU MPI Latency Test v7.3\n# Size          Latency (us)\n"
        "0                       0.19\n8                       0.21\n65536                   5.60\n"
    )
    log = osu.parse("lat.txt", text)
    got = [(m.op, m.ranks, m.shard_bytes) for m in log.measurements]
    assert got == [(SR, 2, 8), (SR, 2, 65536)]


def test_osu_needs_a_rank_count() -> None:
    with raises("pass --ranks osu_ag.txt=P"):
        osu.parse("osu_ag.txt", OSU_ALLGATHER)


@pytest.mark.parametrize(
    "title",
    [
        "# OSU MPI Bandwidth Test v7.3",
        "# OSU MPI Non-blocking Allgather Latency Test v7.3",
        "# OSU MPI Broadcast Latency Test v7.3",
        "# OSU MPI_Put Latency Test v7.3",
    ],
)
def test_osu_unusable_benchmarks(title: str) -> None:
    with pytest.raises(UnusableFileError):
        osu.parse("x.txt", title + "\n# Size      Bandwidth (MB/s)\n1 0.5\n", ParseOptions(ranks=2))


def test_artifact_sections_axes_and_rings() -> None:
    log = artifact.parse("bench.out", ARTIFACT)
    got = [(m.op, m.axis, m.ranks, m.shard_bytes, m.seconds) for m in log.measurements]
    assert got[0] == (AG, 1, 4, 8192, pytest.approx(41.2e-6))  # y: the 4 chips of a mesh row
    assert got[2] == (AG, 0, 2, 8192, pytest.approx(25.5e-6))  # x: the 2 chips of a column
    assert got[3] == (SR, 0, 2, 1048576, pytest.approx(56.1e-6))


def test_artifact_mixed_units_and_stray_rows() -> None:
    with raises("bench.out:11: mixed time units (ms, us)"):
        artifact.parse("bench.out", ARTIFACT.replace("0.0437+-0.0020ms", "43.7+-2.0us"))
    text = "Running benchmark on (2, 4) devices.\nSize: 8KB,\t Time: 0.0412+-0.0031ms\n" + ARTIFACT
    log = artifact.parse("bench.out", text)
    assert [str(s) for s in log.skipped] == [
        "bench.out:2: size row before any Allgather_/ReduceScatter_/SendRecv_ line"
    ]


def test_canonical_csv() -> None:
    log = canonical.parse("m.csv", CANONICAL)
    assert [(m.op, m.axis, m.ranks, m.repeats) for m in log.measurements] == [
        (AG, 0, 4, 50),
        (AG, None, 8, 50),
        (RS, 1, 2, 1),
        (SR, 1, 4, 10),
    ]
    assert log.measurements[0].line == 3


def test_canonical_jsonl_and_bad_lines() -> None:
    text = (
        '{"op": "all_gather", "axis": 0, "ranks": 2, "bytes": 8192, "seconds": 2.1e-05}\n'
        '{"op": "all_gather", "ranks": 2, "bytes": 8192}\n'
        "not json\n"
        '{"op": "broadcast", "ranks": 2, "bytes": 8192, "seconds": 1e-05}\n'
    )
    log = canonical.parse("m.jsonl", text)
    assert len(log.measurements) == 1
    assert [s.line for s in log.skipped] == [2, 3, 4]
    assert "op 'broadcast' is not one of all_gather, reduce_scatter, send_recv" in str(
        log.skipped[2]
    )


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("all_gather,0,4,1048576,nan,1", "m.csv:3: seconds is NaN"),
        ("all_gather,0,4,1048576,-0.0001,1", "m.csv:3: seconds is negative"),
        ("all_gather,0,4,1048576,152us,1", "m.csv:3: seconds '152us' carries a unit"),
    ],
)
def test_canonical_rejects(row: str, message: str) -> None:
    with raises(message):
        canonical.parse("m.csv", "# c\nop,axis,ranks,bytes,seconds,repeats\n" + row + "\n")


def test_canonical_header_errors() -> None:
    with raises("m.csv:1: unknown columns ['secs']"):
        canonical.parse("m.csv", "op,axis,ranks,bytes,secs\nall_gather,0,2,1,1\n")
    with raises("missing columns ['seconds']"):
        canonical.parse("m.csv", "op,axis,ranks,bytes\nall_gather,0,2,1\n")


def test_gemm_seconds_and_tflops() -> None:
    text = "m,n,k,dtype,seconds,tflops\n8192,8192,8192,bf16,0.0041,\n4096,4096,4096,bf16,,150\n"
    log = gemm.parse("g.csv", text)
    assert log.gemms[0].flops == 2 * 8192**3
    assert log.gemms[1].seconds == pytest.approx(2 * 4096**3 / 150e12)
    both = gemm.parse("g.csv", "m,n,k,dtype,seconds,tflops\n1,1,1,bf16,1,1\n2,2,2,bf16,,\n")
    assert [g.seconds for g in both.gemms] == [1.0]  # a time wins over a throughput
    assert [str(s) for s in both.skipped] == ["g.csv:3: tflops '' is not a number"]


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        (NCCL_MULTINODE, LogFormat.NCCL),
        (NCCL_OLD, LogFormat.NCCL),
        (NCCL_SENDRECV, LogFormat.NCCL),
        (OSU_ALLGATHER, LogFormat.OSU),
        (ARTIFACT, LogFormat.ARTIFACT),
        (CANONICAL, LogFormat.CANONICAL),
        ('{"op": "send_recv", "ranks": 2, "bytes": 1, "seconds": 1}\n', LogFormat.CANONICAL),
        ("m,n,k,dtype,seconds\n1,2,3,bf16,1e-6\n", LogFormat.GEMM),
        (NCCL_ALL_REDUCE, LogFormat.NCCL),
        (OSU_ALLREDUCE, LogFormat.OSU),
        (RCCL_CSV, LogFormat.TABLE),
        (RCCL_JSON, LogFormat.TABLE),
        (TPU_MARKDOWN, LogFormat.TABLE),
        (GEMM_MARKDOWN, LogFormat.GEMM),
        ("# a readme\nnothing to see here\n", None),
    ],
)
def test_detect_format(text: str, fmt: LogFormat | None) -> None:
    assert detect_format(text) is fmt


def test_parse_logs_folder_leaves_out_unusable_files(tmp_path: Path) -> None:
    (tmp_path / "ag.log").write_text(NCCL_MULTINODE, encoding="utf-8")
    (tmp_path / "README.md").write_text("# notes\nrun on Tuesday\n", encoding="utf-8")
    (tmp_path / "empty.log").write_text("", encoding="utf-8")
    (tmp_path / ".hidden").write_text("ignored", encoding="utf-8")
    (tmp_path / "osu.txt").write_text(OSU_ALLGATHER, encoding="utf-8")  # no rank count
    logs = parse_logs([tmp_path])
    assert [Path(f.path).name for f in logs.files] == ["ag.log"]
    assert len(logs.left_out) == 3 and "README.md: unrecognised format" in logs.left_out[0]
    assert "osu.txt:" in logs.left_out[2] and "pass --ranks osu.txt=P" in logs.left_out[2]
    with raises("README.md: unrecognised format"):
        parse_logs([tmp_path / "README.md"])  # named explicitly: an error
    with raises("README.md: unrecognised format"):
        parse_logs([tmp_path], strict=True)  # --strict: a folder's stray file is an error too
    with raises("empty.log: empty file"):
        parse_logs([tmp_path / "empty.log"])


def test_parse_logs_per_file_options_must_agree(tmp_path: Path) -> None:
    path = tmp_path / "ag.log"
    path.write_text(NCCL_MULTINODE, encoding="utf-8")
    with raises("measured 4 ranks but --ranks says 8"):
        parse_logs([path], ranks={"ag.log": 8})
    with raises("--ranks: 'other.log' names none of the log files"):
        parse_logs([path], ranks={"other.log": 8})
    assert parse_logs([path], ranks={"*": 8}).measurements[0].ranks == 4  # '*' only fills gaps


def test_osu_all_reduce_ranks_from_the_job_script() -> None:
    log = osu.parse("osu_ar.txt", OSU_ALLREDUCE)
    assert {(m.op, m.ranks) for m in log.measurements} == {(AR, 8)}  # 2 nodes × 4 tasks
    assert [m.shard_bytes for m in log.measurements] == [4 / 8, 1024 / 8, 65536 / 8, 1048576 / 8]
    assert log.measurements[-1].seconds == pytest.approx(310.90e-6)
    # a launch line in the log wins over the job script
    launched = OSU_ALLREDUCE.replace("srun ./osu", "srun -n 16 ./osu")
    assert {m.ranks for m in osu.parse("osu_ar.txt", launched).measurements} == {16}
    # with neither, --ranks
    bare = "\n".join(line for line in OSU_ALLREDUCE.splitlines() if "SBATCH" not in line)
    with raises("pass --ranks osu_ar.txt=P"):
        osu.parse("osu_ar.txt", bare)
    assert {m.ranks for m in osu.parse("osu_ar.txt", bare, ParseOptions(ranks=2)).measurements} == {
        2
    }


def test_rccl_tests_csv_reads_out_of_place_rows() -> None:
    log = table.parse("rccl_all_gather.csv", RCCL_CSV)
    assert log.format is LogFormat.TABLE and not log.skipped and not log.notes
    assert [(m.op, m.ranks, m.line) for m in log.measurements] == [(AG, 8, n) for n in (2, 4, 6)]
    assert [m.shard_bytes for m in log.measurements] == [2**20 / 8, 2**22 / 8, 2**24 / 8]
    assert log.measurements[1].seconds == pytest.approx(88.31e-6)


def test_rccl_tests_json_records() -> None:
    log = table.parse("rccl_reduce_scatter.json", RCCL_JSON)
    assert [(m.op, m.ranks) for m in log.measurements] == [(RS, 8)] * 3
    assert [m.seconds for m in log.measurements] == pytest.approx([51.3e-6, 97.0e-6, 255.9e-6])
    assert log.measurements[2].shard_bytes == 2**24 / 8


def test_markdown_table_with_bandwidth_only() -> None:
    log = table.parse("tpu.md", TPU_MARKDOWN)
    assert {(m.op, m.ranks) for m in log.measurements} == {(AG, 16)}  # op from the heading
    # time = size / algbw: 1 MiB at 40.1 GB/s
    assert log.measurements[0].seconds == pytest.approx(2**20 / 40.10e9)
    assert log.measurements[0].shard_bytes == 2**20 / 16
    assert [str(s) for s in log.skipped] == ["tpu.md:12: achieved_bw (GB/s) 'n/a' is not a number"]
    assert "times derived from the algbw column 'achieved_bw (GB/s)'" in log.notes[0]


def test_table_needs_op_and_ranks_from_somewhere() -> None:
    text = "size (B),time (us)\n1048576,40\n4194304,90\n"
    with raises("pass --op sweep.csv=all_gather|reduce_scatter|send_recv|all_reduce"):
        table.parse("sweep.csv", text)
    with raises("the table has no ranks column (and no input / output shapes that give P"):
        table.parse("sweep.csv", text, ParseOptions(op=AG))
    log = table.parse("sweep.csv", text, ParseOptions(op=AG, ranks=4))
    assert [m.shard_bytes for m in log.measurements] == [2**20 / 4, 2**22 / 4]
    with raises("sweep.csv:1: time column 'time' has no unit meshtune knows"):
        table.parse("sweep.csv", "size,time\n1,2\n", ParseOptions(op=AG, ranks=4))


def test_gemm_markdown_square_sizes_and_tflops() -> None:
    log = gemm.parse("gemm.md", GEMM_MARKDOWN)
    assert [(g.m, g.n, g.k, g.dtype) for g in log.gemms] == [
        (d, d, d, "bf16") for d in (1024, 2048, 4096, 8192)
    ]
    assert log.gemms[2].seconds == pytest.approx(2 * 4096**3 / 180.5e12)


def test_implausible_times_are_dropped_and_named() -> None:
    text = NCCL_OLD.replace("   float    33.10", "   float    1e-300", 1)
    log = nccl.parse("x.log", text, ParseOptions(op=AG))
    (issue,) = log.skipped
    assert str(issue).startswith("x.log:") and "not a plausible time" in str(issue)
    assert len(log.measurements) == 2


def test_absurd_numbers_are_skipped_not_read() -> None:
    huge = "9" * 5000
    rows = f"size (B),time (us)\n{huge},40\n1048576,40\n4194304,90\n"
    log = table.parse("t.csv", rows, ParseOptions(op=AG, ranks=4))
    assert [m.line for m in log.measurements] == [3, 4]
    assert [str(s) for s in log.skipped] == [f"t.csv:2: size '{huge}' is not a byte count"]
    with raises("t.csv:3: time is infinite"):  # a time too large for a float: rejected
        table.parse(
            "t.csv", rows.replace("1048576,40", f"1048576,{huge}"), ParseOptions(op=AG, ranks=4)
        )


def test_gemm_jsonl() -> None:
    text = (
        '{"m": 4096, "n": 4096, "k": 4096, "dtype": "fp16", "time_ms": 0.8}\n'
        '{"m": 1024, "n": 2048, "k": 512, "dtype": "fp16", "time_ms": 0.02, "repeats": 5}\n'
    )
    assert detect_format(text) is LogFormat.GEMM
    log = gemm.parse("g.jsonl", text)
    assert [(g.m, g.n, g.k, g.repeats, g.line) for g in log.gemms] == [
        (4096, 4096, 4096, 1, 1),
        (1024, 2048, 512, 5, 2),
    ]
    assert log.gemms[1].seconds == pytest.approx(20e-6)


def test_a_unitless_time_takes_the_unit_algbw_agrees_with() -> None:
    # rccl-tests style: bare 'time' and 'algbw' columns; 1 MiB in 46.12 us is 22.74 GB/s
    text = RCCL_CSV.replace("time (us)", "time").replace("algBw (GB/s)", "algBw")
    log = table.parse("rccl.csv", text)
    assert log.measurements[0].seconds == pytest.approx(46.12e-6)
    assert "us makes algbw = size / time hold on every row" in log.notes[0]
    wrong = text.replace(",46.12,", ",4612,")  # one row 100x off: no unit fits every row
    with raises("rccl.csv:1: time column 'time' has no unit meshtune knows"):
        table.parse("rccl.csv", wrong)
