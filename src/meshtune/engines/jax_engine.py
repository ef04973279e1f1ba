"""Run a plan on JAX: every layer pass as a jitted ``shard_map`` program (MeshSlice §3.1, §4.1).

For each pass of :func:`meshtune.engines.passes.plan_passes`, :func:`run_plan` builds the
program of :func:`meshtune.engines.jax_kernels.make_gemm` (the layer's algorithm, the plan's
dataflow, transposition and configuration: MeshSlice's S with Algorithm 2's blocked slicing at
the plan's block B, Wang's split ring and unrolled iterations, Cannon) on the P_r × P_c mesh of
the first P_r·P_c devices JAX sees, feeds it standard-normal operands and checks it against the
dense NumPy product in float64 of the same (rounded) operands:

    pass when max |got − want| ≤ TOLERANCE[dtype] · √k

√k is the standard deviation of one entry of the product of standard-normal operands, so the
bound is a relative error of 1e-4 (float32, ε ≈ 1.2e-7) or 2e-2 (bfloat16, ε ≈ 7.8e-3) of a
typical entry. Each pass is then timed: ``repeat`` calls after the check's call (which compiles
the program and warms it up; without the check, one warm-up call), each waited for with
``block_until_ready``; the reported time is the median. Passes that run the same program at the
same sizes (at reduced sizes on large meshes, QKV and MLP up often coincide) share one timing:
each is still checked on its own operands, but timing it again would measure the same
computation.

:func:`collective_timings` and :func:`gemm_timings` time each pass's collectives and local GeMM
on their own, for ``meshtune calibrate`` (canonical CSV rows, see
:mod:`meshtune.calibrate.formats.canonical` and :mod:`meshtune.calibrate.formats.gemm`): the
AG / RdS and GeMM of one MeshSlice iteration; a pass of another algorithm contributes those of the
Collective algorithm (S = 1) at its size (its send-recv shifts are not timed on their own).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from meshtune.algorithms.registry import engine_kernels, get_algorithm
from meshtune.dataflow import Dataflow
from meshtune.engines import pick_devices
from meshtune.engines.jax_kernels import (
    ALGORITHM_FAMILY,
    logical_axes,
    make_gemm,
    make_mesh,
    operand_sharding,
    shard_map,
)
from meshtune.engines.passes import LayerPass
from meshtune.errors import EngineError
from meshtune.executor.mesh import dense_gemm
from meshtune.plan import Plan

ALGORITHM_FAMILY.update(engine_kernels())

TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2}
GEMM_DTYPE_LABEL = {"float32": "fp32", "bfloat16": "bf16"}
SWEEP = (1, 4, 16)  # shard sizes timed per collective, as multiples of the iteration's


@dataclass(frozen=True)
class PassRun:
    """One pass run on the engine: numerics and the median time of ``repeat`` calls."""

    layer: str
    pass_: str
    algorithm: str
    dataflow: str
    transposed: bool
    m: int
    n: int
    k: int
    slices: int
    max_abs_error: float
    tolerance: float
    measured_s: float
    predicted_s: float | None
    checked: bool = True

    @property
    def ok(self) -> bool:
        """Numerics within tolerance (a pass run without the check: timed only, ok)."""
        return not self.checked or self.max_abs_error <= self.tolerance


@dataclass(frozen=True)
class RunReport:
    """Every pass of a plan run on JAX, and where it ran."""

    rows: int
    cols: int
    platform: str
    devices: int
    processes: int
    dtype: str
    repeat: int
    runs: tuple[PassRun, ...]
    programs: int = 0  # jitted programs compiled
    timed: int = 0  # distinct (program, sizes) timed; passes that coincide share a timing

    @property
    def ok(self) -> bool:
        """Every pass matched NumPy."""
        return all(r.ok for r in self.runs)

    def failures(self) -> list[str]:
        """One line per pass whose numerics failed."""
        return [
            f"layer {r.layer} {r.pass_}: max |error| {r.max_abs_error:.3g} exceeds "
            f"{r.tolerance:.3g} ({TOLERANCE[self.dtype]:g}·√k, k={r.k})"
            for r in self.runs
            if not r.ok
        ]

    def to_json(self) -> str:
        """The report as pretty JSON."""
        runs = [asdict(r) | {"ok": r.ok} for r in self.runs]
        data = {
            "ok": self.ok,
            "engine": "jax",
            "jax_version": jax.__version__,
            "mesh": {"rows": self.rows, "cols": self.cols},
            "platform": self.platform,
            "devices": self.devices,
            "processes": self.processes,
            "dtype": self.dtype,
            "repeat": self.repeat,
            "programs": self.programs,
            "timed": self.timed,
            "tolerance": f"{TOLERANCE[self.dtype]:g}·√k",
            "passes": runs,
            "failures": self.failures(),
        }
        return json.dumps(data, indent=2) + "\n"


def device_mesh(plan: Plan) -> Mesh:
    """The plan's P_r × P_c mesh over the first P_r·P_c devices JAX has (:func:`pick_devices`).

    Raises :class:`EngineError` naming the count and the flag when there are too few.
    """
    rows, cols = plan.mesh.rows, plan.mesh.cols
    pool = pick_devices(jax.devices(), jax.devices("cpu"), rows * cols)
    if pool is None:
        raise EngineError(
            f"mesh {rows}x{cols} needs {rows * cols} devices, JAX sees {jax.device_count()} "
            f"({jax.default_backend()}); for virtual CPU devices set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={rows * cols} before JAX starts"
        )
    return make_mesh(rows, cols, list(pool))


def start_distributed(
    coordinator: str | None = None, processes: int | None = None, process_id: int | None = None
) -> None:
    """Start JAX's distributed runtime (``jax.distributed.initialize``) before any computation.

    Without arguments JAX detects the cluster (Cloud TPU, SLURM, Open MPI); otherwise all three
    are needed. CPU devices exchange data through gloo. Raises :class:`EngineError` when the
    runtime does not start.
    """
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator, processes, process_id)
    except (RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EngineError(f"cannot start JAX's distributed runtime: {first}") from None


def is_primary() -> bool:
    """Whether this is process 0 (the one that prints and writes)."""
    return jax.process_index() == 0


def place(host: np.ndarray[Any, Any], sharding: NamedSharding) -> Any:
    """A global array from a host array every process holds: each process puts its shards."""
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def fetch(x: Any) -> np.ndarray[Any, Any]:
    """The whole of a global array on this process, as float64 (gathered across processes)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        x = multihost_utils.process_allgather(x, tiled=True)
    return np.asarray(x, dtype=np.float64)


