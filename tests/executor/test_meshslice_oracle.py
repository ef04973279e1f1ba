"""Oracle tests of the executor's MeshSlice (§3.1, Figure 5, Algorithm 2): sharded == dense.

Every dataflow, transposed or not, on 1×N, N×1 and rectangular meshes, S = 1 (Collective 2D
GeMM) and S > 1; the counters must also equal :func:`predicted_traffic`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshslice_helpers import predicted_traffic, run_gemm
from meshtune.dataflow import Dataflow, GemmOp, Pass
from meshtune.executor import VirtualMesh, dense_gemm, shard, unshard
from meshtune.executor.meshslice import slice_col, slice_row
from meshtune.hardware.mesh import Mesh

MESHES = [(1, 1), (1, 4), (4, 1), (2, 3), (4, 2)]
BPE = 2


def make_op(
    dataflow: Dataflow, rows: int, cols: int, slices: int, block: int, transposed: bool, mult: int
) -> GemmOp:
    """An op whose dims divide over the mesh and whose sliced dim splits into S·B·lcm groups."""
    base = math.lcm(rows, cols)
    dims = {"m": 2 * base, "n": 3 * base, "k": base}
    sliced = {Dataflow.OS: "k", Dataflow.LS: "n", Dataflow.RS: "m"}[dataflow]
    dims[sliced] = mult * block * base * slices
    return GemmOp(Pass.FORWARD, dataflow, dims["m"], dims["n"], dims["k"], transposed, "test")


def check(op: GemmOp, rows: int, cols: int, slices: int, block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape_a, shape_b = op.operand_shapes
    a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    mesh = VirtualMesh(rows, cols, BPE)
    got = run_gemm(op, a, b, mesh, slices=slices, block=block)
    np.testing.assert_allclose(got, dense_gemm(op, a, b), rtol=1e-10, atol=1e-10)
    counted = tuple(c.as_tuple() for c in mesh.counters)
    assert counted == predicted_traffic(op, Mesh(rows, cols), BPE, slices)


@pytest.mark.parametrize(("rows", "cols"), MESHES)
@pytest.mark.parametrize("dataflow", list(Dataflow))
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("slices", [1, 3])
def test_sharded_equals_dense(
    rows: int, cols: int, dataflow: Dataflow, transposed: bool, slices: int
) -> None:
    op = make_op(dataflow, rows, cols, slices, block=2, transposed=transposed, mult=2)
    check(op, rows, cols, slices, block=2, seed=rows * 10 + cols)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 4),
    cols=st.integers(1, 4),
    dataflow=st.sampled_from(list(Dataflow)),
    transposed=st.booleans(),
    slices=st.integers(1, 4),
    block=st.sampled_from([1, 2, 4]),
    mult=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_sharded_equals_dense_property(
    rows: int,
    cols: int,
    dataflow: Dataflow,
    transposed: bool,
    slices: int,
    block: int,
    mult: int,
    seed: int,
) -> None:
    op = make_op(dataflow, rows, cols, slices, block, transposed, mult)
    check(op, rows, cols, slices, block, seed)


def test_slice_col_is_algorithm_2() -> None:
    # 1 row, C = 16 columns, S = 2, B = 2: groups of 2 columns alternate between the slices.
    x = np.arange(16.0).reshape(1, 16)
    np.testing.assert_array_equal(slice_col(x, 2, 0, 2), [[0, 1, 4, 5, 8, 9, 12, 13]])
    np.testing.assert_array_equal(slice_col(x, 2, 1, 2), [[2, 3, 6, 7, 10, 11, 14, 15]])
    np.testing.assert_array_equal(slice_row(x.T, 2, 1, 2), slice_col(x, 2, 1, 2).T)


def test_slicing_refuses_a_width_that_is_not_whole_blocks() -> None:
    with pytest.raises(ValueError, match="do not split into 3 slices of 2-blocks"):
        slice_col(np.zeros((1, 8)), 3, 0, 2)


def test_shard_round_trips_and_puts_block_ij_on_chip_ij() -> None:
    dense = np.arange(24.0).reshape(4, 6)
    stacked = shard(dense, 2, 3)
    np.testing.assert_array_equal(stacked[1, 2], dense[2:4, 4:6])
    np.testing.assert_array_equal(unshard(stacked), dense)


def test_run_gemm_refuses_operands_of_the_wrong_shape() -> None:
    op = GemmOp(Pass.FORWARD, Dataflow.LS, 2, 2, 4, False, "test")
    with pytest.raises(ValueError, match="do not fit LS"):
        run_gemm(op, np.zeros((2, 4)), np.zeros((4, 2)), VirtualMesh(1, 1, BPE), slices=1, block=1)
