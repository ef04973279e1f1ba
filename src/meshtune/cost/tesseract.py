"""Tesseract 2.5D on a [q, q, d] mesh (Wang et al., ICPP 2022, §3.1, Algorithm 3, Figures 3–4).

p = d·q² chips form d *layers* of q × q chips (axes 0 and 1) stacked along a depth ring
(axis 2), 1 ≤ d ≤ q. For ``C[a, c] = A[a, b]·B[b, c]`` every chip holds an ``[a/(q·d), b/q]``
block of A, a ``[b/q, c/q]`` block of B and an ``[a/(q·d), c/q]`` block of C (Figure 4): the
rows of A and C are cut into d bands, layer l owning band l sharded q × q, and B is sharded
q × q and *replicated* over depth. Each layer then runs SUMMA on its band alone (Algorithm 3:
``broadcast A_itk`` along rows and ``B_tjk`` along columns, t = 0 … q − 1; ``C = A·Bᵀ``
broadcasts B and reduces C, ``C = Aᵀ·B`` broadcasts A and reduces C, §3.1), so the layers'
traffic runs in parallel on disjoint rings and is that of SUMMA on a q × q mesh at 1/d of the
rows (:mod:`meshtune.cost.summa`, reused as is: packets D and slices S are its knobs).

Training (MeshSlice Table 1): Tesseract's A/B/C roles are the Y-stationary row, which meshtune
forces (``dataflow_mode = "ystn"``):

* forward ``Y = OS(X, W)``: A = X (tokens × in), B = W, C = Y; the tokens are split over depth;
* backward data ``X' = LS(Y', W)``: A = Y', B = W (replicated), C = X'; tokens over depth;
* backward weight ``W' = RS(X, Y')``: both inputs are split over depth along the tokens, so
  each layer computes a partial ``W'`` of its token band; "our algorithm applied all_reduce
  ... on processors with same row and column but different depth" (§3.1). meshtune runs that
  all-reduce as a reduce-scatter then an all-gather on the depth ring (axis 2), each of
  d − 1 steps of a ``[m/(q·d), n/q]`` shard (m = in, n = out of the layer), each priced with
  its own kind's link parameters:

      all_reduce = Σ_{RdS, AG} t_launch + (d − 1) · (t_sync + (m·n / (q²·d)) · e / bw)

  It follows the layer's last reduce (it needs the finished partial W'), so it is added to the
  epilogue and is never hidden. Its link parameters are the profile's axis-2 ones, or, when the
  profile has none, those of the slowest mesh axis (:func:`meshtune.hardware.tiers.level_axis`).

Legal layers: tokens a multiple of q·d (d bands of q mesh rows) and ``in`` a multiple of q·d
(the reduce-scatter splits W' rows over depth), then SUMMA's own constraints on the band. The
transposed Y-stationary row runs the same on the transposed layers (square, so only the
physical axes swap).

Memory per chip for one GeMM (§3.1, equations 7–8): :func:`tesseract_memory`.
"""

from __future__ import annotations

import math
from dataclasses import replace

from meshtune.cost.config import Candidates, Config
from meshtune.cost.schedule import Comm, PassCost, comm_time, ring_collective
from meshtune.cost.summa import summa_comms, summa_configs, summa_cost, summa_units
from meshtune.dataflow import Dataflow, Dim, GemmOp, LayerDataflow, Stationary, layer_dataflow
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh, check_chips, divisors
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import level_axis
from meshtune.model.layers import FcLayer

DEPTH_AXIS = 2


def tesseract_problem(mesh: Mesh) -> str | None:
    """Why ``mesh`` is not a [q, q, d] mesh with 1 ≤ d ≤ q (§3.1), or ``None``."""
    if mesh.rows != mesh.cols:
        return (
            f"{mesh.label}: Tesseract needs square layers [q, q, d] (rows = cols), "
            f"got {mesh.rows} x {mesh.cols}"
        )
    if mesh.depth > mesh.rows:
        return f"{mesh.label}: Tesseract needs depth d <= q = {mesh.rows}, got d = {mesh.depth}"
    return None