def median_seconds(call: Callable[[], Any], repeat: int, *, warm_up: bool = True) -> float:
    """Median wall time of ``repeat`` calls, after one warm-up call unless the caller has just
    made one (``warm_up=False``); each call is waited for."""
    if warm_up:
        jax.block_until_ready(call())
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


Program = Callable[[Any, Any], Any]
ProgramKey = tuple[str, str, int, int, bool]


def program_key(job: LayerPass) -> ProgramKey:
    """What a pass's program depends on besides the mesh and the operand shapes: algorithm,
    dataflow, slices, split and transposition (jit compiles once per operand shape)."""
    return (job.algorithm, job.op.dataflow.value, job.slices, job.split, job.op.transposed)


TimingKey = tuple[ProgramKey, int, int, int]


def timing_key(job: LayerPass) -> TimingKey:
    """What a pass's time depends on: its program and its sizes m, n, k (two passes with the
    same key run the very same computation on operands of the same shapes)."""
    return (program_key(job), job.op.m, job.op.n, job.op.k)


def run_pass(
    mesh: Mesh,
    job: LayerPass,
    *,
    block: int,
    dtype: str,
    repeat: int,
    rng: np.random.Generator,
    programs: dict[ProgramKey, Program],
    timings: dict[TimingKey, float],
    check: bool = True,
) -> PassRun:
    """Run, check and time one pass (see the module docstring).

    ``programs``: jitted programs already built, reused by :func:`program_key` and added to.
    ``timings``: medians already measured, reused by :func:`timing_key` and added to (the time of
    a program depends on its sizes, not on the operands' values). The check call is the timing's
    warm-up. ``check=False`` times the pass only (no dense NumPy product: for full sizes that do
    not fit the host)."""
    op = job.op
    shape_a, shape_b = op.operand_shapes
    jdtype = jnp.dtype(dtype)
    a = rng.standard_normal(shape_a).astype(jdtype)  # on the host, the same on every process
    b = rng.standard_normal(shape_b).astype(jdtype)
    key = program_key(job)
    gemm = programs.get(key)
    if gemm is None:
        gemm = make_gemm(
            mesh,
            op.dataflow.value,
            slices=job.slices,
            block=block,
            transposed=op.transposed,
            algorithm=job.algorithm,
            split=job.split,
        )
        programs[key] = gemm
    measured = timings.get(timing_key(job))
    error = 0.0
    if check or measured is None:
        sharding = operand_sharding(mesh, op.transposed)
        a_dev, b_dev = place(a, sharding), place(b, sharding)
        if check:
            want = dense_gemm(op, np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
            error = float(np.max(np.abs(fetch(gemm(a_dev, b_dev)) - want)))
        if measured is None:
            measured = median_seconds(lambda: gemm(a_dev, b_dev), repeat, warm_up=not check)
            timings[timing_key(job)] = measured
    return PassRun(
        layer=job.layer,
        pass_=op.pass_.value,
        algorithm=job.algorithm,
        dataflow=op.dataflow.value,
        transposed=op.transposed,
        m=op.m,
        n=op.n,
        k=op.k,
        slices=job.slices,
        max_abs_error=error,
        tolerance=TOLERANCE[dtype] * math.sqrt(op.k),
        measured_s=measured,
        predicted_s=job.predicted_s,
        checked=check,
    )


def run_plan(
    plan: Plan,
    jobs: Sequence[LayerPass],
    *,
    dtype: str = "float32",
    repeat: int = 5,
    seed: int = 0,
    check: bool = True,
    progress: Callable[[int, int, LayerPass], None] | None = None,
) -> RunReport:
    """Run every pass in ``jobs`` (from :func:`plan_passes` of ``plan``) on JAX's devices.

    Passes with the same :func:`program_key` share one jitted program (on
    ``plans/gpt3-256.json`` 12 passes need 3), and passes with the same :func:`timing_key` one
    timing; every pass is checked on its own operands. ``check=False`` times without the NumPy
    check; ``progress(i, total, job)`` is called before each pass."""
    if dtype not in TOLERANCE:
        raise EngineError(f"dtype '{dtype}' is not supported; supported: {', '.join(TOLERANCE)}")
    if repeat < 1:
        raise EngineError(f"repeat must be a positive integer, got {repeat}")
    mesh = device_mesh(plan)
    rng = np.random.default_rng(seed)
    block = plan.inputs.slice_block
    programs: dict[ProgramKey, Program] = {}
    timings: dict[TimingKey, float] = {}
    runs = []
    for i, job in enumerate(jobs):
        if progress is not None:
            progress(i, len(jobs), job)
        runs.append(
            run_pass(
                mesh,
                job,
                block=block,
                dtype=dtype,
                repeat=repeat,
                rng=rng,
                programs=programs,
                timings=timings,
                check=check,
            )
        )
    first = mesh.devices.flat[0]
    return RunReport(
        plan.mesh.rows,
        plan.mesh.cols,
        first.platform,
        len(jax.devices(first.platform)),
        jax.process_count(),
        dtype,
        repeat,
        tuple(runs),
        programs=len(programs),
        timed=len(timings),
    )


# --------------------------------------------------------------------------- calibration logs


@dataclass(frozen=True)
class CollectiveTiming:
    """One timed collective in the canonical format's terms (§3.2.2)."""

    op: str  # all_gather | reduce_scatter
    axis: int  # physical mesh axis
    ranks: int
    shard_bytes: int  # AG input / RdS output per rank
    seconds: float
    repeats: int


def _iteration_slices(job: LayerPass) -> int:
    """S of the MeshSlice iteration timed for ``job``: its own for the MeshSlice kernels, else 1."""
    return job.slices if get_algorithm(job.algorithm).kernel == "meshslice" else 1


def _collectives(job: LayerPass, rows: int, cols: int) -> list[tuple[str, int, tuple[int, int]]]:
    """(op, logical ring 'row'|'col' as 0|1, local input shape) of one iteration of ``job``."""
    op, s = job.op, _iteration_slices(job)
    r, c = (cols, rows) if op.transposed else (rows, cols)
    m, n, k = op.m, op.n, op.k
    if op.dataflow is Dataflow.OS:
        return [
            ("all_gather", 1, (m // r, k // (c * s))),
            ("all_gather", 0, (k // (r * s), n // c)),
        ]
    if op.dataflow is Dataflow.LS:
        return [
            ("all_gather", 0, (n // (r * s), k // c)),
            ("reduce_scatter", 1, (m // r, n // s)),
        ]
    return [
        ("all_gather", 1, (k // r, m // (c * s))),
        ("reduce_scatter", 0, (m // s, n // c)),
    ]


def _ring_spec(mesh: Mesh, name: str, dim: int) -> PartitionSpec:
    """Sharding of a collective's operand: matrix ``dim`` over mesh axis ``name``."""
    other = next(a for a in mesh.axis_names if a != name)
    return PartitionSpec(name, other) if dim == 0 else PartitionSpec(other, name)


def _collective_program(mesh: Mesh, op: str, name: str, dim: int) -> Callable[[Any], Any]:
    """One AG or RdS along mesh axis ``name`` on matrix dimension ``dim``, jitted.

    The result keeps the operand's spec (every chip's gathered copy is kept apart), which
    spares JAX a replication check and changes nothing in the communication.
    """
    spec = _ring_spec(mesh, name, dim)

    def local(x: Any) -> Any:
        if op == "all_gather":
            return jax.lax.all_gather(x, name, axis=dim, tiled=True)
        return jax.lax.psum_scatter(x, name, scatter_dimension=dim, tiled=True)

    return jax.jit(shard_map(local, mesh=mesh, in_specs=(spec,), out_specs=spec))


def collective_timings(
    plan: Plan, jobs: Sequence[LayerPass], *, dtype: str = "float32", repeat: int = 5
) -> list[CollectiveTiming]:
    """Time every distinct collective of the passes' loop iterations on its own.

    Each is one AG or RdS of one iteration's sub-shard on the ring it uses, on the plan's mesh,
    at the sub-shard's size; the first of each op and axis also at :data:`SWEEP` times it (the
    dimension the ring does not split grows), so that a fit sees several sizes per op and
    axis. Rings of one chip are skipped. ``shard_bytes`` is the all-gather input or the
    reduce-scatter output per rank, as the canonical format wants.
    """
    mesh = device_mesh(plan)
    itemsize = jnp.dtype(dtype).itemsize
    seen: dict[tuple[str, int, tuple[int, int]], CollectiveTiming] = {}
    swept: set[tuple[str, int]] = set()
    for job in jobs:
        names = logical_axes(job.op.transposed)
        for op, ring, (h, w) in _collectives(job, plan.mesh.rows, plan.mesh.cols):
            name = names[ring]
            physical = mesh.axis_names.index(name)
            ranks = mesh.shape[name]
            other = mesh.shape[next(a for a in mesh.axis_names if a != name)]
            factors = (1,) if (op, physical) in swept else SWEEP
            swept.add((op, physical))
            for factor in factors:
                local = (h, w * factor) if ring == 0 else (h * factor, w)
                key = (op, physical, local)
                if ranks == 1 or key in seen:
                    continue
                program = _collective_program(mesh, op, name, ring)
                spec = NamedSharding(mesh, _ring_spec(mesh, name, ring))
                size = (local[0] * ranks, local[1] * other)
                if ring == 1:
                    size = (local[0] * other, local[1] * ranks)
                x = place(np.ones(size, dtype=jnp.dtype(dtype)), spec)
                seconds = median_seconds(functools.partial(program, x), repeat)
                elements = local[0] * local[1] // (ranks if op == "reduce_scatter" else 1)
                seen[key] = CollectiveTiming(
                    op, physical, ranks, elements * itemsize, seconds, repeat
                )
    return list(seen.values())


def gemm_timings(
    jobs: Sequence[LayerPass], plan: Plan, *, dtype: str = "float32", repeat: int = 5
) -> list[tuple[int, int, int, float]]:
    """(m, n, k, seconds) of every distinct local GeMM of one loop iteration, on one device
    of the plan's mesh."""
    mesh = device_mesh(plan)
    device = next(d for d in mesh.devices.flat if d.process_index == jax.process_index())
    rows, cols = plan.mesh.rows, plan.mesh.cols
    out: dict[tuple[int, int, int], float] = {}
    matmul = jax.jit(jnp.matmul)
    for job in jobs:
        op, s = job.op, _iteration_slices(job)
        r, c = (cols, rows) if op.transposed else (rows, cols)
        local = {
            Dataflow.OS: (op.m // r, op.n // c, op.k // s),
            Dataflow.LS: (op.m // r, op.n // s, op.k // c),
            Dataflow.RS: (op.m // s, op.n // c, op.k // r),
        }[op.dataflow]
        if local in out:
            continue
        m, n, k = local
        a = jax.device_put(jnp.ones((m, k), dtype=dtype), device)
        b = jax.device_put(jnp.ones((k, n), dtype=dtype), device)
        out[local] = median_seconds(functools.partial(matmul, a, b), repeat)
    return [(m, n, k, t) for (m, n, k), t in out.items()]


def canonical_csv(timings: Sequence[CollectiveTiming]) -> str:
    """Collective timings in the canonical CSV format ``meshtune calibrate`` reads."""
    lines = ["# meshtune run --engine jax: one iteration's collectives, timed on their own"]
    lines.append("op,axis,ranks,bytes,seconds,repeats")
    lines += [
        f"{t.op},{t.axis},{t.ranks},{t.shard_bytes},{t.seconds:.9g},{t.repeats}" for t in timings
    ]
    return "\n".join(lines) + "\n"


def gemm_csv(timings: Sequence[tuple[int, int, int, float]], dtype: str, repeat: int) -> str:
    """Local GeMM timings in the GeMM CSV format ``meshtune calibrate`` reads."""
    label = GEMM_DTYPE_LABEL[dtype]
    lines = ["# meshtune run --engine jax: one iteration's local GeMM, timed on one device"]
    lines.append("m,n,k,dtype,seconds,repeats")
    lines += [f"{m},{n},{k},{label},{t:.9g},{repeat}" for m, n, k, t in timings]
    return "\n".join(lines) + "\n"
