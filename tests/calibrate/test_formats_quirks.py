"""The log formats and quirks of issue 16, finding 2, each on a sample written for the test.

Hand-worked expectations: nccl-tests / rccl-tests shard = size / P (all_gather, all_to_all);
a JAX table's time = transferred bytes / bandwidth and P = output elements / input elements;
a GeMM table's time = 2·m·n·k / rate.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshtune.calibrate import fit_profile, parse_logs
from meshtune.calibrate.formats.shapes import bytes_from_shapes, elements, ranks_from_shapes
from meshtune.catalog import load_profile
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp
from meshtune.io import json_too_deep

SAMPLES = Path(__file__).parent / "samples"
AG, RS, SR = MeasuredOp.ALL_GATHER, MeasuredOp.REDUCE_SCATTER, MeasuredOp.SEND_RECV
AR, A2A = MeasuredOp.ALL_REDUCE, MeasuredOp.ALL_TO_ALL


def test_rccl_csv_gpus_column_and_wrong_rows() -> None:
    (log,) = parse_logs([SAMPLES / "rccl_gpus_wrong.csv"]).files
    # 6 rows: one in-place, one with #wrong = 12 -> 4 out-of-place rows fitted
    assert [m.ranks for m in log.measurements] == [8] * 4
    assert [m.shard_bytes for m in log.measurements] == [
        1048576 / 8,
        4194304 / 8,
        67108864 / 8,
        268435456 / 8,
    ]
    assert log.measurements[0].seconds == pytest.approx(46.12e-6)
    (note,) = log.notes
    assert "1 row(s) with wrong != 0" in note and "dropped, not fitted: line(s) 5" in note


def test_acceptance_log_split_by_benchmark_alltoall_fitted() -> None:
    (log,) = parse_logs([SAMPLES / "nccl_acceptance_multi.log"]).files
    ops = {m.op for m in log.measurements}
    assert ops == {AR, AG, RS, A2A, SR}
    per_op = {op: sum(m.op is op for m in log.measurements) for op in ops}
    assert per_op == {op: 6 for op in ops}
    assert any("benchmark 'broadcast' skipped (6 rows)" in n for n in log.notes)
    a2a = [m for m in log.measurements if m.op is A2A]
    assert a2a[0].shard_bytes == 65536 and a2a[0].ranks == 4  # size 4·64 KiB over 4 ranks
    result = fit_profile(parse_logs([SAMPLES / "nccl_acceptance_multi.log"]), peak_flops_per_s=1e15)
    fits = {(f.record.op, f.record.axis): f.record for f in result.links}
    # One ring for both axes: the fit (and its mirror) supplies the profile's all_to_all.
    assert fits[(A2A, 0)].used_for == [A2A] and fits[(A2A, 1)].used_for == [A2A]
    assert result.profile is not None and result.profile.all_to_all is not None
    assert result.profile.all_to_all.bw_bytes_per_s == fits[(A2A, 0)].bw_bytes_per_s
    assert not any("all_to_all" in n and "not used" in n for n in result.calibration.notes)
    assert any(f.op is A2A for f in result.profile.calibration.fits)  # type: ignore[union-attr]


def test_a_file_of_unused_benchmarks_only_is_unusable(tmp_path: Path) -> None:
    text = (SAMPLES / "nccl_acceptance_multi.log").read_text()
    start = text.index("# nccl-tests version", text.index("broadcast_perf") - 200)
    end = text.index("# nccl-tests version", start + 10)
    only = tmp_path / "bcast.log"
    only.write_text(text[start:end])
    with pytest.raises(LogFormatError, match="benchmark\\(s\\) broadcast are not ones"):
        parse_logs([only])


def test_chatter_and_tags_mid_row_and_a_corrupted_row() -> None:
    (log,) = parse_logs([SAMPLES / "nccl_chatter_tagged.log"], strict=True).files
    sizes = [m.shard_bytes * 4 for m in log.measurements]
    # 6 rows: the one cut by a WARN line and the one with a tag inside both read; the
    # 64 MiB row has #wrong = 3 and is dropped.
    assert sizes == [262144, 1048576, 4194304, 16777216, 268435456]
    assert log.measurements[2].seconds == pytest.approx(148.56e-6)
    assert log.measurements[3].seconds == pytest.approx(465.65e-6)
    assert any("1 row(s) with #wrong != 0" in n for n in log.notes)


def test_a_short_row_without_continuation_is_still_skipped(tmp_path: Path) -> None:
    text = (SAMPLES / "nccl_chatter_tagged.log").read_text()
    cut = text.replace("   148.56   28.23   21.17     0   138.66   30.25   22.69     0", "")
    path = tmp_path / "cut_all_gather.log"
    path.write_text(cut)
    (log,) = parse_logs([path]).files
    assert len(log.measurements) == 4
    assert [s.line for s in log.skipped] == [17]


def test_a_jsonl_line_nested_thousands_deep_is_skipped(tmp_path: Path) -> None:
    row = '{"op": "all_reduce", "bytes": 1024, "seconds": 0.001, "ranks": 8}'
    path = tmp_path / "rows.jsonl"
    path.write_text(f"{row}\n{'[' * 5000}\n" + '{"op": ' + "[" * 5000 + "\n")
    (log,) = parse_logs([path]).files
    assert len(log.measurements) == 1
    assert [s.line for s in log.skipped] == [2, 3]
    assert all("nested over 64 deep" in s.reason for s in log.skipped)


def test_json_nesting_counts_brackets_outside_strings() -> None:
    assert json_too_deep("[" * 65) and not json_too_deep("[" * 64)
    assert not json_too_deep('{"a": "' + "[" * 100 + '"}')
    assert not json_too_deep(r'["\\", "' + "{" * 100 + '"]')  # an escaped backslash ends it
    assert json_too_deep(r'["\", ' + "{" * 100)  # an escaped quote does not


def test_osu7_iterations_weight_the_rows() -> None:
    (log,) = parse_logs([SAMPLES / "osu7_allgather_iterations.txt"]).files
    assert [m.repeats for m in log.measurements] == [1000] * 4 + [100] * 3 + [50] * 2
    assert {m.ranks for m in log.measurements} == {16}  # srun -n 16
    assert log.measurements[0].shard_bytes == 1024 and log.measurements[0].seconds == 20.10e-6


def test_jax_table_time_from_transferred_and_p_from_shapes() -> None:
    (log,) = parse_logs([SAMPLES / "jax_ici_shapes.md"]).files
    ag = [m for m in log.measurements if m.op is AG]
    rs = [m for m in log.measurements if m.op is RS]
    assert len(ag) == 5 and len(rs) == 4
    assert {m.ranks for m in log.measurements} == {16}  # not 32 from the name v4-32
    assert ag[0].shard_bytes == 512 * 128 * 2  # the all-gather's input, bf16
    assert ag[0].seconds == pytest.approx(0.00196608 / 21.3)
    assert rs[0].shard_bytes == 2048 * 128 * 2  # the reduce-scatter's output
    assert any("time = transferred data / bandwidth" in n for n in log.notes)


def test_shapes_arithmetic() -> None:
    assert elements("(16, 8192, 128)") == 16 * 8192 * 128
    assert elements("[4,4]") == 16 and elements("16x8192") == 16 * 8192
    assert elements("v4-32") is None and elements("") is None
    assert ranks_from_shapes(AG, 10, 80) == 8 and ranks_from_shapes(RS, 80, 10) == 8
    assert ranks_from_shapes(AG, 10, 15) is None and ranks_from_shapes(AR, 10, 10) is None
    assert bytes_from_shapes(AR, 64, 64, "float32") == (256.0, False)
    assert bytes_from_shapes(RS, 64, 8, "bf16") == (16.0, True)
    assert bytes_from_shapes(AG, 8, 64, "int4") is None


def test_gemm_table_of_tflops_per_device() -> None:
    (log,) = parse_logs([SAMPLES / "gemm_mnk_tflops.csv"]).files
    assert [g.m for g in log.gemms] == [1024, 2048, 4096, 8192, 10240]
    assert log.gemms[0].seconds == pytest.approx(2 * 1024**3 / 176.62e12)


def test_every_new_sample_calibrates_with_a_base() -> None:
    base = load_profile("h100-8gpu-nodes")
    for name in ("rccl_gpus_wrong.csv", "nccl_acceptance_multi.log", "jax_ici_shapes.md"):
        result = fit_profile(parse_logs([SAMPLES / name]), base=base)
        assert result.profile is not None, name
        assert result.profile.memory_bytes == base.memory_bytes


def test_gemm_fit_writes_the_shipped_h100_curve() -> None:
    """The H100 profile's curve was written by hand from a published square-GeMM sweep
    (n = 1024 … 10240: 176.62 / 676.59 / 788.72 / 797.51 / 719.72 TFLOP/s) as achieved / 794.5
    (the MAMF), capped at 1, overhead 0. Calibrating that sweep with the same effective rate
    gives the same [gemm_efficiency] table."""
    base = load_profile("h100-8gpu-nodes")
    logs = parse_logs([SAMPLES / "gemm_mnk_tflops.csv"])
    result = fit_profile(logs, base=base, effective_flops_per_s=794.5e12)
    assert result.profile is not None and base.gemm_efficiency is not None
    fitted = result.profile.gemm_efficiency
    assert fitted is not None and fitted.overhead_s == base.gemm_efficiency.overhead_s == 0.0
    assert [p.flops for p in fitted.curve] == pytest.approx(
        [p.flops for p in base.gemm_efficiency.curve], rel=1e-6
    )
    assert [p.efficiency for p in fitted.curve] == [
        p.efficiency for p in base.gemm_efficiency.curve
    ]
    # without the MAMF the best size sets the rate: 797.51 TFLOP/s at n = 8192
    alone = fit_profile(logs, base=base)
    assert alone.profile is not None and alone.profile.gemm_efficiency is not None
    assert alone.profile.effective_flops_per_s == pytest.approx(797.51e12, rel=1e-5)
    assert [p.efficiency for p in alone.profile.gemm_efficiency.curve] == [
        0.2215,  # 176.62 / 797.51
        0.8484,
        0.989,
        1.0,
        0.9025,
    ]


@given(st.text(max_size=60))
def test_shape_text_never_raises(text: str) -> None:
    value = elements(text)
    assert value is None or value >= 0


@given(st.lists(st.integers(1, 4096), min_size=1, max_size=4), st.sampled_from([", ", "x", ","]))
def test_shape_elements_are_the_product(dims: list[int], sep: str) -> None:
    product = 1
    for d in dims:
        product *= d
    assert elements("(" + sep.join(map(str, dims)) + ")") == product
