"""Large nccl-tests logs (issue 16, finding 4): plain rows read as NumPy columns, repeated
sizes merged into one weighted point, files over the input limit read as a stream.

The reference for every fast read is the same log read line by line: each line prefixed by
``srun -l``'s ``0: `` (a prefix the parser removes, which makes no line plain).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from meshtune.calibrate import Measurement, fit_link, parse_logs
from meshtune.calibrate.formats import detect as detect_module
from meshtune.calibrate.formats import nccl
from meshtune.calibrate.formats.nccl import parse
from meshtune.calibrate.formats.rows import Block, read_block
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp

AG = MeasuredOp.ALL_GATHER

HEADER = """# nThread 1 nGpus 4 minBytes 8192 maxBytes 1048576 step: 2(factor) iters: 20
#  Rank  0 Group  0 Pid  1 on n device  0 [0x01] GPU
#  Rank  1 Group  0 Pid  1 on n device  1 [0x02] GPU
#  Rank  2 Group  0 Pid  1 on n device  2 [0x03] GPU
#  Rank  3 Group  0 Pid  1 on n device  3 [0x04] GPU
#       size   count   type  redop   root   time  algbw  busbw #wrong   time  algbw  busbw #wrong
#        (B) (elements)                      (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)
"""
SIZES = [8192 * 2**i for i in range(8)]


def _row(size: int, us: float, wrong: int = 0) -> str:
    algbw = size / us / 1e3
    busbw = algbw * 3 / 4
    return (
        f"{size:10d} {size // 4:8d}  float   none     -1 {us:8.3f} {algbw:6.3f} {busbw:6.3f} "
        f"{wrong:6d} {us:8.3f} {algbw:6.3f} {busbw:6.3f}      0"
    )


def _sweeps(count: int, noise: float, seed: int = 7) -> list[str]:
    """``count`` sweeps over SIZES: 20 µs + 3·(size/4) / 50 GB/s, times ±``noise``."""
    rng = np.random.default_rng(seed)
    return [
        _row(size, (20 + 3 * size / 4 / 50e3) * float(rng.uniform(1 - noise, 1 + noise)))
        for _ in range(count)
        for size in SIZES
    ]


def _prefixed(text: str) -> str:
    return "".join(f"0: {line}\n" for line in text.splitlines())


def _key(m: Measurement) -> tuple[object, ...]:
    """Everything of a measurement but its time (a mean: compared to rounding)."""
    return (m.op, m.ranks, m.shard_bytes, m.source, m.line, m.axis, m.repeats, m.hosts, m.system)


def test_repeated_rows_are_one_point_their_mean_weighted_by_count() -> None:
    rows = [_row(8192, 10.0), _row(16384, 40.0), _row(8192, 20.0), _row(8192, 30.0)]
    log = parse("all_gather.log", HEADER + "\n".join(rows) + "\n")
    first, second = log.measurements
    assert (first.shard_bytes, first.repeats, first.line) == (2048, 3, 8)
    assert first.seconds == pytest.approx(20e-6, rel=1e-15)  # (10 + 20 + 30) / 3 µs
    assert (second.shard_bytes, second.seconds, second.repeats, second.line) == (
        4096,
        40.0 * 1e-6,
        1,
        9,
    )
    assert "all_gather.log: 4 rows give 2 points" in log.notes[0]


def test_a_log_without_repeats_keeps_every_row_exactly() -> None:
    rows = _sweeps(1, 0.05)
    log = parse("all_gather.log", HEADER + "\n".join(rows) + "\n")
    assert [m.line for m in log.measurements] == list(range(8, 8 + len(SIZES)))
    assert [m.repeats for m in log.measurements] == [1] * len(SIZES)
    assert [m.seconds for m in log.measurements] == [float(r.split()[5]) * 1e-6 for r in rows]
    assert not log.notes


def test_columns_read_the_same_as_line_by_line_quirks_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = _sweeps(30, 0.05)
    rows[40] = _row(SIZES[0], 25.0, wrong=3)  # a corrupted row: dropped with a note
    rows[41] = _row(0, 5.0)  # a zero-byte row: counted
    rows.insert(100, "n:1:1 [0] NCCL INFO Channel 00/02 : 0 1 2 3")  # chatter between rows
    cut = rows[150].split()  # a row cut in two by chatter
    rows[150:151] = [" ".join(cut[:6]) + " n:1:1 [0] NCCL INFO cut", " ".join(cut[6:])]
    text = HEADER + "\n".join(rows) + "\n# Avg bus bandwidth : 1.0\n"
    slow = parse("all_gather.log", _prefixed(text))
    read: list[int] = []

    def spy(lines: list[str], *args: object) -> Block | None:
        block = read_block(lines, *args)  # type: ignore[arg-type]
        read.append(0 if block is None else len(lines))
        return block

    monkeypatch.setattr(nccl, "read_block", spy)
    fast = parse("all_gather.log", text)
    assert sum(read) > 200  # most rows were read as columns
    assert len(fast.measurements) == len(SIZES)
    assert [_key(m) for m in fast.measurements] == [_key(m) for m in slow.measurements]
    assert [m.seconds for m in fast.measurements] == pytest.approx(
        [m.seconds for m in slow.measurements], rel=1e-12
    )
    assert fast.notes == slow.notes
    assert any("line(s) 48" in note and "#wrong != 0" in note for note in fast.notes)


def test_a_bad_cell_in_a_long_run_is_named_by_its_line() -> None:
    rows = _sweeps(20, 0.0)
    rows[77] = rows[77].replace("float", "float extra")  # one cell too many: skipped
    log = parse("all_gather.log", HEADER + "\n".join(rows) + "\n")
    assert [str(issue) for issue in log.skipped] == [
        "all_gather.log:85: expected 13 columns as in the header, found 14"
    ]
    rows[77] = _row(SIZES[5], float("nan"))
    with pytest.raises(LogFormatError, match=r"all_gather\.log:85: time is NaN"):
        parse("all_gather.log", HEADER + "\n".join(rows) + "\n")


def test_merged_points_fit_the_parameters_the_rows_fit_within_1_percent() -> None:
    rows = _sweeps(50, 0.01)
    merged = parse("all_gather.log", HEADER + "\n".join(rows) + "\n").measurements
    each = [
        Measurement(AG, 4, float(r.split()[0]) / 4, float(r.split()[5]) * 1e-6, "all_gather.log", n)
        for n, r in enumerate(rows, start=8)
    ]
    one, other = fit_link(AG, 0, merged).record, fit_link(AG, 0, each).record
    assert len(merged) == len(SIZES) and len(each) == 50 * len(SIZES)
    assert one.t_launch_s == pytest.approx(other.t_launch_s, rel=0.01)
    assert one.bw_bytes_per_s == pytest.approx(other.bw_bytes_per_s, rel=0.01)
    assert one.bw_bytes_per_s == pytest.approx(50e9, rel=0.01)


def test_a_log_over_the_input_limit_is_read_as_a_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _sweeps(40, 0.05)
    text = HEADER + "\n".join(rows) + "\n"
    path = tmp_path / "all_gather_perf.log"
    path.write_text(text, encoding="utf-8")
    whole = parse_logs([path]).files[0]
    monkeypatch.setattr(detect_module, "MAX_INPUT_BYTES", 4096)
    monkeypatch.setattr(detect_module, "_PIECE_BYTES", 1000)  # many pieces, cut mid-table
    streamed = parse_logs([path]).files[0]
    assert [_key(m) for m in streamed.measurements] == [_key(m) for m in whole.measurements]
    assert [m.seconds for m in streamed.measurements] == pytest.approx(
        [m.seconds for m in whole.measurements], rel=1e-12
    )
    other = tmp_path / "osu.txt"
    other.write_text("# OSU MPI Allgather Latency Test\n" + "# Size Avg Latency(us)\n" * 400)
    with pytest.raises(LogFormatError, match="input limit; expected a benchmark log"):
        parse_logs([other])
