"""Short spellings of the MeshSlice registry entry for tests written per slice count."""

from __future__ import annotations

from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.config import Config
from meshtune.cost.schedule import PassCost, Traffic, traffic
from meshtune.dataflow import GemmOp, LayerDataflow
from meshtune.executor.mesh import Array, VirtualMesh
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile

MESHSLICE = REGISTRY["meshslice"]


def meshslice_pass(op: GemmOp, mesh: Mesh, profile: HardwareProfile, slices: int) -> PassCost:
    """MeshSlice's cost of ``op`` at ``slices`` slices."""
    return MESHSLICE.cost(op, mesh, profile, Config.of(slices=slices))


def slice_counts(
    choice: LayerDataflow, mesh: Mesh, block: int
) -> tuple[tuple[int, ...], str | None]:
    """MeshSlice's valid slice counts of a layer (or the reason there are none)."""
    configs, reason = MESHSLICE.configs(choice, mesh, block)
    return tuple(c["slices"] for c in configs), reason


def predicted_traffic(op: GemmOp, mesh: Mesh, bytes_per_element: int, slices: int) -> Traffic:
    """Traffic per physical axis (0, 1, 2) that MeshSlice's model predicts."""
    return traffic(MESHSLICE.comms(op, mesh, Config.of(slices=slices), bytes_per_element))


def run_gemm(
    op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, *, slices: int, block: int
) -> Array:
    """Run MeshSlice on the virtual mesh."""
    return MESHSLICE.execute(op, a, b, mesh, Config.of(slices=slices), block)
