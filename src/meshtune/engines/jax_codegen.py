"""A plan as a standalone JAX module: ``meshtune export PLAN --to jax`` (MeshSlice §3.1, §4.1).

The exported module imports only JAX and NumPy. It holds, in this order: a docstring naming the
plan and how to call it; the kernels of :mod:`meshtune.engines.jax_kernels`, copied verbatim
(the code ``meshtune run --engine jax`` checks against NumPy); the plan's mesh
(``make_plan_mesh``), the stored layout and ``PartitionSpec`` of every tensor of every layer
(``PARTITION_SPECS``), and one function per layer pass, ``<layer>_<pass>(mesh, a, b)``,
commented with the plan's choices (stationary matrix, dataflow, transposition, slice count,
predicted time). ``PASSES`` lists the pass functions with their dataflow and transposition.

Generating the text needs no JAX. A plan file is shared input: every plan string in the code
is either one of a closed vocabulary (layer, pass, tensor, dimension, dataflow, algorithm and
catalog names, Table 1 formulas: :func:`meshtune.verify.run.load_plan` refuses others) or written
as a Python string literal (:func:`_literal`: the model's display name, the plan file's name),
never spliced into a docstring or a comment.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from meshtune._version import __version__
from meshtune.algorithms.registry import engine_kernels, get_algorithm
from meshtune.engines.passes import layer_algorithm
from meshtune.plan import LayerPlan, PassPlan, Plan

_KERNELS = Path(__file__).with_name("jax_kernels.py")

_LIBRARY_TABLE = """\
# The registry's engine_kernels(): meshtune.engines.jax_engine fills this table on import, and
# meshtune.engines.jax_codegen writes it out in place of these lines.
ALGORITHM_FAMILY: dict[str, str] = {}
"""
"""What ``jax_kernels.py`` holds in place of its algorithm table (:func:`_kernel_parts` writes
the registry's table there)."""

_OPERANDS = {
    "OS": "C (m×n) = A (m×k) · B (k×n)",
    "LS": "C (m×n) = A (m×k) · Bᵀ, B (n×k)",
    "RS": "C (m×n) = Aᵀ · B, A (k×m), B (k×n)",
}


def _kernel_parts() -> tuple[str, str]:
    """(docstring text, code after the docstring) of ``jax_kernels.py``, its algorithm table
    written out from the registry (:func:`~meshtune.algorithms.registry.engine_kernels`), so
    that the exported module runs without meshtune."""
    text = _KERNELS.read_text(encoding="utf-8")
    _, doc, code = text.split('"""', 2)
    table = "".join(
        f"    {_literal(name)}: {_literal(family)},\n" for name, family in engine_kernels().items()
    )
    written = f"ALGORITHM_FAMILY: dict[str, str] = {{\n{table}}}\n"
    return doc.strip(), code.lstrip("\n").replace(_LIBRARY_TABLE, written)


def _literal(value: str) -> str:
    """``value`` as a Python string literal (JSON's escaping, a subset of Python's: quotes,
    backslashes, control and non-ASCII characters escaped), inert whatever it holds."""
    return json.dumps(value)


def _spec(axes: tuple[str, str]) -> str:
    return f"PartitionSpec({_literal(axes[0])}, {_literal(axes[1])})"


def _choice(plan: Plan, layer: LayerPlan) -> str:
    """The layer's algorithm and configuration in words, for the comments: what its JAX kernel
    family (``Algorithm.kernel``) does with the configuration."""
    algorithm, config = layer_algorithm(layer)
    family = get_algorithm(algorithm).kernel
    if family == "meshslice":
        return (
            f"{algorithm} with S={config['slices']} slices of '{layer.sliced_dim}' "
            f"(Algorithm 2, block {plan.inputs.slice_block})"
        )
    if family == "wang":
        ring = "P_r (axis0)" if config["split"] == 1 else "P_c (axis1)"
        return (
            f"{algorithm} (Wang's method) with the {ring} collective split into shifts, "
            f"unrolled to S={config['slices']} iterations"
        )
    return f"{algorithm} (skew, then systolic shifts)"


def _pass_function(plan: Plan, layer: LayerPlan, recorded: PassPlan) -> str:
    algorithm, config = layer_algorithm(layer)
    slices, split = config.get("slices", 1), config.get("split", 1)
    axes = ("axis1", "axis0") if layer.transposed else ("axis0", "axis1")
    name = f"{layer.name}_{recorded.name.value}"
    orientation = "transposed mesh" if layer.transposed else "mesh"
    choice = textwrap.fill(_choice(plan, layer) + ".", width=96, subsequent_indent="    ")
    predicted = f"{recorded.total_s * 1e3:.3f} ms per block on {plan.inputs.profile}"
    transposed = repr(layer.transposed)
    names = f"{_literal(algorithm)}, {_literal(recorded.dataflow)}"
    return f'''

def {name}(mesh: Mesh, a: Any, b: Any) -> Any:
    """{layer.name} {recorded.name.value.replace("_", " ")}: {recorded.formula}.

    {recorded.dataflow}: {_OPERANDS[recorded.dataflow]}; in the plan m={recorded.m}, n={recorded.n},
    k={recorded.k}. {choice}
    On the {orientation}: a, b and the result are sharded {_spec(axes)}.
    Predicted {predicted}.
    """
    gemm = _gemm(mesh, {names}, {slices}, {split}, {transposed})
    return gemm(a, b)
'''


def export_jax(plan: Plan, source: str) -> str:
    """The text of the standalone JAX module of ``plan`` (``source`` names the plan file): its
    docstring, the kernels, the plan's mesh and cluster levels, then its layers' passes."""
    doc, code = _kernel_parts()
    return _header(plan, doc) + code + _mesh_part(plan, source) + _passes_part(plan)


def _header(plan: Plan, doc: str) -> str:
    """The exported module's docstring: the plan, how to call it, then the kernels' docstring."""
    rows, cols, model = plan.mesh.rows, plan.mesh.cols, plan.inputs.model
    return f'''"""JAX program of a meshtune plan: model {model.name} on a {rows}×{cols} mesh.

Exported by meshtune {__version__} from the plan file named by PLAN_FILE (model PLAN_MODEL,
profile {plan.inputs.profile}, {plan.inputs.chips} chips, batch {plan.inputs.batch}, sequence
{plan.inputs.seq_len}). Imports jax and numpy only.

{_levels_text(plan)}

Usage (one device per chip; on CPU set
XLA_FLAGS=--xla_force_host_platform_device_count={rows * cols} before importing jax)::

    mesh = make_plan_mesh()
    a = jax.device_put(a, operand_sharding(mesh, transposed=False))
    y = qkv_forward(mesh, a, b)       # see PASSES for every pass

{doc}
"""

'''


def _mesh_part(plan: Plan, source: str) -> str:
    """The plan's file, model and mesh, and the cluster mesh of its DP and PP levels."""
    rows, cols = plan.mesh.rows, plan.mesh.cols
    cluster_shape = (
        plan.cluster.dp if plan.cluster else 1,
        plan.cluster.pp if plan.cluster else 1,
        rows,
        cols,
    )
    return f'''

# --------------------------------------------------------------------------------------------
# The plan

PLAN_FILE = {_literal(source)}
PLAN_MODEL = {_literal(plan.inputs.model.display_name)}
PLAN_MESH = ({rows}, {cols})  # P_r × P_c: "axis0" has {rows} chips per ring, "axis1" {cols}
SLICE_BLOCK = {plan.inputs.slice_block}  # Algorithm 2's block size B


def make_plan_mesh(devices: Any = None) -> Mesh:
    """The plan's {rows}×{cols} device mesh over the first {rows * cols} devices."""
    return make_mesh(PLAN_MESH[0], PLAN_MESH[1], devices)


# The cluster levels around the mesh: DP replicas × pipeline stages × the TP mesh, nested as
# meshtune numbers chips (mesh axis 1 innermost, then axis 0, then stages, then replicas).
CLUSTER_AXES = ("dp", "pp", "axis0", "axis1")
CLUSTER_SHAPE = {cluster_shape}
PLAN_LEVELS = {_levels(plan)!r}


def make_cluster_mesh(devices: Any = None) -> Mesh:
    """Every chip of the plan as one mesh with axes CLUSTER_AXES (the first
    {plan.inputs.chips} devices)."""
    import numpy as np

    devices = jax.devices() if devices is None else list(devices)
    count = int(np.prod(CLUSTER_SHAPE))
    return Mesh(np.asarray(devices[:count]).reshape(CLUSTER_SHAPE), CLUSTER_AXES)


def stage_mesh(cluster: Mesh, replica: int, stage: int) -> Mesh:
    """The TP mesh of one (DP replica, pipeline stage): the passes below run on it."""
    return Mesh(cluster.devices[replica, stage], ("axis0", "axis1"))
'''


def _layer_specs(plan: Plan, layer: LayerPlan) -> str:
    """One layer's entry of ``PARTITION_SPECS``, commented with the plan's choices."""
    flows = ", ".join(f"{p.value} {d}" for p, d in layer.dataflows.items())
    comment = (
        f"{layer.name}: {layer.stationary}-stationary, "
        f"{'transposed' if layer.transposed else 'not transposed'}, {_choice(plan, layer)}"
    )
    return (
        textwrap.fill(comment, width=96, initial_indent="    # ", subsequent_indent="    # ")
        + f"\n    # {flows}\n"
        f"    {_literal(layer.name)}: {{\n"
        + "".join(
            f"        {_literal(t)}: {_spec(('axis0', 'axis1'))},  # stored as ({r} × {c})\n"
            for t, (r, c) in layer.sharding.items()
        )
        + "    },\n"
    )


def _passes_part(plan: Plan) -> str:
    """Every stored tensor's sharding, the GeMM builder, one function per layer pass, and
    ``PASSES`` listing them."""
    specs = "".join(_layer_specs(plan, layer) for layer in plan.layers)
    functions = "".join(
        _pass_function(plan, layer, recorded) for layer in plan.layers for recorded in layer.passes
    )
    passes = "".join(
        f"    {_literal(layer.name + '_' + p.name.value)}: ({layer.name}_{p.name.value}, "
        f"{_literal(p.dataflow)}, {layer.transposed!r}),\n"
        for layer in plan.layers
        for p in layer.passes
    )
    return f'''

# Every stored tensor: its (row dimension × column dimension), matrix rows over "axis0" and
# columns over "axis1". A pass's canonical operands (A, B, C) are these tensors (transposed
# for a transposed layer, whose passes run on the transposed mesh).
PARTITION_SPECS: dict[str, dict[str, PartitionSpec]] = {{
{specs}}}


_COMPILED: dict[tuple[Mesh, str, str, int, int, bool], Callable[[Any, Any], Any]] = {{}}


def _gemm(
    mesh: Mesh, algorithm: str, dataflow: str, slices: int, split: int, transposed: bool
) -> Callable[[Any, Any], Any]:
    """The jitted GeMM of a pass, built once per mesh, algorithm and configuration."""
    key = (mesh, algorithm, dataflow, slices, split, transposed)
    if key not in _COMPILED:
        _COMPILED[key] = make_gemm(
            mesh,
            dataflow,
            slices=slices,
            block=SLICE_BLOCK,
            transposed=transposed,
            algorithm=algorithm,
            split=split,
        )
    return _COMPILED[key]
{functions}

# name -> (function, dataflow, transposed)
PASSES: dict[str, tuple[Callable[[Mesh, Any, Any], Any], str, bool]] = {{
{passes}}}
'''


def _levels(plan: Plan) -> dict[str, int | str]:
    """The cluster levels a plan chose (a ``--mesh-only`` plan: DP 1, PP 1, one micro-batch)."""
    c = plan.cluster
    if c is None:
        return {"dp": 1, "pp": 1, "micro_batches": 1, "micro_batch": plan.inputs.batch}
    return {
        "dp": c.dp,
        "pp": c.pp,
        "vpp": c.vpp,
        "micro_batches": c.micro_batches,
        "micro_batch": c.micro_batch,
        "zero": c.zero,
        "recompute": c.step_options.recompute,
    }


def _levels_text(plan: Plan) -> str:
    """The docstring paragraph on the cluster levels and the predicted step."""
    levels = _levels(plan)
    mesh = f"{plan.mesh.rows}×{plan.mesh.cols}"
    if plan.cluster is None:
        return textwrap.fill(
            f"Cluster levels: none (planned with --mesh-only): one {mesh} mesh of every chip, "
            f"predicted FC time {plan.fc_time_s:.4g} s per step.",
            width=96,
        )
    c = plan.cluster
    recompute = c.step_options.recompute
    return textwrap.fill(
        f"Cluster levels: DP {c.dp} × PP {c.pp} (v = {c.vpp}) × the {mesh} mesh; "
        f"{c.micro_batches} micro-batches of {c.micro_batch} sequences per replica; ZeRO "
        f"{c.zero}, recompute {recompute}. make_cluster_mesh() lays out every chip as "
        f"{levels['dp']} × {levels['pp']} × {mesh}; predicted step {c.step.step_s:.4g} s "
        f"(MFU {c.mfu:.1%}).",
        width=96,
    )
