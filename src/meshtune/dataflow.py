"""Phase 1 of the MeshSlice autotuner: dataflow, transposition and sharding (§3.2.1, Table 1).

For a layer ``Y = X W`` the largest of X, W and Y stays stationary (ties prefer Y, then X, so
that the untransposed Y-stationary default wins when nothing is gained). The forward,
backward-data and backward-weight GeMMs then come from the same row of Table 1:

==========  ====================  ======================  =======================
stationary  forward               backward data           backward weight
==========  ====================  ======================  =======================
Y           Y = OS(X, W)          X' = LS(Y', W)          W' = RS(X, Y')
X           Y = LS(X, Wᵀ)         X' = OS(Y', Wᵀ)         W'ᵀ = RS(Y', X)
W           Y = RS(Xᵀ, W)         X'ᵀ = LS(W, Y')         W' = OS(Xᵀ, Y')
==========  ====================  ======================  =======================

Every GeMM is recorded in the canonical form of Figure 5 with its own (m, n, k):
OS ``C(m×n) = A(m×k)·B(k×n)``, LS ``C(m×n) = A(m×k)·Bᵀ`` with B (n×k), and RS
``C(m×n) = Aᵀ·B`` with A (k×m), B (k×n). In all three passes of a row the slicing loop runs over
the one dimension the stationary matrix lacks (``in`` for Y, ``out`` for X, ``tokens`` for W), so
a layer has a single slice count S.

Sharding: matrix rows go to mesh rows and matrix columns to mesh columns. The *transposed*
variant of a row transposes every matrix and swaps the directions of the two moving ones, which
is the same computation on the transposed mesh. The transposition heuristic keeps the
untransposed dataflow unless the layer's input X would then need a transpose: a W-stationary
layer consumes Xᵀ, so it flips the layout it receives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from meshtune.model.layers import FcLayer


class Dataflow(str, Enum):
    """2D GeMM dataflows (§2.3.1, Figure 1)."""

    OS = "OS"
    LS = "LS"
    RS = "RS"


class Stationary(str, Enum):
    """Which matrix of ``Y = X W`` stays in place (Table 1 rows)."""

    Y = "Y"
    X = "X"
    W = "W"


class Pass(str, Enum):
    """The three training GeMMs of an FC layer."""

    FORWARD = "forward"
    BACKWARD_DATA = "backward_data"
    BACKWARD_WEIGHT = "backward_weight"


DataflowMode = Literal["auto", "ystn", "xstn", "wstn"]

Dim = Literal["tokens", "in", "out"]


@dataclass(frozen=True)
class GemmOp:
    """One distributed GeMM in Figure 5's canonical form (see the module docstring).

    ``transposed`` runs it on the transposed mesh: the logical row ring is the physical axis-1
    ring (P_c chips) and the logical column ring is the axis-0 ring (P_r chips). ``groups``:
    the pass is that many GeMMs of this shape, one after another (a grouped layer's,
    :class:`~meshtune.model.layers.FcLayer`); (m, n, k) are one GeMM's.
    """

    pass_: Pass
    dataflow: Dataflow
    m: int
    n: int
    k: int
    transposed: bool
    formula: str
    groups: int = 1

    @property
    def sliced_extent(self) -> int:
        """The dimension the slicing loop runs over: k for OS, n for LS, m for RS (Fig. 5)."""
        return {Dataflow.OS: self.k, Dataflow.LS: self.n, Dataflow.RS: self.m}[self.dataflow]

    @property
    def flops(self) -> int:
        """2 · m · n · k · groups: every GeMM of the pass."""
        return 2 * self.m * self.n * self.k * self.groups

    @property
    def operand_shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Dense shapes of A and B: OS (m×k, k×n), LS (m×k, n×k), RS (k×m, k×n)."""
        m, n, k = self.m, self.n, self.k
        return {
            Dataflow.OS: ((m, k), (k, n)),
            Dataflow.LS: ((m, k), (n, k)),
            Dataflow.RS: ((k, m), (k, n)),
        }[self.dataflow]


@dataclass(frozen=True)
class LayerDataflow:
    """Phase-1 decision for one FC layer."""

    layer: FcLayer
    stationary: Stationary
    transposed: bool
    ops: tuple[GemmOp, GemmOp, GemmOp]
    sharding: dict[str, tuple[Dim, Dim]]

    @property
    def x_transposed(self) -> bool:
        """Whether X is stored as Xᵀ (in over mesh rows, tokens over mesh columns)."""
        return self.transposed != (self.stationary is Stationary.W)

    @property
    def y_transposed(self) -> bool:
        """Whether Y is stored as Yᵀ; every untransposed Table 1 row stores Y as is."""
        return self.transposed

    @property
    def sliced_dim(self) -> Dim:
        """The layer dimension its slicing loop runs over (the one the stationary lacks)."""
        dims: dict[Stationary, Dim] = {
            Stationary.Y: "in",
            Stationary.X: "out",
            Stationary.W: "tokens",
        }
        return dims[self.stationary]


