"""Ring all-gather / reduce-scatter (§2.3.4, Figure 3): dense equality and exact counters."""

from __future__ import annotations

import numpy as np
import pytest

from meshtune.executor import VirtualMesh, all_gather, reduce_scatter

RINGS = [1, 2, 3, 4, 5]
BPE = 2  # counted bytes per element (arrays are float64)


def mesh_for(ring: int, axis: int, other: int = 3) -> VirtualMesh:
    return VirtualMesh(ring, other, BPE) if axis == 0 else VirtualMesh(other, ring, BPE)


@pytest.mark.parametrize("ring", RINGS)
@pytest.mark.parametrize("axis", [0, 1])
def test_all_gather_equals_concatenation_and_counts_p_minus_1_steps(ring: int, axis: int) -> None:
    mesh = mesh_for(ring, axis)
    x = np.random.default_rng(ring).standard_normal((mesh.rows, mesh.cols, 4, 6))
    got = all_gather(mesh, x, axis)
    for i in range(mesh.rows):
        for j in range(mesh.cols):
            if axis == 0:
                want = np.concatenate([x[p, j] for p in range(ring)], axis=0)
            else:
                want = np.concatenate([x[i, p] for p in range(ring)], axis=1)
            np.testing.assert_array_equal(got[i, j], want)
    shard_bytes = 4 * 6 * BPE
    expected = (1, ring - 1, (ring - 1) * shard_bytes) if ring > 1 else (0, 0, 0)
    assert mesh.counters[axis].as_tuple() == expected
    assert mesh.counters[1 - axis].as_tuple() == (0, 0, 0)


@pytest.mark.parametrize("ring", RINGS)
@pytest.mark.parametrize("axis", [0, 1])
def test_reduce_scatter_equals_sum_then_split_and_counts_output_shards(
    ring: int, axis: int
) -> None:
    mesh = mesh_for(ring, axis)
    h, w = (4 * ring, 6) if axis == 0 else (4, 6 * ring)
    x = np.random.default_rng(10 + ring).standard_normal((mesh.rows, mesh.cols, h, w))
    got = reduce_scatter(mesh, x, axis)
    total = x.sum(axis=axis)
    for i in range(mesh.rows):
        for j in range(mesh.cols):
            want = total[j][4 * i : 4 * (i + 1)] if axis == 0 else total[i][:, 6 * j : 6 * (j + 1)]
            np.testing.assert_allclose(got[i, j], want, rtol=1e-12, atol=1e-12)
    shard_bytes = 4 * 6 * BPE  # the output shard each chip ends with
    expected = (1, ring - 1, (ring - 1) * shard_bytes) if ring > 1 else (0, 0, 0)
    assert mesh.counters[axis].as_tuple() == expected
    assert mesh.counters[1 - axis].as_tuple() == (0, 0, 0)


def test_transposed_stacked_array_charges_the_other_physical_axis() -> None:
    mesh = VirtualMesh(2, 3, BPE)  # logical mesh of a transposed GeMM is 3 × 2
    x = np.zeros((3, 2, 1, 5))
    all_gather(mesh, x, 0, transposed=True)  # logical row ring = physical axis 1 (3 chips)
    assert mesh.counters[1].as_tuple() == (1, 2, 2 * 5 * BPE)
    assert mesh.counters[0].as_tuple() == (0, 0, 0)


def test_a_stacked_array_that_does_not_fit_the_ring_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit a ring of physical axis 0"):
        all_gather(VirtualMesh(2, 3, BPE), np.zeros((3, 2, 1, 1)), 0)


def test_reduce_scatter_refuses_an_extent_that_does_not_split() -> None:
    with pytest.raises(ValueError, match="cannot reduce-scatter an extent of 5"):
        reduce_scatter(VirtualMesh(2, 1, BPE), np.zeros((2, 1, 5, 1)), 0)
