"""GeMM timings for the effective FLOPS of the compute model (§3.2.2, §4.5).

CSV or JSONL, one row per timed GeMM ``(m × k) · (k × n)``:

=========  ========  ===================================================================
column     required  meaning
=========  ========  ===================================================================
m, n, k    yes       GeMM dimensions, integers >= 1
dtype      yes       operand type (``bf16``, ``fp16``, ``fp32``, ``fp8`` ...)
seconds    one of    time of one GeMM in seconds
tflops     one of    achieved TFLOP/s, converted as seconds = 2·m·n·k / (tflops·10¹²)
repeats    no        how many timings the row averages (fit weight), default 1
=========  ========  ===================================================================
"""

from __future__ import annotations

from meshtune.calibrate._common import (
    FileLog,
    GemmMeasurement,
    LineReport,
    LogFormat,
    count_field,
    number_field,
    read_rows,
)

REQUIRED = frozenset({"m", "n", "k", "dtype"})
OPTIONAL = frozenset({"seconds", "tflops", "repeats"})

BYTES_PER_ELEMENT = {
    "fp8": 1,
    "e4m3": 1,
    "e5m2": 1,
    "int8": 1,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "half": 2,
    "float16": 2,
    "fp32": 4,
    "tf32": 4,
    "float": 4,
    "float32": 4,
    "fp64": 8,
    "double": 8,
    "float64": 8,
}
"""Operand width of the dtype names a GeMM log may use (``bytes_per_element`` of a profile)."""


def parse(path: str, text: str, *, strict: bool = False) -> FileLog:
    """Read a GeMM CSV / JSONL file (columns in the module doc) into GeMM timings."""
    report = LineReport(path, strict=strict)
    gemms = []
    for number, row in read_rows(path, text, report, required=REQUIRED, optional=OPTIONAL):
        has_seconds, has_tflops = bool(row.get("seconds")), bool(row.get("tflops"))
        if has_seconds == has_tflops:
            report.skip(number, "give exactly one of seconds and tflops")
            continue
        dims = [count_field(row, c, report, number, minimum=1) for c in ("m", "n", "k")]
        repeats = (
            count_field(row, "repeats", report, number, minimum=1) if row.get("repeats") else 1
        )
        value = number_field(row, "seconds" if has_seconds else "tflops", report, number)
        dtype = row["dtype"].strip().lower()
        if not dtype:
            report.skip(number, "empty dtype")
            continue
        m, n, k = dims
        if m is None or n is None or k is None or repeats is None or value is None:
            continue
        seconds = value if has_seconds else 2.0 * m * n * k / (value * 1e12)
        gemms.append(GemmMeasurement(m, n, k, dtype, seconds, path, number, repeats))
    return report.file_log(
        LogFormat.GEMM, gemms=gemms, empty="no usable GeMM rows (see --template for the columns)"
    )