_TABLE1: dict[Stationary, tuple[Dataflow, Dataflow, Dataflow]] = {
    Stationary.Y: (Dataflow.OS, Dataflow.LS, Dataflow.RS),
    Stationary.X: (Dataflow.LS, Dataflow.OS, Dataflow.RS),
    Stationary.W: (Dataflow.RS, Dataflow.LS, Dataflow.OS),
}

_FORMULAS: dict[Stationary, tuple[str, str, str]] = {
    Stationary.Y: ("Y = OS(X, W)", "X' = LS(Y', W)", "W' = RS(X, Y')"),
    Stationary.X: ("Y = LS(X, Wᵀ)", "X' = OS(Y', Wᵀ)", "W'ᵀ = RS(Y', X)"),
    Stationary.W: ("Y = RS(Xᵀ, W)", "X'ᵀ = LS(W, Y')", "W' = OS(Xᵀ, Y')"),
}

# Stored (row dim, column dim) of X, W, Y in the untransposed row of Table 1.
_SHARDING: dict[Stationary, dict[str, tuple[Dim, Dim]]] = {
    Stationary.Y: {"X": ("tokens", "in"), "W": ("in", "out"), "Y": ("tokens", "out")},
    Stationary.X: {"X": ("tokens", "in"), "W": ("out", "in"), "Y": ("tokens", "out")},
    Stationary.W: {"X": ("in", "tokens"), "W": ("in", "out"), "Y": ("tokens", "out")},
}


def choose_stationary(layer: FcLayer) -> Stationary:
    """The largest of X, W, Y (ties: Y, then X, then W). For a grouped layer (a mesh's
    experts) these are one GeMM's: each expert's tokens against one expert's weight, the
    ratio of the group's G·X, G·W and G·Y, so that a weight-moving row is chosen only where
    the group's weights are smaller than its activations (§3.2.1)."""
    sizes = {
        Stationary.Y: layer.y_elements,
        Stationary.X: layer.x_elements,
        Stationary.W: layer.w_elements,
    }
    return max(sizes, key=lambda s: sizes[s])  # max keeps the first of equal keys


def _gemm_shapes(layer: FcLayer, stationary: Stationary) -> tuple[tuple[int, int, int], ...]:
    """(m, n, k) of forward, backward-data and backward-weight for a Table 1 row."""
    t, i, o = layer.tokens, layer.in_features, layer.out_features
    return {
        Stationary.Y: ((t, o, i), (t, i, o), (i, o, t)),
        Stationary.X: ((t, o, i), (t, i, o), (o, i, t)),
        Stationary.W: ((t, o, i), (i, t, o), (i, o, t)),
    }[stationary]


def layer_dataflow(layer: FcLayer, stationary: Stationary, transposed: bool) -> LayerDataflow:
    """Build the three GeMMs and the sharding of ``layer`` for a Table 1 row (a grouped
    layer's passes carry its group count)."""
    passes = (Pass.FORWARD, Pass.BACKWARD_DATA, Pass.BACKWARD_WEIGHT)
    ops = tuple(
        GemmOp(p, df, m, n, k, transposed, formula, layer.groups)
        for p, df, (m, n, k), formula in zip(
            passes,
            _TABLE1[stationary],
            _gemm_shapes(layer, stationary),
            _FORMULAS[stationary],
            strict=True,
        )
    )
    sharding = {
        name: ((cols, rows) if transposed else (rows, cols))
        for name, (rows, cols) in _SHARDING[stationary].items()
    }
    return LayerDataflow(layer, stationary, transposed, (ops[0], ops[1], ops[2]), sharding)


@dataclass(frozen=True)
class BlockDataflow:
    """Phase-1 result for a whole block: one decision per FC layer plus inserted transposes."""

    layers: tuple[LayerDataflow, ...]
    transposes: tuple[str, ...]


def plan_dataflows(layers: Sequence[FcLayer], mode: DataflowMode = "auto") -> BlockDataflow:
    """Phase 1 for a block's FC layers, in order.

    ``mode="auto"`` keeps the largest matrix stationary; ``"ystn"`` forces Y-stationary
    everywhere (the "not optimized" baseline of Table 2); ``"xstn"`` and ``"wstn"`` force the
    other rows (FSDP and 1D TP are those rows on a one-row mesh). The residual stream is stored
    untransposed; a layer fed by another FC inherits that layer's output layout, and a
    transposed output that returns to the residual stream costs a transpose, which is listed.
    """
    decided: dict[str, LayerDataflow] = {}
    transposes: list[str] = []
    for layer in layers:
        stationary = choose_stationary(layer) if mode == "auto" else Stationary(mode[0].upper())
        input_transposed = decided[layer.fed_by].y_transposed if layer.fed_by else False
        transposed = input_transposed != (stationary is Stationary.W)
        decided[layer.name] = layer_dataflow(layer, stationary, transposed)
    consumers = {layer.fed_by for layer in layers if layer.fed_by}
    for name, choice in decided.items():
        if name not in consumers and choice.y_transposed:
            transposes.append(f"transpose {name} output before the residual add")
    return BlockDataflow(tuple(decided.values()), tuple(transposes))
