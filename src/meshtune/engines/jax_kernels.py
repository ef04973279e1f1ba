"""2D GeMMs as JAX ``shard_map`` programs: MeshSlice (§3.1, Figure 5, Algorithm 2), Wang and
Cannon (§2.3.2, §2.3.4, §4.2).

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

Wang (``wang_*``, also 1D TP and FSDP: Wang on a P × 1 ring) splits the collective of one ring
(p chips, ``split``) into p − 1 ``jax.lax.ppermute`` shifts (the chip at position q receives from
q − 1) overlapped with partial GeMMs, and runs the other direction as one all-gather before or
one reduce-scatter after; the p steps are unrolled into S iterations of p / S steps, each one
GeMM over its steps' chunks, as :mod:`meshtune.executor.wang` does. Cannon (``cannon_*``,
square meshes) skews the moving shards (one ``ppermute`` over both axes), then runs P systolic
steps of a GeMM and one-hop shifts; LS and RS move the running sums of C and unskew them at the
end, as :mod:`meshtune.executor.cannon` does.
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


def ring_shift(x: Any, axis: str, size: int) -> Any:
    """One send-recv ring shift along ``axis``: the chip at position q receives from q − 1."""
    return jax.lax.ppermute(x, axis, [(q, (q + 1) % size) for q in range(size)])


def ring_skew(x: Any, along: str, size: int, hops: list[int]) -> Any:
    """Move the shards of every ring along ``along`` by ``hops[ρ]`` positions, ρ the ring's index
    on the other axis (Cannon's skew, §2.3.2): the chip at position q of ring ρ ends with what
    q − hops[ρ] held. One ``ppermute`` over both axes of the square ``size`` × ``size`` mesh,
    whose devices JAX numbers in the mesh's axis order (``AXES``)."""

    def device(ring: int, q: int) -> int:
        return ring * size + q if along == AXES[1] else q * size + ring

    perm = [
        (device(ring, q), device(ring, (q + hops[ring]) % size))
        for ring in range(size)
        for q in range(size)
    ]
    return jax.lax.ppermute(x, AXES, perm)


def ring_block(x: Any, index: Any, parts: int, dim: int) -> Any:
    """Block ``index`` (traced) of ``x`` cut into ``parts`` equal blocks along ``dim``."""
    width = x.shape[dim] // parts
    return jax.lax.dynamic_slice_in_dim(x, index * width, width, axis=dim)


def _iterations(size: int, slices: int, first: int = 0) -> list[range]:
    """The ring's steps first … first + size − 1 grouped into S unrolled iterations (§4.2)."""
    steps = size // slices
    return [range(first + g * steps, first + (g + 1) * steps) for g in range(slices)]


def _split_gather(
    own: Any, ring: str, size: int, slices: int
) -> list[tuple[range, Any, list[Any]]]:
    """Wang's split all-gather of ``own`` along ``ring``: per iteration (its steps, the position
    q of the chip, the chunks held at its steps). Step t holds the chunk of chip q − t (its own at
    t = 0); every later chunk arrives by one shift of the one held a step earlier."""
    position = jax.lax.axis_index(ring)
    held, out = own, []
    for steps in _iterations(size, slices):
        chunks = []
        for t in steps:
            if t > 0:
                held = ring_shift(held, ring, size)
            chunks.append(held)
        out.append((steps, position, chunks))
    return out


def _placed(shape: tuple[int, int], size: int, dim: int, parts: list[tuple[Any, Any]]) -> Any:
    """A ``shape`` float32 buffer with each ``(index, block)`` written to block ``index`` of
    ``size`` along ``dim`` (the blocks of C' that Wang's split all-gather computes)."""
    out = jnp.zeros(shape, dtype=jnp.float32)
    width = shape[dim] // size
    for index, block in parts:
        out = jax.lax.dynamic_update_slice_in_dim(out, block, index * width, axis=dim)
    return out


def _running_sum(partials: list[Any], running: Any, ring: str, size: int) -> Any:
    """Wang's split reduce-scatter: add the running sum received from q − 1 to each partial."""
    for partial in partials:
        running = partial if running is None else ring_shift(running, ring, size) + partial
    return running


def wang_os(
    a: Any, b: Any, *, slices: int, row: str, col: str, split: str, sizes: dict[str, int]
) -> Any:
    """Per chip: ``C_ij = Σ_t A-chunk · B-chunk`` over k; ``split`` names the ring whose
    all-gather is decomposed into shifts (A's k-chunks along ``col``, or B's along ``row``), the
    other operand is all-gathered first and block (q − t) mod p of it meets step t's chunk."""
    out = jnp.zeros((a.shape[0], b.shape[1]), dtype=jnp.float32)
    size = sizes[split]
    if split == col:
        b_all = jax.lax.all_gather(b, row, axis=0, tiled=True)
        for steps, q, chunks in _split_gather(a, col, size, slices):
            blocks = [ring_block(b_all, (q - t) % size, size, 0) for t in steps]
            merged = (jnp.concatenate(chunks, axis=1), jnp.concatenate(blocks, axis=0))
            out = out + jnp.matmul(*merged, preferred_element_type=jnp.float32)
    else:
        a_all = jax.lax.all_gather(a, col, axis=1, tiled=True)
        for steps, q, chunks in _split_gather(b, row, size, slices):
            blocks = [ring_block(a_all, (q - t) % size, size, 1) for t in steps]
            merged = (jnp.concatenate(blocks, axis=1), jnp.concatenate(chunks, axis=0))
            out = out + jnp.matmul(*merged, preferred_element_type=jnp.float32)
    return out.astype(a.dtype)


def wang_ls(
    a: Any, b: Any, *, slices: int, row: str, col: str, split: str, sizes: dict[str, int]
) -> Any:
    """Per chip ``C = A·Bᵀ``: split ``row``: B's n-chunks shift along ``row``, each step's
    product is block (q − t) of C' (m/r × n), then ``RdS_col``; split ``col``: B is all-gathered
    along ``row`` and C's running sums shift along ``col`` (step t computes block (q − t))."""
    size = sizes[split]
    if split == row:
        parts = []
        for steps, q, chunks in _split_gather(b, row, size, slices):
            product = jnp.matmul(
                a, jnp.concatenate(chunks, axis=0).T, preferred_element_type=jnp.float32
            )
            pieces = jnp.split(product, len(steps), axis=1)
            parts += [((q - t) % size, piece) for t, piece in zip(steps, pieces, strict=True)]
        whole = _placed((a.shape[0], b.shape[0] * size), size, 1, parts)
        return jax.lax.psum_scatter(whole, col, scatter_dimension=1, tiled=True).astype(a.dtype)
    b_all = jax.lax.all_gather(b, row, axis=0, tiled=True)
    q = jax.lax.axis_index(col)
    running: Any = None
    for steps in _iterations(size, slices, first=1):
        blocks = [ring_block(b_all, (q - t) % size, size, 0) for t in steps]
        product = jnp.matmul(
            a, jnp.concatenate(blocks, axis=0).T, preferred_element_type=jnp.float32
        )
        running = _running_sum(jnp.split(product, len(steps), axis=1), running, col, size)
    return running.astype(a.dtype)


def wang_rs(
    a: Any, b: Any, *, slices: int, row: str, col: str, split: str, sizes: dict[str, int]
) -> Any:
    """Per chip ``C = Aᵀ·B``: split ``col``: A's m-chunks shift along ``col``, each step's
    product is block (q − t) of C' (m × n/c), then ``RdS_row``; split ``row``: A is all-gathered
    along ``col`` and C's running sums shift along ``row`` (step t computes block (q − t))."""
    size = sizes[split]
    if split == col:
        parts = []
        for steps, q, chunks in _split_gather(a, col, size, slices):
            product = jnp.matmul(
                jnp.concatenate(chunks, axis=1).T, b, preferred_element_type=jnp.float32
            )
            pieces = jnp.split(product, len(steps), axis=0)
            parts += [((q - t) % size, piece) for t, piece in zip(steps, pieces, strict=True)]
        whole = _placed((a.shape[1] * size, b.shape[1]), size, 0, parts)
        return jax.lax.psum_scatter(whole, row, scatter_dimension=0, tiled=True).astype(a.dtype)
    a_all = jax.lax.all_gather(a, col, axis=1, tiled=True)
    q = jax.lax.axis_index(row)
    running: Any = None
    for steps in _iterations(size, slices, first=1):
        blocks = [ring_block(a_all, (q - t) % size, size, 1) for t in steps]
        product = jnp.matmul(
            jnp.concatenate(blocks, axis=1).T, b, preferred_element_type=jnp.float32
        )
        running = _running_sum(jnp.split(product, len(steps), axis=0), running, row, size)
    return running.astype(a.dtype)


def cannon_os(a: Any, b: Any, *, row: str, col: str, size: int) -> Any:
    """Per chip: skew A along ``col`` (ring i by P − i) and B along ``row`` (ring j by P − j),
    then P steps of ``C += A·B`` with both shifted one hop between steps (§2.3.2)."""
    inward = [(size - ring) % size for ring in range(size)]
    a = ring_skew(a, col, size, inward)
    b = ring_skew(b, row, size, inward)
    out = jnp.zeros((a.shape[0], b.shape[1]), dtype=jnp.float32)
    for t in range(size):
        out = out + jnp.matmul(a, b, preferred_element_type=jnp.float32)
        if t < size - 1:
            a, b = ring_shift(a, col, size), ring_shift(b, row, size)
    return out.astype(a.dtype)


def cannon_ls(a: Any, b: Any, *, row: str, col: str, size: int) -> Any:
    """Per chip ``C = A·Bᵀ``: A stays; B is skewed along ``row`` and shifts along it, the
    running sums of C shift along ``col`` and are unskewed at the end (ring i by i + 1)."""
    b = ring_skew(b, row, size, [(size - ring) % size for ring in range(size)])
    running = jnp.matmul(a, b.T, preferred_element_type=jnp.float32)
    for _ in range(size - 1):
        b = ring_shift(b, row, size)
        running = ring_shift(running, col, size) + jnp.matmul(
            a, b.T, preferred_element_type=jnp.float32
        )
    outward = [(ring + 1) % size for ring in range(size)]
    return ring_skew(running, col, size, outward).astype(a.dtype)


def cannon_rs(a: Any, b: Any, *, row: str, col: str, size: int) -> Any:
    """Per chip ``C = Aᵀ·B``: B stays; A is skewed along ``col`` and shifts along it, the
    running sums of C shift along ``row`` and are unskewed at the end (ring j by j + 1)."""
    a = ring_skew(a, col, size, [(size - ring) % size for ring in range(size)])
    running = jnp.matmul(a.T, b, preferred_element_type=jnp.float32)
    for _ in range(size - 1):
        a = ring_shift(a, col, size)
        running = ring_shift(running, row, size) + jnp.matmul(
            a.T, b, preferred_element_type=jnp.float32
        )
    outward = [(ring + 1) % size for ring in range(size)]
    return ring_skew(running, row, size, outward).astype(a.dtype)


MESHSLICE_KERNELS: dict[str, Callable[..., Any]] = {
    "OS": meshslice_os,
    "LS": meshslice_ls,
    "RS": meshslice_rs,
}
WANG_KERNELS: dict[str, Callable[..., Any]] = {"OS": wang_os, "LS": wang_ls, "RS": wang_rs}
CANNON_KERNELS: dict[str, Callable[..., Any]] = {
    "OS": cannon_os,
    "LS": cannon_ls,
    "RS": cannon_rs,
}

# Registered algorithm -> its kernel family. Collective is MeshSlice with S = 1; 1D TP and FSDP
# are Wang on a P × 1 ring (their dataflows are forced by the planner, not by the kernels).
# The registry's engine_kernels(): meshtune.engines.jax_engine fills this table on import, and
# meshtune.engines.jax_codegen writes it out in place of these lines.
ALGORITHM_FAMILY: dict[str, str] = {}


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
    mesh: Mesh,
    dataflow: str,
    *,
    slices: int,
    block: int,
    transposed: bool,
    algorithm: str = "meshslice",
    split: int = 1,
) -> Callable[[Any, Any], Any]:
    """A jitted 2D GeMM of Figure 5's ``dataflow`` ("OS", "LS" or "RS") on ``mesh``.

    Takes the global operands in canonical form (OS ``A (m, k)``, ``B (k, n)``; LS ``A (m, k)``,
    ``B (n, k)``; RS ``A (k, m)``, ``B (k, n)``) and returns the global ``C (m, n)``, all three
    sharded ``PartitionSpec(row, col)``. ``algorithm`` is a key of :data:`ALGORITHM_FAMILY`;
    MeshSlice slices with Algorithm 2's ``block``, Wang unrolls its ring to ``slices``
    iterations and splits the collective of physical mesh dimension ``split`` (1: P_r, 2: P_c),
    Cannon (square meshes) takes neither.
    """
    row, col = logical_axes(transposed)
    family = ALGORITHM_FAMILY[algorithm]
    sizes = dict(mesh.shape)
    if family == "wang":
        ring = AXES[split - 1]

        def local(a: Any, b: Any) -> Any:
            kernel = WANG_KERNELS[dataflow]
            return kernel(a, b, slices=slices, row=row, col=col, split=ring, sizes=sizes)

    elif family == "cannon":
        if sizes[row] != sizes[col]:
            raise ValueError(f"cannon needs a square mesh, got {sizes[AXES[0]]}x{sizes[AXES[1]]}")

        def local(a: Any, b: Any) -> Any:
            return CANNON_KERNELS[dataflow](a, b, row=row, col=col, size=sizes[row])

    else:

        def local(a: Any, b: Any) -> Any:
            kernel = MESHSLICE_KERNELS[dataflow]
            return kernel(a, b, slices=slices, block=block, row=row, col=col)

    spec = PartitionSpec(row, col)
    return jax.jit(shard_map(local, mesh=mesh, in_specs=(spec, spec), out_specs=spec))
