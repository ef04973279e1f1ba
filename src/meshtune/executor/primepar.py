"""PrimePar's spatial-temporal primitive on a 2^k × 2^k virtual mesh (Wang et al., ASPLOS 2024
[33]; the schedules and their costs are in :mod:`meshtune.cost.primepar`).

:func:`layout` is the slides' dimension slice indices: which block of A, B and C every chip
holds at step t of each pass. The passes really move the shards: "from the right" and "from
below" are send-recv shifts against :func:`meshtune.executor.collectives.shift`'s direction
(:func:`_from_next`), a diagonal shift is two hops (one per axis, no diagonal links on a 2D
torus), and the skew of I and unskew of dI between layers use
:func:`meshtune.executor.collectives.skew`. Every hop is one launch and one step.

Operands that a pass finds in place, because the previous phase left them there (the slides'
continuity: W and I after the forward, dO after backward data) or because they are a persistent
parameter layout (W's home), are placed by :func:`place` at no cost. :func:`forward`,
:func:`backward_data` and :func:`backward_weight` return the shards their last step held, so
the three passes can run back to back on the arrays themselves (tests/test_primepar.py checks
that they are the next phase's :func:`layout` at t = 0 and that nothing moves in between).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from meshtune.cost.config import Config
from meshtune.cost.primepar import primepar_problem
from meshtune.dataflow import Dataflow, GemmOp
from meshtune.executor.collectives import shift, skew
from meshtune.executor.mesh import Array, VirtualMesh, check_operands, shard, unshard
from meshtune.executor.meshslice import COL_RING, ROW_RING
from meshtune.hardware.mesh import Mesh

Blocks = tuple[NDArray[np.int64], NDArray[np.int64]]
"""Per chip (r, c): the (row block, column block) of a matrix it holds."""


def layout(dataflow: Dataflow, p: int, t: int) -> dict[str, Blocks]:
    """Blocks of A, B and C on every chip at step ``t`` of a pass, by the slides' DSIs.

    OS (forward ``O = I·W``): A = I (r, r + c + t), B = W (r + c + t, c), C = O (r, c).
    LS (backward data ``dI = dO·Wᵀ``): A = dO (r, c + t), B = W (r + c − 1, c + t),
    C = dI (r, r + c − 1). RS (gradient ``dW = Iᵀ·dO``, δ = [t = P − 1]): A = I (r + t,
    r + c − 1 + δ), B = dO (r + t, c − 1 + δ), C = dW (r + c − 1 + δ, c − 1 + δ). Indices mod P,
    in the canonical orientations of Figure 5 (A of RS is k × m).
    """
    r, c = np.indices((p, p), dtype=np.int64)
    if dataflow is Dataflow.OS:
        found = {"A": (r, r + c + t), "B": (r + c + t, c), "C": (r, c)}
    elif dataflow is Dataflow.LS:
        found = {"A": (r, c + t), "B": (r + c - 1, c + t), "C": (r, r + c - 1)}
    else:
        d = int(t == p - 1)
        found = {
            "A": (r + t, r + c - 1 + d),
            "B": (r + t, c - 1 + d),
            "C": (r + c - 1 + d, c - 1 + d),
        }
    return {name: (rows % p, cols % p) for name, (rows, cols) in found.items()}


def place(matrix: Array, blocks: Blocks) -> Array:
    """Stacked shards of ``matrix`` (P × P blocks) with chip (r, c) holding ``blocks``' block."""
    p = blocks[0].shape[0]
    return np.ascontiguousarray(shard(matrix, p, p)[blocks])


def gather(stacked: Array, blocks: Blocks) -> Array:
    """The dense matrix whose shards ``stacked`` are, laid out as ``blocks`` (inverse of
    :func:`place`; the layouts are permutations: no replication)."""
    natural = np.empty_like(stacked)
    natural[blocks] = stacked
    return unshard(natural)


def _from_next(mesh: VirtualMesh, x: Array, stacked_axis: int, transposed: bool) -> Array:
    """Every chip receives its ring successor's shard ("from the right" on the row ring, "from
    below" on the column ring): :func:`shift` run the other way round the ring."""
    flipped = np.flip(x, stacked_axis)
    return np.flip(shift(mesh, flipped, stacked_axis, transposed=transposed), stacked_axis)


def _from_prev(mesh: VirtualMesh, x: Array, stacked_axis: int, transposed: bool) -> Array:
    """Every chip receives its ring predecessor's shard ("from the left" / "from above")."""
    return shift(mesh, x, stacked_axis, transposed=transposed)


