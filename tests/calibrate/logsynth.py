"""Synthetic benchmark logs written from known cost-model parameters, in every supported format.

The layouts follow the tools' documented output (nccl-tests doc/PERFORMANCE.md and its table
header, the OSU micro-benchmarks' latency tables, the MeshSlice artifact's BenchCollectives2D
prints); the numbers are generated here: time = t_launch + steps·(t_sync + shard/bw), times a
seeded uniform ±5 % multiplicative noise.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

from meshtune.calibrate import busbw_factor, ring_steps
from meshtune.hardware.calibration import MeasuredOp

AG, RS, SR = MeasuredOp.ALL_GATHER, MeasuredOp.REDUCE_SCATTER, MeasuredOp.SEND_RECV
AR, A2A = MeasuredOp.ALL_REDUCE, MeasuredOp.ALL_TO_ALL

TRUE = {
    AG: (13e-6, 5e-6, 27.472e9),
    RS: (26e-6, 5e-6, 37.506e9),
    SR: (13e-6, 50e-6, 38.801e9),
    AR: (13e-6, 5e-6, 27.472e9),  # the all-gather's: an all-reduce set stands for AG + RS
    A2A: (30e-6, 4e-6, 20e9),
}
"""(t_launch_s, t_sync_s, bw_bytes_per_s) per op: the TPUv4 axis-0 constants of the paper."""

RINGS = (4, 8, 16, 32)
SHARDS = tuple(8192 * 2**i for i in range(17))  # 8 KiB .. 512 MiB, doubling (§4.5)
NOISE = 0.05
NOISE_ALL_REDUCE = 0.02
"""All-reduce round trips use ±2 %: an all-reduce's intercept t_launch hides under 2(P − 1)·t_sync,
so at ±5 % the fitted t_launch is off by 6 % on average and up to 14 % (20 seeds, P = 4..32), while
bw stays within 1.5 % and t_sync within 3 %; the fit's 95 % interval says so."""


def true_time(
    op: MeasuredOp, ranks: int, shard: float, params: tuple[float, float, float] | None = None
) -> float:
    t_launch, t_sync, bw = params or TRUE[op]
    return t_launch + ring_steps(op, ranks) * (t_sync + shard / bw)


def noisy(rng: np.random.Generator, seconds: float, noise: float = NOISE) -> float:
    return seconds * float(rng.uniform(1 - noise, 1 + noise))


def sample(rng: np.random.Generator, op: MeasuredOp, ranks: int, shard: float) -> float:
    """One noisy timing of ``op`` (±5 %, all-reduce ±2 %)."""
    return noisy(rng, true_time(op, ranks, shard), NOISE_ALL_REDUCE if op is AR else NOISE)


def _nccl_float(value: float, width: int) -> str:
    """nccl-tests' column format: 2 decimals, fewer as the integer part grows."""
    digits = len(str(int(value))) if value >= 1 else 1
    if digits < width - 2:
        return f"{value:{width}.2f}"
    if digits < width - 1:
        return f"{value:{width}.1f}"
    return f"{value:{width}.0f}"


