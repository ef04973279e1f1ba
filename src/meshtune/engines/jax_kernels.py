"""MeshSlice 2D GeMMs as JAX ``shard_map`` programs (MeshSlice §3.1, Figure 5, Algorithm 2).

This module imports only JAX and NumPy: ``meshtune export --to jax`` copies its source verbatim
into the exported module, and ``meshtune run --engine jax`` runs the very same functions.

The device mesh has two named axes: ``"axis0"``, the ring of the P_r chips that share a mesh
column (inter-row traffic: AG_row / RdS_row), and ``"axis1"``, the ring of the P_c chips that
share a mesh row (AG_col / RdS_col). A GeMM runs on the logical r × c mesh whose rows are the
mesh axis ``row`` and whose columns are ``col``: ``("axis0", "axis1")``, or
``("axis1", "axis0")`` for a *transposed* dataflow (the same computation on the transposed
mesh). Every operand and the result are sharded ``PartitionSpec(row, col)``: matrix rows over
the logical mesh rows, matrix columns over its columns.

Every chip runs, for s = 0 … S − 1 (Figure 5):

* OS ``C = A·B``: ``C += AG_col(slice_col(A, s)) · AG_row(slice_row(B, s))``;
* LS ``C = A·Bᵀ``: ``slice_col(C, s) = RdS_col(A · AG_row(slice_row(B, s))ᵀ)``;
* RS ``C = Aᵀ·B``: ``slice_row(C, s) = RdS_row(AG_col(slice_col(A, s))ᵀ · B)``.

AG is ``jax.lax.all_gather(tiled=True)`` and RdS ``jax.lax.psum_scatter(tiled=True)`` along the
named axis. ``slice_col`` is Algorithm 2 (blocked slicing with block B): reshape the local
shard's columns to ``(C / (S·B), S, B)`` and keep index s; ``slice_row`` does the same on rows.
The loop over s is unrolled (S is static), so XLA sees every iteration and may overlap the
collectives of one iteration with the GeMM of another (software pipelining). S = 1 is the
Collective 2D GeMM (Figure 2b).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def _find_shard_map() -> Callable[..., Any]:
    """``jax.shard_map`` (jax >= 0.6), else ``jax.experimental.shard_map.shard_map``."""
    if hasattr(jax, "shard_map"):
        return jax.shard_map
    from jax.experimental import shard_map as legacy  # pragma: no cover - older jax

    return legacy.shard_map  # pragma: no cover


shard_map = _find_shard_map()

AXES = ("axis0", "axis1")


def slice_col(x: Any, slices: int, s: int, block: int) -> Any:
    """Algorithm 2: the s-th column sub-shard of ``x (R, C)``, shape ``(R, C / S)``."""
    rows, cols = x.shape
    return x.reshape(rows, cols // (slices * block), slices, block)[:, :, s, :].reshape(
        rows, cols // slices
    )


def slice_row(x: Any, slices: int, s: int, block: int) -> Any:
    """Algorithm 2 on rows: the s-th row sub-shard of ``x (R, C)``, shape ``(R / S, C)``."""
    rows, cols = x.shape
    return x.reshape(rows // (slices * block), slices, block, cols)[:, s, :, :].reshape(
        rows // slices, cols
    )


def join_cols(parts: list[Any], block: int) -> Any:
    """Inverse of :func:`slice_col`: the S column sub-shards back into one ``(R, C)`` shard."""
    rows, width = parts[0].shape
    groups = [p.reshape(rows, width // block, block) for p in parts]
    return jnp.stack(groups, axis=2).reshape(rows, width * len(parts))


def join_rows(parts: list[Any], block: int) -> Any:
    """Inverse of :func:`slice_row`: the S row sub-shards back into one ``(R, C)`` shard."""
    height, cols = parts[0].shape
    groups = [p.reshape(height // block, block, cols) for p in parts]
    return jnp.stack(groups, axis=1).reshape(height * len(parts), cols)


def meshslice_os(a: Any, b: Any, *, slices: int, block: int, row: str, col: str) -> Any:
    """Per chip: ``C_ij = Σ_s AG_col(slice_col(A_ij, s)) · AG_row(slice_row(B_ij, s))``."""
    out = jnp.zeros((a.shape[0], b.shape[1]), dtype=jnp.float32)
    for s in range(slices):
        a_all = jax.lax.all_gather(slice_col(a, slices, s, block), col, axis=1, tiled=True)
        b_all = jax.lax.all_gather(slice_row(b, slices, s, block), row, axis=0, tiled=True)
        out = out + jnp.matmul(a_all, b_all, preferred_element_type=jnp.float32)
    return out.astype(a.dtype)


def meshslice_ls(a: Any, b: Any, *, slices: int, block: int, row: str, col: str) -> Any:
    """Per chip: ``slice_col(C_ij, s) = RdS_col(A_ij · AG_row(slice_row(B_ij, s))ᵀ)``."""
    parts = []
    for s in range(slices):
        b_all = jax.lax.all_gather(slice_row(b, slices, s, block), row, axis=0, tiled=True)
        partial = jnp.matmul(a, b_all.T, preferred_element_type=jnp.float32)
        parts.append(jax.lax.psum_scatter(partial, col, scatter_dimension=1, tiled=True))
    return join_cols(parts, block).astype(a.dtype)


def meshslice_rs(a: Any, b: Any, *, slices: int, block: int, row: str, col: str) -> Any:
    """Per chip: ``slice_row(C_ij, s) = RdS_row(AG_col(slice_col(A_ij, s))ᵀ · B_ij)``."""
    parts = []
    for s in range(slices):
        a_all = jax.lax.all_gather(slice_col(a, slices, s, block), col, axis=1, tiled=True)
        partial = jnp.matmul(a_all.T, b, preferred_element_type=jnp.float32)
        parts.append(jax.lax.psum_scatter(partial, row, scatter_dimension=0, tiled=True))
    return join_rows(parts, block).astype(a.dtype)


KERNELS: dict[str, Callable[..., Any]] = {
    "OS": meshslice_os,
    "LS": meshslice_ls,
    "RS": meshslice_rs,
}


def logical_axes(transposed: bool) -> tuple[str, str]:
    """(mesh axis of the logical rows, of the logical columns) of a GeMM."""
    return (AXES[1], AXES[0]) if transposed else (AXES[0], AXES[1])


def make_mesh(rows: int, cols: int, devices: Any = None) -> Mesh:
    """The P_r × P_c device mesh with axes ``("axis0", "axis1")`` (the first P_r·P_c devices)."""
    import numpy as np

    pool = jax.devices() if devices is None else devices
    if len(pool) < rows * cols:
        raise ValueError(f"a {rows}x{cols} mesh needs {rows * cols} devices, JAX has {len(pool)}")
    return Mesh(np.array(pool[: rows * cols]).reshape(rows, cols), AXES)


def operand_sharding(mesh: Mesh, transposed: bool) -> NamedSharding:
    """Sharding of a GeMM's operands and result: ``PartitionSpec(row, col)``."""
    return NamedSharding(mesh, PartitionSpec(*logical_axes(transposed)))


def make_gemm(
    mesh: Mesh, dataflow: str, *, slices: int, block: int, transposed: bool
) -> Callable[[Any, Any], Any]:
    """A jitted 2D GeMM of Figure 5's ``dataflow`` ("OS", "LS" or "RS") on ``mesh``.

    Takes the global operands in canonical form (OS ``A (m, k)``, ``B (k, n)``; LS ``A (m, k)``,
    ``B (n, k)``; RS ``A (k, m)``, ``B (k, n)``) and returns the global ``C (m, n)``, all three
    sharded ``PartitionSpec(row, col)``.
    """
    row, col = logical_axes(transposed)
    kernel = KERNELS[dataflow]

    def local(a: Any, b: Any) -> Any:
        return kernel(a, b, slices=slices, block=block, row=row, col=col)

    spec = PartitionSpec(row, col)
    return jax.jit(shard_map(local, mesh=mesh, in_specs=(spec, spec), out_specs=spec))
