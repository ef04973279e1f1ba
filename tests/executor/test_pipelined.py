"""Pipelined ring broadcast / reduce and the skew (§2.3.2, §2.3.3 Figure 3 left): dense
equality and counters that come from the arrays moved (bubbles included)."""

from __future__ import annotations

import numpy as np
import pytest

from meshtune.executor.collectives import broadcast, reduce, skew
from meshtune.executor.mesh import VirtualMesh

BPE = 2


@pytest.mark.parametrize("ring", [2, 3, 5])
@pytest.mark.parametrize("packets", [1, 2, 4])
@pytest.mark.parametrize("axis", [0, 1])
def test_broadcast_streams_packets_in_p_plus_d_minus_2_stages(
    ring: int, packets: int, axis: int
) -> None:
    mesh = VirtualMesh(ring, 3, BPE) if axis == 0 else VirtualMesh(3, ring, BPE)
    x = np.random.default_rng(ring).standard_normal((mesh.rows, mesh.cols, 4, 2))
    root = ring - 1
    got = broadcast(mesh, x[None], axis, [root], packets, transposed=False)[0]
    for i in range(mesh.rows):
        for j in range(mesh.cols):
            want = x[root, j] if axis == 0 else x[i, root]
            np.testing.assert_array_equal(got[i, j], want)
    # One launch, P + D − 2 synchronised stages, every link carries the 8 elements once.
    assert mesh.counters[axis].as_tuple() == (1, ring + packets - 2, 8 * BPE)
    assert mesh.counters[1 - axis].as_tuple() == (0, 0, 0)


@pytest.mark.parametrize("ring", [2, 3, 5])
@pytest.mark.parametrize("packets", [1, 2, 4])
@pytest.mark.parametrize("axis", [0, 1])
def test_reduce_sums_into_the_root_in_p_plus_d_minus_2_stages(
    ring: int, packets: int, axis: int
) -> None:
    mesh = VirtualMesh(ring, 3, BPE) if axis == 0 else VirtualMesh(3, ring, BPE)
    x = np.random.default_rng(ring).standard_normal((mesh.rows, mesh.cols, 4, 2))
    root = 1 % ring
    got = reduce(mesh, x[None], axis, [root], packets, transposed=False)[0]
    summed = x.sum(axis=axis)
    for other in range(3):
        at_root = got[root, other] if axis == 0 else got[other, root]
        np.testing.assert_allclose(at_root, summed[other], rtol=1e-12)
    assert mesh.counters[axis].as_tuple() == (1, ring + packets - 2, 8 * BPE)


def test_skew_moves_each_ring_by_its_hops_and_counts_the_busiest_ring() -> None:
    mesh = VirtualMesh(4, 4, BPE)
    x = np.arange(16.0).reshape(4, 4, 1, 1)
    hops = np.array([0, 3, 2, 1])  # (P − i) mod P for rows i = 0 … 3
    got = skew(mesh, x, 1, hops, transposed=False)
    for i in range(4):
        for j in range(4):
            assert got[i, j, 0, 0] == x[i, (j - hops[i]) % 4, 0, 0] == x[i, (i + j) % 4, 0, 0]
    # Each row the shorter way: row 1 one hop backward, row 2 two forward, row 3 one forward,
    # both directions at once: two send-recv shifts, row 2's links carry 2 elements.
    assert mesh.counters[1].as_tuple() == (2, 2, 2 * BPE)


def test_a_batch_of_broadcasts_counts_each_operation() -> None:
    # Two broadcasts from different roots of a ring of 4, D = 2: each is one launch and
    # 4 + 2 − 2 = 4 stages, and each one's busiest link carries its 6 elements.
    mesh = VirtualMesh(2, 4, BPE)
    x = np.random.default_rng(3).standard_normal((2, 2, 4, 3, 2))
    got = broadcast(mesh, x, 1, [0, 3], 2, transposed=False)
    for b, root in enumerate((0, 3)):
        for i in range(2):
            for j in range(4):
                np.testing.assert_array_equal(got[b, i, j], x[b, i, root])
    assert mesh.counters[1].as_tuple() == (2, 2 * 4, 2 * 6 * BPE)
