"""Wang's pass floors priced without communication lists, and on a family of meshes at once
(issue 17).

:func:`meshtune.cost.wang.wang_floors` prices the plain collective and the shift of every split
axis from their (kind, axis, steps, bytes), the search asking it of every mesh of a family.
The lists it stands for are :func:`meshtune.cost.wang._parts`' at S = 1 through
:func:`~meshtune.cost.schedule.parallel_time`: this test keeps that form as the oracle and
asks for the same floats, to the bit, on every mesh shape (rings of one, two and more chips,
P × 1), dataflow, profile (half-duplex both-ways shifts, tiers) and layer size drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.algorithms.registry import REGISTRY
from meshtune.cost.config import Config
from meshtune.cost.schedule import parallel_time
from meshtune.cost.wang import _parts, split_axes, wang_floors
from meshtune.dataflow import GemmOp, Stationary, layer_dataflow
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import ring_profile
from meshtune.model.layers import FcLayer
from test_algorithms import ROWS
from test_vector_pricing import MESHES, PROFILES


def listed_floors(ops: Sequence[GemmOp], mesh: Mesh, profile: HardwareProfile) -> list[float]:
    """The floors as the communication lists give them (the form before issue 17's change)."""
    rate = profile.effective_flops_per_s * mesh.rows * mesh.cols
    floors = []
    for op in ops:
        least = math.inf
        for axis in split_axes(mesh):
            config = Config.of(split=axis + 1, slices=1)
            plain, one, p, _ = _parts(op, mesh, config, profile.bytes_per_element)
            shifts = (p - 1) * parallel_time(one, profile)
            least = min(least, max(parallel_time(plain, profile), shifts))
        floors.append(max(least, 2.0 * op.m * op.n * op.k / rate))
    return floors


@settings(max_examples=300)
@given(
    profile=st.sampled_from(sorted(PROFILES)),
    mesh=st.sampled_from([*MESHES, Mesh(3, 5), Mesh(2, 1), Mesh(1, 2), Mesh(12, 3)]),
    row=st.sampled_from(ROWS),
    tokens=st.integers(1, 70_000),
    fin=st.integers(1, 30_000),
    fout=st.integers(1, 30_000),
    groups=st.sampled_from([1, 3]),
    ringed=st.booleans(),
)
def test_wang_floors_equal_the_listed_floors_to_the_bit(
    profile: str,
    mesh: Mesh,
    row: tuple[Stationary, bool],
    tokens: int,
    fin: int,
    fout: int,
    groups: int,
    ringed: bool,
) -> None:
    chosen = PROFILES[profile]
    if ringed:  # the links a 1D ring runs on (Algorithm.layer_floor prices with these)
        chosen = ring_profile(chosen, mesh)
    choice = layer_dataflow(FcLayer("h", tokens, fin, fout, None, groups), *row)
    assert wang_floors(choice.ops, mesh, chosen) == listed_floors(choice.ops, mesh, chosen)


@settings(max_examples=200)
@given(
    drawn=st.lists(
        st.tuples(
            st.sampled_from([*MESHES, Mesh(3, 5), Mesh(2, 1), Mesh(1, 2), Mesh(12, 3)]),
            st.sampled_from(sorted(PROFILES)),
        ),
        min_size=2,
    ),
    row=st.sampled_from(ROWS),
    tokens=st.integers(1, 70_000),
    fin=st.integers(1, 30_000),
    fout=st.integers(1, 30_000),
    groups=st.sampled_from([1, 3]),
)
def test_wang_family_floors_are_each_mesh_s_layer_floor_to_the_bit(
    drawn: list[tuple[Mesh, str]],
    row: tuple[Stationary, bool],
    tokens: int,
    fin: int,
    fout: int,
    groups: int,
) -> None:
    # meshtune.cost.wang_family: the floors of a family's meshes in one NumPy evaluation (1D TP
    # and FSDP, one mesh of each size, keep their floors mesh by mesh)
    algorithm = REGISTRY["wang"]
    meshes = [mesh for mesh, _ in drawn]
    profiles = [PROFILES[profile] for _, profile in drawn]
    ops = layer_dataflow(FcLayer("h", tokens, fin, fout, None, groups), *row).ops
    family = algorithm.family_floor(meshes, profiles)
    assert family is not None
    assert family(ops) == [
        algorithm.layer_floor(ops, mesh, profile)
        for mesh, profile in zip(meshes, profiles, strict=True)
    ]
