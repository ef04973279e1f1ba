"""Pure cost functions: numbers in, numbers out, no I/O (MeshSlice §3.2.2).

:mod:`~meshtune.cost.schedule` is the shared vocabulary (communications, their time and
traffic, pass costs); one module per algorithm family prices its passes.
"""

from meshtune.cost.collectives import CommTime, collective_time
from meshtune.cost.compute import gemm_time
from meshtune.cost.schedule import AxisTraffic, Comm, PassCost, Traffic, traffic

__all__ = [
    "AxisTraffic",
    "Comm",
    "CommTime",
    "PassCost",
    "Traffic",
    "collective_time",
    "gemm_time",
    "traffic",
]
