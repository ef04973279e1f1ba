"""Properties of the log parsers: launcher prefixes and noise lines never change what is read,
and no mutation of a real-shaped sample ends in anything but measurements (that fit or fail to
fit with one clear error) or a one-line LogFormatError; NumPy warnings are errors here, so a
degenerate fit cannot slip through as a RuntimeWarning either."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshtune.calibrate import PARSERS, ParsedLogs, ParseOptions, detect_format, fit_profile
from meshtune.calibrate.formats import nccl
from meshtune.errors import MeshtuneError
from meshtune.hardware.calibration import MeasuredOp

SAMPLES = sorted((Path(__file__).parent / "samples").iterdir())

PREFIXES = st.sampled_from(["", "0: ", "  3: ", "[1,0]<stdout>:", "[1,12]<stdout>: "])
NOISE = st.sampled_from(
    [
        "node7:4242:4242 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.7<0>",
        "+ srun --mpi=pmix -l ./build/all_gather_perf_mpi -b 8K -e 8G -f 2",
        "Tue Mar  4 10:12:55 UTC 2025",
        "WARNING: Open MPI accepted a TCP connection from what appears to be another job",
        "",
    ]
)


def nccl_table(rows: list[tuple[int, float]], prefix: str, noise: list[str]) -> str:
    """An all_gather_perf table on 4 ranks whose rows are ``(per-rank shard, µs)``."""
    head = [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5",
        *(
            f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on node0 device  {r} [0x1b] GPU"
            for r in range(4)
        ),
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
    ]
    body = []
    for i, (shard, micros) in enumerate(rows):
        size = 4 * shard
        algbw = size / (micros * 1e-6) / 1e9
        body.append(
            f"{size:12d} {size // 4:12d}     float    none      -1 {micros:8.2f} "
            f"{algbw:7.2f} {algbw * 0.75:7.2f}      0"
        )
        body.append(noise[i % len(noise)])
    lines = ["$ ./build/all_gather_perf -g 4", *head, *body, "# Avg bus bandwidth    : 1.0"]
    return "\n".join(prefix + line if line else line for line in lines) + "\n"


rows = st.lists(
    st.tuples(st.integers(1, 2**28), st.floats(1.0, 1e6).map(lambda t: round(t, 2))),
    min_size=1,
    max_size=12,
    unique_by=lambda r: r[0],
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows, prefix=PREFIXES, noise=st.lists(NOISE, min_size=1, max_size=4))
def test_prefixes_and_noise_lines_do_not_change_what_is_read(
    rows: list[tuple[int, float]], prefix: str, noise: list[str]
) -> None:
    text = nccl_table(rows, prefix, noise)
    assert detect_format(text) is not None
    log = nccl.parse("ag.log", text)
    clean = nccl.parse("ag.log", nccl_table(rows, "", [""]))
    got = [(m.op, m.ranks, m.shard_bytes, m.seconds) for m in log.measurements]
    assert got == [(m.op, m.ranks, m.shard_bytes, m.seconds) for m in clean.measurements]
    assert got == [(MeasuredOp.ALL_GATHER, 4, float(s), t * 1e-6) for s, t in rows]


def mutate(text: str, rng: random.Random) -> str:
    """One random edit of the kinds real files suffer: truncation, a dropped or doubled line, a
    digit turned into a letter or a sign, a stray token, swapped lines."""
    lines = text.splitlines()
    kind = rng.randrange(7)
    i = rng.randrange(len(lines)) if lines else 0
    if kind == 0:
        return text[: rng.randrange(len(text) + 1)]
    if kind == 1 and lines:
        del lines[i]
    elif kind == 2 and lines:
        lines.insert(i, lines[i])
    elif kind == 3:
        spots = [k for k, c in enumerate(text) if c.isdigit()]
        if spots:
            k = rng.choice(spots)
            return text[:k] + rng.choice("O-e.x9") + text[k + 1 :]
    elif kind == 4 and lines:
        lines[i] += rng.choice([" 1e-300", " nan", " inf", " -1", " ,", " |", "µs"])
    elif kind == 5 and len(lines) > 1:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines.insert(i, rng.choice(["1 2 3", "| 1 | 2 |", "{}", "[", "size,time", "# Size 1"]))
    return "\n".join(lines) + "\n"


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_mutated_samples_parse_or_fail_with_one_clear_error(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    rng = random.Random(path.name)
    for _ in range(40):
        mutated = mutate(text, rng)
        for options in (
            ParseOptions(),
            ParseOptions(strict=True, ranks=4, op=MeasuredOp.ALL_GATHER),
        ):
            fmt = detect_format(mutated)
            if fmt is None:
                continue
            try:
                log = PARSERS[fmt].parse(path.name, mutated, options)
            except MeshtuneError as exc:
                message = str(exc)
                assert message and "\n" not in message and "Traceback" not in message
                continue
            for m in log.measurements:
                assert m.ranks >= 2 and m.shard_bytes > 0 and 1e-9 <= m.seconds <= 1e5
            for g in log.gemms:
                assert min(g.m, g.n, g.k) >= 1 and 1e-9 <= g.seconds <= 1e5
            try:  # and the fit of what was read fails cleanly too
                fit_profile(ParsedLogs(files=(log,)), peak_flops_per_s=1e15)
            except MeshtuneError as exc:
                assert "\n" not in str(exc)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=300))
def test_arbitrary_text_is_read_or_refused_cleanly(text: str) -> None:
    fmt = detect_format(text)
    if fmt is None:
        return
    try:
        PARSERS[fmt].parse("x.log", text, ParseOptions())
    except MeshtuneError as exc:
        assert "\n" not in str(exc)
