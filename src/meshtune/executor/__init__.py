"""NumPy virtual-mesh executor: ring collectives and one module per algorithm (§3.1).

Imports NumPy; the CLI imports this package only inside ``meshtune verify``. Algorithms reach
their executors through the registry (:meth:`meshtune.algorithms.base.Algorithm.execute`).
"""

from meshtune.executor.collectives import all_gather, reduce_scatter
from meshtune.executor.mesh import AxisCounter, VirtualMesh, dense_gemm, shard, unshard

__all__ = [
    "AxisCounter",
    "VirtualMesh",
    "all_gather",
    "dense_gemm",
    "reduce_scatter",
    "shard",
    "unshard",
]
