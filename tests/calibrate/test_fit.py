"""The fit (MeshSlice §3.2.2, §4.5): exact recovery, confounding, regimes, compute, errors."""

from __future__ import annotations

import numpy as np
import pytest

from meshtune.calibrate import (
    GemmMeasurement,
    Measurement,
    fit_compute,
    fit_link,
    ring_steps,
)
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp

AG, RS, SR = MeasuredOp.ALL_GATHER, MeasuredOp.REDUCE_SCATTER, MeasuredOp.SEND_RECV
AR = MeasuredOp.ALL_REDUCE
SHARDS = [8192 * 2**i for i in range(17)]


def measure(
    op: MeasuredOp, rings: list[int], time: object, shards: list[int] = SHARDS
) -> list[Measurement]:
    return [
        Measurement(op, p, float(s), float(time(p, s)), "synthetic", i)  # type: ignore[operator]
        for i, (p, s) in enumerate((p, s) for p in rings for s in shards)
    ]


def test_ring_steps() -> None:
    assert ring_steps(AG, 8) == 7 and ring_steps(RS, 2) == 1 and ring_steps(SR, 8) == 1
    assert ring_steps(AR, 8) == 14  # reduce-scatter then all-gather on the same ring


def test_noise_free_data_is_recovered_exactly() -> None:
    # 10 µs + (P-1)(2 µs + s / 1 GB/s): by hand, P = 4, s = 1 MiB gives 10 + 3·(2 + 1048.576) µs
    def time(p: int, s: int) -> float:
        return 10e-6 + (p - 1) * (2e-6 + s / 1e9)

    assert time(4, 2**20) == pytest.approx(3161.728e-6)
    fit = fit_link(AG, 0, measure(AG, [2, 4, 8], time))
    assert fit.record.t_launch_s == pytest.approx(10e-6, rel=1e-5)
    assert fit.record.t_sync_s == pytest.approx(2e-6, rel=1e-5)
    assert fit.record.bw_bytes_per_s == pytest.approx(1e9, rel=1e-5)
    assert fit.record.r2 == pytest.approx(1.0)
    assert fit.record.loo_mape_ge_1mb == pytest.approx(0.0, abs=1e-9)
    assert (
        not fit.record.confounded and fit.record.min_shard_bytes is None and fit.record.notes == []
    )
    assert all(abs(p.rel_error) < 1e-9 and p.in_fit for p in fit.points)


def test_one_ring_size_is_confounded_and_says_so() -> None:
    def time(p: int, s: int) -> float:
        return 10e-6 + (p - 1) * (2e-6 + s / 1e9)

    fit = fit_link(RS, 1, measure(RS, [8], time))
    assert fit.record.confounded and fit.record.t_sync_s == 0.0 and fit.record.t_sync_ci95_s is None
    assert fit.record.t_launch_s == pytest.approx(10e-6 + 7 * 2e-6, rel=1e-5)  # the whole intercept
    assert fit.record.bw_bytes_per_s == pytest.approx(1e9, rel=1e-5)
    assert fit.record.notes[0].startswith(
        "t_sync and t_launch are confounded (one ring size only, P = 8)"
    )
    assert "t_sync is set to 0" in fit.record.notes[0]


def test_send_recv_is_one_shift_at_any_ring_size() -> None:
    fit = fit_link(SR, 0, measure(SR, [2, 4, 8], lambda p, s: 30e-6 + s / 20e9))
    assert fit.record.confounded and fit.record.t_launch_s == pytest.approx(30e-6, rel=1e-5)
    assert "send_recv is timed as one ring shift" in fit.record.notes[0]


def gpu_like(p: int, s: int) -> float:
    """A slower protocol below 1 MiB shards and a 100 µs latency floor, then the line."""
    line = 40e-6 + (p - 1) * s / 200e9
    if s < 2**20:
        line *= 1.8
    return max(100e-6, line)


def test_regimes_choose_a_bandwidth_dominated_cutoff() -> None:
    fit = fit_link(AG, 0, measure(AG, [8], gpu_like))
    assert (
        fit.record.loo_mape_ge_1mb_all_sizes is not None
        and fit.record.loo_mape_ge_1mb_all_sizes > 0.10
    )
    # the 1 MiB shard still sits on the floor: the line starts at 2 MiB
    assert fit.record.cutoff_chosen and fit.record.min_shard_bytes == 2**21
    assert fit.record.loo_mape_ge_1mb is not None and fit.record.loo_mape_ge_1mb < 0.10
    assert fit.record.bw_bytes_per_s == pytest.approx(200e9, rel=1e-5)
    assert fit.record.t_launch_s == pytest.approx(40e-6, rel=1e-5)
    assert fit.record.points == len([s for s in SHARDS if s >= 2**21])
    assert not all(p.in_fit for p in fit.points)
    assert any(
        "bandwidth-dominated regime, shards >= 2 MiB (chosen automatically)" in n
        for n in fit.record.notes
    )
    explicit = fit_link(AG, 0, measure(AG, [8], gpu_like), min_shard_bytes=2**25)
    assert explicit.record.min_shard_bytes == 2**25 and not explicit.record.cutoff_chosen
    assert any("(set by the user)" in n for n in explicit.record.notes)