def nccl_log(op: MeasuredOp, ranks: int, rng: np.random.Generator, *, old: bool = False) -> str:
    """A nccl-tests stdout: header, device lines, table (old or current layout), summary."""
    binary = {
        AG: "all_gather_perf",
        RS: "reduce_scatter_perf",
        SR: "sendrecv_perf",
        AR: "all_reduce_perf",
        A2A: "alltoall_perf",
    }[op]
    version = "# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903"
    lines = [] if old else [version]
    lines += [
        f"# Collective test starting: {binary}"
        if not old
        else f"$ ./build/{binary} -b 8K -e 4G -f 2 -g {ranks}",
        f"# nThread 1 nGpus {ranks} minBytes 8192 maxBytes 4294967296 step: 2(factor) warmup "
        "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for rank in range(ranks):
        group = "" if old else "Group  0 "
        lines.append(
            f"#  Rank {rank:2d} {group}Pid  31337 on   testnode device {rank:2d} "
            f"[0x{16 + rank:02x}] Example Accelerator 80GB"
        )
    lines.append("#")
    columns = (
        ["size", "count", "type", "redop"] if old else ["size", "count", "type", "redop", "root"]
    )
    units = ["(B)", "(elements)", "", ""] if old else ["(B)", "(elements)", "", "", ""]
    wrong = "error" if old else "#wrong"
    for _ in range(2):
        columns += ["time", "algbw", "busbw", wrong]
        units += ["(us)", "(GB/s)", "(GB/s)", ""]
    widths = [12, 12, 8, 6, 6] if not old else [12, 12, 8, 6]
    widths += [7, 6, 6, 6] * 2
    lines += [
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
        "#" + "".join(f"  {c:>{w}}" for c, w in zip(columns, widths, strict=True))[1:],
        "#" + "".join(f"  {u:>{w}}" for u, w in zip(units, widths, strict=True))[1:],
    ]
    if old:
        lines.append("testnode:31337:31337 [0] NCCL INFO Launch mode Parallel")
    factor = busbw_factor(op, ranks)
    for shard in SHARDS:
        size = shard if op is SR else shard * ranks
        cells = []
        for _ in range(2):  # out-of-place, in-place
            seconds = sample(rng, op, ranks, shard)
            algbw = size / seconds / 1e9
            wrong = "   N/A" if old else "     0"
            cells.append(
                f"  {_nccl_float(seconds * 1e6, 7)}  {_nccl_float(algbw, 6)}  "
                f"{_nccl_float(algbw * factor, 6)}{wrong}"
            )
        redop = "sum" if op in (RS, AR) else "none"
        root = "" if old else "      -1"
        lines.append(
            f"{size:12d}  {size // 4:12d}  {'float':>8s}  {redop:>6s}{root}{''.join(cells)}"
        )
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 42.0", "#"]
    return "\n".join(lines) + "\n"


def osu_log(op: MeasuredOp, ranks: int, rng: np.random.Generator, *, launcher: bool) -> str:
    """An OSU latency table: osu_allgather (size = shard), osu_reduce_scatter (size = P·shard)
    or osu_latency (two ranks, size = message)."""
    name = {
        AG: "Allgather Latency",
        RS: "Reduce_scatter Latency",
        SR: "Latency",
        AR: "Allreduce Latency",
    }[op]
    binary = {AG: "osu_allgather", RS: "osu_reduce_scatter", SR: "osu_latency", AR: "osu_allreduce"}
    lines = [f"+ mpirun -np {ranks} ./{binary[op]} -m 8192:4294967296"] if launcher else []
    lines += [f"# OSU MPI-CUDA {name} Test v7.4", "# Datatype: MPI_CHAR."]
    lines.append("# Size          Latency (us)" if op is SR else "# Size       Avg Latency(us)")
    for shard in SHARDS:
        size = shard * ranks if op in (RS, AR) else shard
        lines.append(f"{size:<20d}{sample(rng, op, ranks, shard) * 1e6:>12.2f}")
    return "\n".join(lines) + "\n"


def artifact_log(rows: int, cols: int, rng: np.random.Generator) -> str:
    """BenchCollectives2D output on an R × C mesh: every op along x (R chips) and y (C chips)."""
    lines = [
        f"Global device count: {rows * cols}",
        f"Local device count: {cols}",
        f"Running benchmark on ({rows}, {cols}) devices.",
    ]
    names = {AG: "Allgather", RS: "ReduceScatter", SR: "SendRecv"}
    for op, name in names.items():
        for axis_name, ring in (("x", rows), ("y", cols)):
            lines += ["", f"{name}_{axis_name}: dim=0", f"({ring * 4096}, 4096)"]
            for shard in SHARDS:
                mean = sample(rng, op, ring, shard) * 1e3
                lines.append(f"Size: {shard // 1024}KB,\t Time: {mean:.4f}+-{mean * 0.02:.4f}ms")
    return "\n".join(lines) + "\n"


def canonical_rows(
    rng: np.random.Generator, axis: int | None = 0, ops: tuple[MeasuredOp, ...] = (AG, RS, SR)
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for op in ops:
        for ranks in RINGS:
            for shard in SHARDS:
                seconds = sample(rng, op, ranks, shard)
                rows.append(
                    {
                        "op": op.value,
                        "axis": axis,
                        "ranks": ranks,
                        "bytes": shard,
                        "seconds": seconds,
                        "repeats": 20,
                    }
                )
    return rows


def canonical_csv(rng: np.random.Generator, ops: tuple[MeasuredOp, ...] = (AG, RS, SR)) -> str:
    lines = ["# measured on the example cluster", "op,axis,ranks,bytes,seconds,repeats"]
    for row in canonical_rows(rng, ops=ops):
        lines.append(
            ",".join(
                "" if v is None else repr(v) if isinstance(v, float) else str(v)
                for v in row.values()
            )
        )
    return "\n".join(lines) + "\n"


def canonical_jsonl(rng: np.random.Generator) -> str:
    return "".join(json.dumps(row) + "\n" for row in canonical_rows(rng, axis=1))


GEMM_EFFECTIVE = 180e12
GEMM_OVERHEAD = 8e-6


def gemm_csv(rng: np.random.Generator, *, tflops: bool = False) -> str:
    """Square-ish bf16 GeMMs from 256 to 16384: time = overhead + 2mnk / effective."""
    lines = ["m,n,k,dtype," + ("tflops" if tflops else "seconds")]
    for dim in (256, 512, 1024, 2048, 4096, 8192, 16384):
        for m, n, k in ((dim, dim, dim), (2 * dim, dim, dim // 2)):
            seconds = noisy(rng, GEMM_OVERHEAD + 2 * m * n * k / GEMM_EFFECTIVE)
            value = 2 * m * n * k / seconds / 1e12 if tflops else seconds
            lines.append(f"{m},{n},{k},bf16,{value!r}")
    return "\n".join(lines) + "\n"


def close(value: float, truth: float, tolerance: float) -> bool:
    return math.isfinite(value) and abs(value / truth - 1) <= tolerance


def _table_rows(op: MeasuredOp, rng: np.random.Generator) -> list[tuple[int, int, float]]:
    """(ranks, nccl-tests size, seconds) over every ring and shard."""
    rings = (2,) if op is SR else RINGS
    return [
        (ranks, shard if op is SR else shard * ranks, sample(rng, op, ranks, shard))
        for ranks in rings
        for shard in SHARDS
    ]


def rccl_csv(op: MeasuredOp, rng: np.random.Generator) -> str:
    """An rccl-tests ``--output_format csv`` style file: one row per size and placement."""
    lines = ["collective,nranks,size (B),type,redop,inPlace,time (us),algBw (GB/s),busBw (GB/s)"]
    for ranks, size, seconds in _table_rows(op, rng):
        algbw = size / seconds / 1e9
        for in_place in (0, 1):
            lines.append(
                f"{op.value},{ranks},{size},float,sum,{in_place},{seconds * 1e6:.3f},"
                f"{algbw:.3f},{algbw * busbw_factor(op, ranks):.3f}"
            )
    return "\n".join(lines) + "\n"


def rccl_json(op: MeasuredOp, rng: np.random.Generator) -> str:
    """An rccl-tests ``--output_format json`` style file: a list of result objects."""
    results = [
        {
            "name": f"{op.value}_perf",
            "nranks": ranks,
            "size": size,
            "type": "float",
            "inPlace": 0,
            "time_us": round(seconds * 1e6, 3),
            "algBw": round(size / seconds / 1e9, 4),
        }
        for ranks, size, seconds in _table_rows(op, rng)
    ]
    return json.dumps({"results": results}, indent=1) + "\n"


def markdown_table(op: MeasuredOp, rng: np.random.Generator, *, bandwidth_only: bool) -> str:
    """A Markdown report as TPU microbenchmark write-ups publish them: a heading naming the op,
    then ``| ranks | message size (B) | time (ms) |`` or, with ``bandwidth_only``, the achieved
    bandwidth instead of the time."""
    title = op.value.replace("_", "-")
    last = "algbw (GB/s)" if bandwidth_only else "time (ms)"
    lines = [f"## ICI {title} sweep", "", f"| num_devices | message size (B) | {last} |"]
    lines.append("|---:|---:|---:|")
    for ranks, size, seconds in _table_rows(op, rng):
        value = f"{size / seconds / 1e9:.6g}" if bandwidth_only else f"{seconds * 1e3:.6g}"
        lines.append(f"| {ranks} | {size} | {value} |")
    return "\n".join(lines) + "\n\nMeasured with jax.block_until_ready around each call.\n"


def placed(text: str, ranks: int, hosts: int, device: str = "NVIDIA H100 80GB HBM3") -> str:
    """A :func:`nccl_log` with rank r on host ``node<r // (ranks / hosts)>`` and the device
    named."""
    per_host = ranks // hosts

    def host(match: re.Match[str]) -> str:
        rank = int(match.group(1))
        return f"Rank {rank:2d} Group  0 Pid  31337 on node{rank // per_host:02d} device"

    text = re.sub(r"Rank\s+(\d+) Group  0 Pid  31337 on\s+testnode device", host, text)
    return text.replace("Example Accelerator 80GB", device)
