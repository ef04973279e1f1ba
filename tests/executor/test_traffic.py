"""Hand-worked values of :func:`predicted_traffic` (§3.2.2: S × (P − 1) steps × shard bytes)."""

from __future__ import annotations

import pytest

from meshslice_helpers import predicted_traffic
from meshtune.cost.schedule import AxisTraffic
from meshtune.dataflow import Dataflow, GemmOp, Pass
from meshtune.hardware.mesh import Mesh

NONE = AxisTraffic(0, 0, 0)  # the depth axis of a 2D mesh


def op(dataflow: Dataflow, m: int, n: int, k: int, transposed: bool = False) -> GemmOp:
    return GemmOp(Pass.FORWARD, dataflow, m, n, k, transposed, "test")


def test_os_gathers_a_on_the_column_ring_and_b_on_the_row_ring() -> None:
    # 4×2 mesh, P = 8, S = 2, e = 2. A sub-shard: 64·32/(8·2) = 128 el = 256 B, on axis 1
    # (P_c = 2: 1 step per iteration). B sub-shard: 32·16/16 = 32 el = 64 B, on axis 0 (3 steps).
    got = predicted_traffic(op(Dataflow.OS, 64, 16, 32), Mesh(4, 2), 2, 2)
    assert got == (AxisTraffic(2, 6, 6 * 64), AxisTraffic(2, 2, 2 * 256), NONE)


def test_ls_gathers_b_on_rows_and_reduce_scatters_c_on_columns() -> None:
    # B: 16·32/(8·2) = 32 el → axis 0, 3 steps × 2 iterations × 64 B;
    # C: 64·16/16 = 64 el → axis 1, 1 step × 2 iterations × 128 B.
    got = predicted_traffic(op(Dataflow.LS, 64, 16, 32), Mesh(4, 2), 2, 2)
    assert got == (AxisTraffic(2, 6, 384), AxisTraffic(2, 2, 256), NONE)


def test_rs_gathers_a_on_columns_and_reduce_scatters_c_on_rows() -> None:
    # A: 32·64/16 = 128 el → axis 1: 2 × 1 × 256 B; C: 64·16/16 = 64 el → axis 0: 2 × 3 × 128 B.
    got = predicted_traffic(op(Dataflow.RS, 64, 16, 32), Mesh(4, 2), 2, 2)
    assert got == (AxisTraffic(2, 6, 768), AxisTraffic(2, 2, 512), NONE)


def test_transposed_swaps_the_physical_axes() -> None:
    # Transposed: row ring = axis 1 (P_c = 2), column ring = axis 0 (P_r = 4).
    got = predicted_traffic(op(Dataflow.OS, 64, 16, 32, transposed=True), Mesh(4, 2), 2, 2)
    assert got == (AxisTraffic(2, 6, 6 * 256), AxisTraffic(2, 2, 2 * 64), NONE)


def test_a_ring_of_one_chip_moves_nothing() -> None:
    got = predicted_traffic(op(Dataflow.OS, 8, 8, 8), Mesh(1, 4), 4, 1)
    # A: 64/4 = 16 el × 4 B on axis 1, 3 steps; axis 0 has rings of one chip.
    assert got == (AxisTraffic(0, 0, 0), AxisTraffic(1, 3, 3 * 64), NONE)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="slices must be >= 1"):
        predicted_traffic(op(Dataflow.OS, 8, 8, 8), Mesh(2, 2), 2, 0)
    with pytest.raises(ValueError, match="fractional number of bytes"):
        predicted_traffic(op(Dataflow.OS, 3, 8, 3), Mesh(2, 2), 2, 1)