def tesseract_meshes(chips: int) -> tuple[Mesh, ...]:
    """Every [q, q, d] with d·q² = ``chips`` and 1 ≤ d ≤ q, shallowest first."""
    check_chips(chips)
    found = []
    for d in divisors(chips):
        q = math.isqrt(chips // d)
        if q * q * d == chips and d <= q:
            found.append(Mesh(q, q, d))
    return tuple(found)


def tesseract_memory(a: int, b: int, c: int, q: int, d: int) -> float:
    """M_Tesseract in elements per chip for ``C[a, c] = A[a, b]·B[b, c]`` (§3.1, eq. 7–8):

    ``a/(d·q) · b/q + b/q · c/q + a/(d·q) · c/q = (a·b + b·c·d + a·c) / p``, p = d·q².
    """
    return a / (d * q) * b / q + b / q * c / q + a / (d * q) * c / q


def layer_mesh(mesh: Mesh) -> Mesh:
    """One depth layer: the q × q mesh SUMMA runs on."""
    return Mesh(mesh.rows, mesh.cols)


def layer_op(op: GemmOp, depth: int) -> GemmOp:
    """The GeMM one depth layer runs: OS and LS on m / d rows, RS on k / d (the token band)."""
    if op.dataflow is Dataflow.RS:
        return replace(op, k=op.k // depth)
    return replace(op, m=op.m // depth)


def _depth_layer(layer: LayerDataflow, depth: int) -> LayerDataflow:
    """``layer`` with 1/d of its tokens: what one depth layer plans with SUMMA."""
    fc = layer.layer
    band = FcLayer(
        fc.name, fc.tokens // depth, fc.in_features, fc.out_features, fc.fed_by, fc.groups
    )
    return layer_dataflow(band, layer.stationary, layer.transposed)


def tesseract_configs(layer: LayerDataflow, mesh: Mesh, block: int) -> Candidates:
    """SUMMA's configurations on one layer's band, when the tokens split over depth and the
    backward-weight all-reduce's reduce-scatter splits W' rows over q · d."""
    problem = tesseract_problem(mesh)
    if problem is not None:
        return (), problem
    name = layer.layer.name
    if layer.stationary is not Stationary.Y:
        return (), (
            f"layer {name}: Tesseract runs Table 1's Y-stationary row only, "
            f"got {layer.stationary.value}-stationary"
        )
    d, q = mesh.depth, mesh.rows
    fc = layer.layer
    if fc.tokens % (q * d):
        return (), (
            f"layer {name}: tokens={fc.tokens} is not a multiple of q·d = {q * d} (d bands "
            "of q mesh rows)"
        )
    if fc.in_features % (q * d):
        return (), (
            f"layer {name}: in={fc.in_features} is not a multiple of q·d = {q * d} (the "
            "backward-weight reduce-scatter over depth)"
        )
    return summa_configs(_depth_layer(layer, d), layer_mesh(mesh), block)


def tesseract_units(layer: LayerDataflow, mesh: Mesh, config: Config, block: int) -> dict[Dim, int]:
    """SUMMA's units on a band, with tokens × d and ``in`` a multiple of q · d."""
    d = mesh.depth
    units = summa_units(_depth_layer(layer, d), layer_mesh(mesh), config, block)
    units["tokens"] *= d
    units["in"] = math.lcm(units["in"], mesh.rows * d)
    return units


def _depth_all_reduce(op: GemmOp, mesh: Mesh, e: int) -> list[Comm]:
    """Backward weight (RS): reduce-scatter + all-gather of the partial C shard over depth."""
    if op.dataflow is not Dataflow.RS:
        return []
    d = mesh.depth
    shard = op.m * op.n / (mesh.rows * mesh.cols * d) * e
    return [
        *ring_collective(CollectiveKind.REDUCE_SCATTER, DEPTH_AXIS, d, shard),
        *ring_collective(CollectiveKind.ALL_GATHER, DEPTH_AXIS, d, shard),
    ]


def tesseract_comms(op: GemmOp, mesh: Mesh, config: Config, bytes_per_element: int) -> list[Comm]:
    """SUMMA's broadcasts and reduces of one layer, then the depth all-reduce (RS only)."""
    inner = summa_comms(layer_op(op, mesh.depth), layer_mesh(mesh), config, bytes_per_element)
    return inner + _depth_all_reduce(op, mesh, bytes_per_element)


def depth_priced(comms: list[Comm], profile: HardwareProfile) -> list[Comm]:
    """``comms`` on the axis whose parameters price them: axis 2 when the profile has it,
    else the slowest mesh axis (:func:`meshtune.hardware.tiers.level_axis`)."""
    return [replace(c, axis=level_axis(profile, c.kind)) for c in comms]


def tesseract_cost(op: GemmOp, mesh: Mesh, profile: HardwareProfile, config: Config) -> PassCost:
    """SUMMA's cost on one layer's band; for RS plus the depth all-reduce in the epilogue."""
    inner = summa_cost(layer_op(op, mesh.depth), layer_mesh(mesh), profile, config)
    reduce = comm_time(
        depth_priced(_depth_all_reduce(op, mesh, profile.bytes_per_element), profile), profile
    )
    return replace(
        inner,
        epilogue_s=inner.epilogue_s + reduce.total_s,
        comm=inner.comm + reduce,
        comm_wall_s=inner.comm_wall_s + reduce.total_s,
    )
