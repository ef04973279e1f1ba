"""Pure cost functions: numbers in, numbers out, no I/O (MeshSlice §3.2.2)."""

from meshtune.cost.collectives import CommTime, collective_time
from meshtune.cost.meshslice import MeshAxes, PassCost, meshslice_pass

__all__ = ["CommTime", "MeshAxes", "PassCost", "collective_time", "meshslice_pass"]
