"""The partition study of "Slicing Is All You Need" (Brock & Golin), Figures 2–3, in meshtune.

MLP-1: ``C(m × 48K) = A(m × 12K) · B(12K × 48K)``; MLP-2: ``C(m × 12K) = A(m × 48K) ·
B(48K × 12K)``; m = batch size, growing. For every partitioning family the paper plots (column
block, inner product, outer product, 2D block, row block) and the 1D TP / FSDP layouts users
know, the best replication factor c ≤ 4 and stationary matrix, as FP32 FLOP utilization of the
busiest process, on the paper's two systems (§5.2, Table 2): 12 PVC tiles (26.5 GB/s
per-device link bandwidth, 22.7 TFLOP/s FP32) and 8 H100 (450 GB/s, 67 TFLOP/s). The profiles
are built here from Table 2 (FP32: 4 bytes per element); the paper gives no latencies, so every
one-sided operation is charged an assumed 10 µs launch and 2 µs synchronisation.

Run: ``python bench/onesided_study.py`` (prints the Markdown tables of docs/reproduction.md).
"""

from __future__ import annotations

from meshtune.compare.gemm import RankedConfig, gemm_study
from meshtune.hardware.profile import HardwareProfile
from meshtune.partition.partitioning import NAMED, Partitioning

K = 1024
BATCHES = (4 * K, 16 * K, 64 * K)
FAMILIES: tuple[tuple[str, Partitioning], ...] = (
    ("column block (A, B, C columns)", NAMED["column_block"]),
    ("inner product (A rows, B columns, C 2D)", NAMED["inner_product"]),
    ("outer product (A columns, B rows, C 2D)", NAMED["outer_product"]),
    ("2D block", NAMED["2d_blocks"]),
    ("row block = FSDP (A, B, C rows)", NAMED["fsdp"]),
    ("1D TP column-parallel (A rows, B, C columns)", NAMED["1d_tp_column"]),
    ("1D TP row-parallel (A columns, B, C rows)", NAMED["1d_tp_row"]),
)
MLPS = (("MLP-1 (n = 48K, k = 12K)", 48 * K, 12 * K), ("MLP-2 (n = 12K, k = 48K)", 12 * K, 48 * K))


def table2_profile(name: str, link_bytes_per_s: float, fp32_flops_per_s: float) -> HardwareProfile:
    """A profile from the paper's Table 2: one link bandwidth for every axis and kind."""
    link = {"t_launch_s": 10e-6, "t_sync_s": 2e-6, "bw_bytes_per_s": link_bytes_per_s}
    table = {"axis0": link, "axis1": link}
    return HardwareProfile.model_validate(
        {
            "name": name,
            "description": f"{name} from Table 2 of Brock & Golin (FP32)",
            "sources": ["Brock & Golin, Table 2; latencies assumed (10 us launch, 2 us sync)"],
            "peak_flops_per_s": fp32_flops_per_s,
            "effective_flops_per_s": fp32_flops_per_s,
            "bytes_per_element": 4,
            "slice_block": 8,
            "all_gather": table,
            "reduce_scatter": table,
            "send_recv": table,
        }
    )


SYSTEMS = (
    ("PVC, 12 tiles (Figure 2)", table2_profile("pvc", 26.5e9, 22.7e12), 12),
    ("H100, 8 GPUs (Figure 3)", table2_profile("h100", 450e9, 67e12), 8),
)


def _cell(rows: list[RankedConfig], part: Partitioning) -> str:
    """The best configuration of ``part``: ``util % (c, S-X)``."""
    mine = [r for r in rows if r.layout.split(" c=")[0] == part.name]
    if not mine:
        return "-"
    best = min(mine, key=lambda r: r.time_s)
    c, stationary = best.layout.split(" c=")[1].split(" ")
    return f"{100 * best.utilization:.0f} % (c={c}, {stationary})"


def main() -> None:
    """Print one Markdown table per system and MLP."""
    for system, profile, chips in SYSTEMS:
        for mlp, n, k in MLPS:
            studies = {
                m: gemm_study(m, n, k, chips, profile, ["onesided"], rank=True) for m in BATCHES
            }
            print(f"\n**{system}, {mlp}**: FP32 utilization of the best c and stationary matrix\n")
            print("| partitioning | " + " | ".join(f"m = {m // K}K" for m in BATCHES) + " |")
            print("|---" * (len(BATCHES) + 1) + "|")
            for label, part in FAMILIES:
                cells = [_cell(studies[m].ranking, part) for m in BATCHES]
                print(f"| {label} | " + " | ".join(cells) + " |")
            best = [studies[m].ranking[0] for m in BATCHES]
            print(
                "| **best of all 28 × c × S** | "
                + " | ".join(f"{100 * r.utilization:.0f} % {r.layout}" for r in best)
                + " |"
            )


if __name__ == "__main__":
    main()