def test_a_step_no_cutoff_can_fix_is_reported() -> None:
    def step(p: int, s: int) -> float:  # 1.8x slower below 16 MiB: two lines, not one
        return (20e-6 + (p - 1) * s / 200e9) * (1.8 if s < 2**24 else 1.0)

    fit = fit_link(AG, 0, measure(AG, [8], step))
    assert fit.record.loo_mape_ge_1mb is not None and fit.record.loo_mape_ge_1mb > 0.10
    assert (
        fit.record.notes[-1].startswith("LOO MAPE")
        and "misses the 10% target" in fit.record.notes[-1]
    )


def test_no_large_shards_no_loo() -> None:
    fit = fit_link(AG, 0, measure(AG, [2, 4], lambda p, s: 5e-6 + (p - 1) * s / 1e9, SHARDS[:5]))
    assert fit.record.loo_mape_ge_1mb is None
    assert "no shards >= 1 MiB" in fit.record.notes[-1]


def test_one_shard_size_cannot_give_a_bandwidth() -> None:
    with pytest.raises(
        LogFormatError, match="all_gather axis 0: the logs have fewer than two shard sizes"
    ):
        fit_link(AG, 0, measure(AG, [2, 4, 8], lambda p, s: 1e-3, [1 << 20]))


def test_flat_times_give_no_bandwidth() -> None:
    with pytest.raises(LogFormatError, match="do not grow significantly with the shard size"):
        fit_link(AG, 0, measure(AG, [2, 4], lambda p, s: 1e-3 * (1 + 1e-3 * np.sin(s))))


def gemm(m: int, seconds: float, dtype: str = "bf16") -> GemmMeasurement:
    return GemmMeasurement(m, m, m, dtype, seconds, "g.csv", m)


def test_compute_fit_overhead_and_efficiency() -> None:
    # time = 10 µs + 2m³ / 100 TFLOP/s, by hand: m = 1024 gives 10 + 21.47 µs
    points = [gemm(m, 10e-6 + 2 * m**3 / 100e12) for m in (256, 1024, 4096, 16384)]
    fit = fit_compute(points)
    # F: the best size, m = 16384: 8.796e12 FLOPs in 10 µs + 87.96 ms -> 99.989 TFLOP/s
    best = 2 * 16384**3 / (10e-6 + 2 * 16384**3 / 100e12)
    assert fit.record.effective_flops_per_s == pytest.approx(best, rel=1e-5)
    assert fit.record.overhead_s == pytest.approx(10e-6, rel=1e-5)  # the line fit
    assert fit.record.half_efficiency_flops == pytest.approx(1e9, rel=1e-3)  # 10 µs × 100 TFLOP/s
    assert fit.points[1].efficiency == pytest.approx(21.47 / 31.47 * 100e12 / best, rel=1e-3)
    # the curve: each size's achieved / F; m = 256: 33.55 MFLOP in 10.34 µs = 3.25 TFLOP/s
    assert [f for f, _ in fit.curve] == pytest.approx(
        [2.0 * m**3 for m in (256, 1024, 4096, 16384)]
    )
    assert [e for _, e in fit.curve] == pytest.approx(
        [2 * m**3 / (10e-6 + 2 * m**3 / 100e12) / best for m in (256, 1024, 4096, 16384)],
        abs=5e-5,
    )
    assert fit.curve[-1][1] == 1.0


def test_compute_fit_one_size_and_mixed_dtypes() -> None:
    fit = fit_compute([gemm(8192, 0.011), gemm(8192, 0.0112)])
    assert fit.record.overhead_s is None and "one GeMM size" in fit.record.notes[0]
    assert fit.record.effective_flops_per_s == pytest.approx(2 * 8192**3 / 0.0111, rel=0.01)
    with pytest.raises(LogFormatError, match=r"GeMM logs mix operand types \(bf16, fp32\)"):
        fit_compute([gemm(1024, 1e-4), gemm(2048, 1e-3, "fp32")])