def forward(mesh: VirtualMesh, a: Array, b: Array, transposed: bool) -> tuple[Array, Array, Array]:
    """P steps of ``O += I·W``, I from the right and W from below between them.

    ``a`` and ``b`` hold :func:`layout` (OS, t = 0); returns O (natural) and the I and W the
    last step held.
    """
    p = a.shape[0]
    out = np.zeros((p, p, a.shape[2], b.shape[3]))
    for t in range(p):
        out += a @ b
        if t < p - 1:
            a = _from_next(mesh, a, COL_RING, transposed)
            b = _from_next(mesh, b, ROW_RING, transposed)
    return out, a, b


def backward_data(
    mesh: VirtualMesh, a: Array, b: Array, transposed: bool
) -> tuple[Array, Array, Array]:
    """P steps of ``dI += dO·Wᵀ``, dO from the right and W from the top right (down, then
    left) between them; W goes home from the right after the last.

    ``a`` (dO) and ``b`` (W) hold :func:`layout` (LS, t = 0); returns dI (skewed, as the layout
    says), the dO the last step held and W in its home layout.
    """
    p = a.shape[0]
    out = np.zeros((p, p, a.shape[2], b.shape[2]))
    for t in range(p):
        out += a @ np.swapaxes(b, 2, 3)
        if t < p - 1:
            a = _from_next(mesh, a, COL_RING, transposed)
            b = _from_prev(mesh, b, ROW_RING, transposed)
            b = _from_next(mesh, b, COL_RING, transposed)
    if p > 1:
        b = _from_next(mesh, b, COL_RING, transposed)
    return out, a, b


def backward_weight(mesh: VirtualMesh, a: Array, b: Array, transposed: bool) -> Array:
    """P steps of ``dW += Iᵀ·dO``: I from the bottom left (right, then up) and dO from below,
    except into the last step, I from below and dO from the bottom right (left, then up); the
    running dW comes in from the right during the last step.

    ``a`` (I) and ``b`` (dO) hold :func:`layout` (RS, t = 0); returns dW in W's home layout.
    """
    p = a.shape[0]
    out = np.zeros((p, p, a.shape[3], b.shape[3]))
    for t in range(p):
        if t == p - 1 and p > 1:
            out = _from_next(mesh, out, COL_RING, transposed)
        out += np.swapaxes(a, 2, 3) @ b
        if t < p - 2:
            a = _from_prev(mesh, a, COL_RING, transposed)
            b = _from_next(mesh, b, ROW_RING, transposed)
            a = _from_next(mesh, a, ROW_RING, transposed)
        elif t == p - 2:
            a = _from_next(mesh, a, ROW_RING, transposed)
            b = _from_next(mesh, b, COL_RING, transposed)
            b = _from_next(mesh, b, ROW_RING, transposed)
    return out


def _rings(p: int) -> NDArray[np.int64]:
    return np.arange(p, dtype=np.int64)


def skew_input(mesh: VirtualMesh, x: Array, transposed: bool) -> Array:
    """Natural I (chip (r, c) holds block (r, c)) to the forward's I (r, r + c): row r moves
    P − r hops (the previous layer's O is natural)."""
    p = x.shape[0]
    return skew(mesh, x, COL_RING, (p - _rings(p)) % p, transposed=transposed)


def unskew_output(mesh: VirtualMesh, x: Array, transposed: bool) -> Array:
    """Backward data's dI (r, r + c − 1) to natural: row r moves r − 1 hops (the previous
    layer's backward passes take dO natural)."""
    p = x.shape[0]
    return skew(mesh, x, COL_RING, (_rings(p) - 1) % p, transposed=transposed)


def _side(mesh: VirtualMesh) -> int:
    problem = primepar_problem(Mesh(mesh.rows, mesh.cols))
    if problem is not None:
        raise ValueError(problem)
    return mesh.rows


def execute(op: GemmOp, a: Array, b: Array, mesh: VirtualMesh, config: Config, block: int) -> Array:
    """One pass on ``mesh`` from dense canonical operands (see the module docstring for what is
    placed at no cost); returns dense C."""
    check_operands(op, a, b)
    p = _side(mesh)
    first = layout(op.dataflow, p, 0)
    tr = op.transposed
    if op.dataflow is Dataflow.OS:
        x = skew_input(mesh, shard(a, p, p), tr)
        out, _, _ = forward(mesh, x, place(b, first["B"]), tr)
        return unshard(out)
    if op.dataflow is Dataflow.LS:
        out, _, _ = backward_data(mesh, shard(a, p, p), place(b, first["B"]), tr)
        return unshard(unskew_output(mesh, out, tr))
    out = backward_weight(mesh, place(a, first["A"]), place(b, first["B"]), tr)
    return gather(out, layout(Dataflow.RS, p, p - 1)["C"])
