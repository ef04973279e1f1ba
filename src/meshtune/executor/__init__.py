"""NumPy virtual-mesh executor: ring collectives, MeshSlice GeMMs and plan verification (§3.1).

Imports NumPy; the CLI imports this package only inside ``meshtune verify``.
"""

from meshtune.executor.algorithms import dense_gemm, meshslice, run_gemm, slice_col, slice_row
from meshtune.executor.collectives import all_gather, reduce_scatter
from meshtune.executor.mesh import AxisCounter, VirtualMesh, shard, unshard
from meshtune.executor.verify import PassCheck, VerifyReport, verify_plan

__all__ = [
    "AxisCounter",
    "PassCheck",
    "VerifyReport",
    "VirtualMesh",
    "all_gather",
    "dense_gemm",
    "meshslice",
    "reduce_scatter",
    "run_gemm",
    "shard",
    "slice_col",
    "slice_row",
    "unshard",
    "verify_plan",
]