def test_compute_fit_curve_reproduces_every_measured_time() -> None:
    # 2 µs overhead, and GeMMs under 1 GFLOP reach only 50 % of the 100 TFLOP/s beyond it
    def seconds(m: int) -> float:
        flops = 2 * m**3
        return 2e-6 + flops / (100e12 * (0.5 if flops < 1e9 else 1.0))

    sizes = (128, 256, 512, 2048, 4096, 8192)
    fit = fit_compute([gemm(m, seconds(m)) for m in sizes])
    effective = fit.record.effective_flops_per_s
    assert effective == pytest.approx(2 * 8192**3 / seconds(8192), rel=1e-5)
    # time = FLOPs / (F · efficiency): the profile's model gives back each measured time
    for (flops, efficiency), m in zip(fit.curve, sizes, strict=True):
        assert flops == pytest.approx(2.0 * m**3, rel=1e-5)
        assert flops / (effective * efficiency) == pytest.approx(seconds(m), rel=1e-3)  # 4 digits
    # re-based on a given rate above every size: achieved / given, never above 1
    given = fit.curve_for(2 * effective)
    assert [e for _, e in given] == pytest.approx([e / 2 for _, e in fit.curve], abs=1e-4)
    assert fit.curve_for(0.5 * effective)[-1][1] == 1.0


def test_all_reduce_recovers_the_reduce_scatter_all_gather_parameters() -> None:
    # a ring all-reduce of buffer B on P ranks: 10 µs + 2(P-1)(2 µs + (B/P) / 1 GB/s)
    def time(p: int, s: int) -> float:
        return 10e-6 + 2 * (p - 1) * (2e-6 + s / 1e9)

    fit = fit_link(AR, 0, measure(AR, [4, 8, 16, 32], time))
    assert fit.record.t_launch_s == pytest.approx(10e-6, rel=1e-5)
    assert fit.record.t_sync_s == pytest.approx(2e-6, rel=1e-5)
    assert fit.record.bw_bytes_per_s == pytest.approx(1e9, rel=1e-5)
    assert any(
        "all-reduce times as a reduce-scatter then an all-gather" in n for n in fit.record.notes
    )


def test_several_ring_sizes_are_checked_for_one_parameter_set() -> None:
    def consistent(p: int, s: int) -> float:
        return 10e-6 + (p - 1) * (2e-6 + s / 1e9)

    fit = fit_link(AG, 0, measure(AG, [4, 8, 16, 32], consistent))
    assert fit.record.rings_consistent is True
    assert [r.ranks for r in fit.record.per_ring] == [4, 8, 16, 32]
    assert all(r.mape_joint < 1e-6 for r in fit.record.per_ring)

    # P = 4, 8 inside a node at 200 GB/s; P = 16, 32 cross a 25 GB/s network
    def crossing(p: int, s: int) -> float:
        return 10e-6 + (p - 1) * (2e-6 + s / (200e9 if p <= 8 else 25e9))

    fit = fit_link(AG, 0, measure(AG, [4, 8, 16, 32], crossing))
    assert fit.record.rings_consistent is False
    bws = {r.ranks: r.bw_bytes_per_s for r in fit.record.per_ring}
    assert bws[4] == pytest.approx(200e9, rel=1e-4) and bws[32] == pytest.approx(25e9, rel=1e-4)
    (note,) = [n for n in fit.record.notes if n.startswith("no single")]
    assert "P = 4–8: bw 200 GB/s; P = 16–32: bw 25 GB/s" in note
    assert "rings up to P = 8" in note


def test_degenerate_times_fail_cleanly() -> None:
    points = measure(AG, [2, 4], lambda p, s: 5e-6 + (p - 1) * s / 1e9)
    points[3] = Measurement(AG, 2, points[3].shard_bytes, 1e-300, "synthetic", 3)
    with pytest.raises(LogFormatError, match="all_gather axis 0: the measurements are degenerate"):
        fit_link(AG, 0, points)


@pytest.mark.parametrize("seed", range(6))
def test_screened_cutoff_is_the_exhaustive_robust_choice(seed: int) -> None:
    """Scoring every cutoff with the robust fit (the rule as stated) and screening with the
    closed form first pick the same cutoff on noisy two-regime data."""
    from meshtune.calibrate import link_model

    rng = np.random.default_rng(seed)

    def time(p: int, s: int) -> float:  # a latency floor, then 200 GB/s
        return max(30e-6, 10e-6 + (p - 1) * s / 200e9) * rng.uniform(0.95, 1.05)

    points = measure(AG, [4, 8], time, [8192 * 2**i for i in range(17)])
    data = link_model.LinkData(
        k=np.array([ring_steps(m.op, m.ranks) for m in points], dtype=float),
        s=np.array([m.shard_bytes for m in points]),
        t=np.array([m.seconds for m in points]),
        w=np.ones(len(points)),
    )
    cutoff, full, score = link_model.choose_cutoff(data)
    exhaustive = []
    for c in np.unique(data.s)[1:]:
        mask = data.s >= c
        if len(np.unique(data.s[mask])) < 3:
            break
        loo = link_model.loo_mape(data, mask)
        if loo is not None:
            exhaustive.append((float(c), loo))
    best = min(m for _, m in exhaustive)
    expected = next((c, m) for c, m in exhaustive if m <= best + 0.01)
    assert full is not None and expected[1] < full
    assert (cutoff, score) == expected
