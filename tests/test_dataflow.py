"""Phase 1: dataflow, transposition heuristic and sharding (meshtune.dataflow, §3.2.1, Table 1)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from meshtune.dataflow import (
    Dataflow,
    GemmOp,
    LayerDataflow,
    Pass,
    Stationary,
    choose_stationary,
    layer_dataflow,
    plan_dataflows,
)
from meshtune.model.layers import FcLayer, fc_layers
from meshtune.model.spec import ModelSpec

# Layers with distinct dimensions where exactly one matrix is the largest.
#   Y-stn: X = 64·16 = 1024, W = 16·32 = 512,  Y = 64·32 = 2048
#   X-stn: X = 64·32 = 2048, W = 32·16 = 512,  Y = 64·16 = 1024
#   W-stn: X = 16·64 = 1024, W = 64·32 = 2048, Y = 16·32 = 512
Y_LARGEST = FcLayer("y", tokens=64, in_features=16, out_features=32, fed_by=None)
X_LARGEST = FcLayer("x", tokens=64, in_features=32, out_features=16, fed_by=None)
W_LARGEST = FcLayer("w", tokens=16, in_features=64, out_features=32, fed_by=None)
BY_STATIONARY = {Stationary.Y: Y_LARGEST, Stationary.X: X_LARGEST, Stationary.W: W_LARGEST}

# Table 1 of the paper, verbatim (forward, backward data, backward weight).
TABLE1 = {
    Stationary.Y: ("Y = OS(X, W)", "X' = LS(Y', W)", "W' = RS(X, Y')"),
    Stationary.X: ("Y = LS(X, Wᵀ)", "X' = OS(Y', Wᵀ)", "W'ᵀ = RS(Y', X)"),
    Stationary.W: ("Y = RS(Xᵀ, W)", "X'ᵀ = LS(W, Y')", "W' = OS(Xᵀ, Y')"),
}
PASSES = (Pass.FORWARD, Pass.BACKWARD_DATA, Pass.BACKWARD_WEIGHT)


def layer(name: str, t: int, i: int, o: int, fed_by: str | None = None) -> FcLayer:
    return FcLayer(name, tokens=t, in_features=i, out_features=o, fed_by=fed_by)


def dims(lay: FcLayer) -> dict[str, int]:
    return {"tokens": lay.tokens, "in": lay.in_features, "out": lay.out_features}


# --------------------------------------------------------------------------- choosing


@pytest.mark.parametrize("stationary", list(Stationary))
def test_largest_matrix_stays_stationary(stationary: Stationary) -> None:
    assert choose_stationary(BY_STATIONARY[stationary]) is stationary


@pytest.mark.parametrize(
    ("t", "i", "o", "expected"),
    [
        (16, 16, 16, Stationary.Y),  # X = W = Y
        (16, 32, 16, Stationary.X),  # X = W = 512 > Y = 256: X before W
        (16, 16, 32, Stationary.Y),  # Y = W = 512 > X = 256: Y before W
        (32, 16, 16, Stationary.Y),  # X = Y = 512 > W = 256: Y before X
    ],
    ids=["all-equal", "X=W", "Y=W", "X=Y"],
)
def test_ties_prefer_y_then_x_then_w(t: int, i: int, o: int, expected: Stationary) -> None:
    assert choose_stationary(layer("l", t, i, o)) is expected


# --------------------------------------------------------------------------- Table 1 rows


@pytest.mark.parametrize("stationary", list(Stationary))
@pytest.mark.parametrize("transposed", [False, True])
def test_table1_rows(stationary: Stationary, transposed: bool) -> None:
    lay = BY_STATIONARY[stationary]
    df = layer_dataflow(lay, stationary, transposed)
    expected_flows = {
        Stationary.Y: ("OS", "LS", "RS"),
        Stationary.X: ("LS", "OS", "RS"),
        Stationary.W: ("RS", "LS", "OS"),
    }[stationary]
    assert tuple(op.pass_ for op in df.ops) == PASSES
    assert tuple(op.dataflow.value for op in df.ops) == expected_flows
    assert tuple(op.formula for op in df.ops) == TABLE1[stationary]
    assert all(op.transposed is transposed for op in df.ops)
    assert (df.stationary, df.transposed) == (stationary, transposed)


@pytest.mark.parametrize("stationary", list(Stationary))
def test_gemm_shapes_follow_the_training_formulas(stationary: Stationary) -> None:
    """(m, n, k) of each pass, derived by hand from Y = XW, X' = Y'Wᵀ, W' = XᵀY'.

    OS C(m×n) = A(m×k)·B(k×n); LS C(m×n) = A(m×k)·B(n×k)ᵀ; RS C(m×n) = A(k×m)ᵀ·B(k×n).
    """
    t, i, o = 7, 11, 13  # distinct primes: any mix-up shows
    lay = layer("l", t, i, o)
    expected = {
        # Y = OS(X, W): X (t×i)·W (i×o)            -> m=t, n=o, k=i
        # X' = LS(Y', W): Y' (t×o)·W(i×o)ᵀ          -> m=t, n=i, k=o
        # W' = RS(X, Y'): X(t×i)ᵀ·Y' (t×o)          -> m=i, n=o, k=t
        Stationary.Y: [(t, o, i), (t, i, o), (i, o, t)],
        # Y = LS(X, Wᵀ): X (t×i)·(Wᵀ (o×i))ᵀ        -> m=t, n=o, k=i
        # X' = OS(Y', Wᵀ): Y' (t×o)·Wᵀ (o×i)        -> m=t, n=i, k=o
        # W'ᵀ = RS(Y', X): Y'(t×o)ᵀ·X (t×i)         -> m=o, n=i, k=t
        Stationary.X: [(t, o, i), (t, i, o), (o, i, t)],
        # Y = RS(Xᵀ, W): (Xᵀ (i×t))ᵀ·W (i×o)        -> m=t, n=o, k=i
        # X'ᵀ = LS(W, Y'): W (i×o)·Y'(t×o)ᵀ         -> m=i, n=t, k=o
        # W' = OS(Xᵀ, Y'): Xᵀ (i×t)·Y' (t×o)        -> m=i, n=o, k=t
        Stationary.W: [(t, o, i), (i, t, o), (i, o, t)],
    }[stationary]
    df = layer_dataflow(lay, stationary, transposed=False)
    assert [(op.m, op.n, op.k) for op in df.ops] == expected
    for op in df.ops:
        assert op.flops == 2 * t * i * o == lay.flops_per_pass


# --------------------------------------------------------------------------- numerical oracle

_FORMULA = re.compile(r"^(?P<out>\S+) = (?P<flow>OS|LS|RS)\((?P<a>[^,]+), (?P<b>[^)]+)\)$")


def canonical(flow: Dataflow, a: np.ndarray, b: np.ndarray, op: GemmOp) -> np.ndarray:
    """Figure 5's canonical forms, checking the operand shapes against the recorded (m, n, k)."""
    m, n, k = op.m, op.n, op.k
    if flow is Dataflow.OS:
        assert (a.shape, b.shape) == ((m, k), (k, n))
        return a @ b
    if flow is Dataflow.LS:
        assert (a.shape, b.shape) == ((m, k), (n, k))
        return a @ b.T
    assert (a.shape, b.shape) == ((k, m), (k, n))
    return a.T @ b


@pytest.mark.parametrize("stationary", list(Stationary))
def test_oracle_dense_numpy(stationary: Stationary) -> None:
    """Evaluate every recorded GeMM densely and compare with the training formulas."""
    t, i, o = 6, 10, 14
    rng = np.random.default_rng(1234)
    X = rng.integers(-5, 6, size=(t, i)).astype(np.float64)
    W = rng.integers(-5, 6, size=(i, o)).astype(np.float64)
    dY = rng.integers(-5, 6, size=(t, o)).astype(np.float64)
    operands = {"X": X, "Xᵀ": X.T, "W": W, "Wᵀ": W.T, "Y'": dY}
    truth = {
        "Y": X @ W,  # forward
        "X'": dY @ W.T,  # backward data
        "W'": X.T @ dY,  # backward weight
    }
    truth |= {f"{name}ᵀ": value.T for name, value in list(truth.items())}

    df = layer_dataflow(layer("l", t, i, o), stationary, transposed=False)
    for op in df.ops:
        parsed = _FORMULA.match(op.formula)
        assert parsed, op.formula
        assert parsed["flow"] == op.dataflow.value
        c = canonical(op.dataflow, operands[parsed["a"]], operands[parsed["b"]], op)
        assert c.shape == (op.m, op.n)
        np.testing.assert_array_equal(c, truth[parsed["out"]], err_msg=op.formula)


@pytest.mark.parametrize("stationary", list(Stationary))
def test_stationary_matrix_sits_in_the_stationary_slot(stationary: Stationary) -> None:
    """OS keeps the output, LS the left input, RS the right input (§2.3.1, Figure 1)."""
    df = layer_dataflow(BY_STATIONARY[stationary], stationary, transposed=False)
    for op in df.ops:
        parsed = _FORMULA.match(op.formula)
        assert parsed
        slot = {Dataflow.OS: "out", Dataflow.LS: "a", Dataflow.RS: "b"}[op.dataflow]
        base = parsed[slot].replace("'", "").replace("ᵀ", "")
        assert base == stationary.value, op.formula


# --------------------------------------------------------------------------- slicing, sharding


@pytest.mark.parametrize("stationary", list(Stationary))
@pytest.mark.parametrize("transposed", [False, True])
def test_sliced_dim_is_what_the_stationary_lacks(stationary: Stationary, transposed: bool) -> None:
    lay = BY_STATIONARY[stationary]  # tokens, in, out all distinct
    df = layer_dataflow(lay, stationary, transposed)
    expected = {Stationary.Y: "in", Stationary.X: "out", Stationary.W: "tokens"}[stationary]
    assert df.sliced_dim == expected
    assert df.sliced_dim not in df.sharding[stationary.value]
    for op in df.ops:
        assert op.sliced_extent == dims(lay)[df.sliced_dim]


def test_sliced_extent_per_dataflow() -> None:
    # Figure 5: OS slices k, LS slices n, RS slices m.
    base = {"pass_": Pass.FORWARD, "m": 2, "n": 3, "k": 5, "transposed": False, "formula": ""}
    assert GemmOp(dataflow=Dataflow.OS, **base).sliced_extent == 5
    assert GemmOp(dataflow=Dataflow.LS, **base).sliced_extent == 3
    assert GemmOp(dataflow=Dataflow.RS, **base).sliced_extent == 2


SHARDING = {
    # matrix rows over mesh rows, matrix columns over mesh columns (§3.2.1 "Sharding")
    Stationary.Y: {"X": ("tokens", "in"), "W": ("in", "out"), "Y": ("tokens", "out")},
    Stationary.X: {"X": ("tokens", "in"), "W": ("out", "in"), "Y": ("tokens", "out")},  # Wᵀ
    Stationary.W: {"X": ("in", "tokens"), "W": ("in", "out"), "Y": ("tokens", "out")},  # Xᵀ
}


@pytest.mark.parametrize("stationary", list(Stationary))
def test_sharding_of_each_tensor(stationary: Stationary) -> None:
    lay = BY_STATIONARY[stationary]
    assert layer_dataflow(lay, stationary, False).sharding == SHARDING[stationary]
    flipped = {name: (c, r) for name, (r, c) in SHARDING[stationary].items()}
    assert layer_dataflow(lay, stationary, True).sharding == flipped


@pytest.mark.parametrize("stationary", list(Stationary))
@pytest.mark.parametrize("transposed", [False, True])
def test_layout_flags_agree_with_sharding(stationary: Stationary, transposed: bool) -> None:
    df = layer_dataflow(BY_STATIONARY[stationary], stationary, transposed)
    assert df.x_transposed == (df.sharding["X"] == ("in", "tokens"))
    assert df.y_transposed == (df.sharding["Y"] == ("out", "tokens"))


# --------------------------------------------------------------------------- transposition


def by_name(choices: tuple[LayerDataflow, ...]) -> dict[str, LayerDataflow]:
    return {c.layer.name: c for c in choices}


def test_w_stationary_fed_by_residual_is_transposed() -> None:
    # The residual stream is untransposed; an untransposed W-stn layer would need Xᵀ.
    block = plan_dataflows([layer("w", 16, 64, 32)])
    (w,) = block.layers
    assert (w.stationary, w.transposed) == (Stationary.W, True)
    assert not w.x_transposed  # consumes X as it comes
    assert w.y_transposed
    # its transposed output goes back to the residual stream: one transpose, listed
    assert block.transposes == ("transpose w output before the residual add",)


def test_consumer_follows_its_producer_layout() -> None:
    # w1 (W-stn, so transposed) feeds an X-stn, a Y-stn and a W-stn layer. Widths between an FC
    # layer and its consumer may change through non-FC ops (attention), so y3 may take 8 inputs.
    block = plan_dataflows(
        [
            layer("w1", 32, 64, 48),  # X 2048, W 3072, Y 1536
            layer("x2", 32, 48, 16, fed_by="w1"),  # X 1536, W 768, Y 512
            layer("y3", 32, 8, 16, fed_by="w1"),  # X 256, W 128, Y 512
            layer("w4", 32, 48, 64, fed_by="w1"),  # X 1536, W 3072, Y 2048
        ]
    )
    got = by_name(block.layers)
    assert (got["w1"].stationary, got["w1"].transposed) == (Stationary.W, True)
    assert got["w1"].y_transposed
    # X- and Y-stn consumers of a transposed output take their transposed dataflow, so that
    # nothing is transposed in between ...
    assert (got["x2"].stationary, got["x2"].transposed) == (Stationary.X, True)
    assert (got["y3"].stationary, got["y3"].transposed) == (Stationary.Y, True)
    # ... and a W-stn consumer (which reads Xᵀ) is then not transposed.
    assert (got["w4"].stationary, got["w4"].transposed) == (Stationary.W, False)
    for name in ("x2", "y3", "w4"):
        assert got[name].x_transposed == got["w1"].y_transposed, name
    # w1 is consumed; x2 and y3 return transposed outputs to the residual stream, w4 does not
    assert block.transposes == (
        "transpose x2 output before the residual add",
        "transpose y3 output before the residual add",
    )


def test_w_then_w_needs_no_transpose() -> None:
    block = plan_dataflows([layer("up", 16, 64, 128), layer("down", 16, 128, 64, fed_by="up")])
    up, down = block.layers
    assert (up.stationary, up.transposed) == (Stationary.W, True)
    assert (down.stationary, down.transposed) == (Stationary.W, False)
    assert down.x_transposed == up.y_transposed
    assert not down.y_transposed
    assert block.transposes == ()


def test_gpt3_at_256_chips_needs_no_transposes(gpt3: ModelSpec) -> None:
    # Weak scaling (§5.1.1): batch 128 × 2048 tokens. mlp_down (49152 → 12288) has X as the
    # largest matrix; the others keep Y. "In most LLMs, this heuristic eliminates transpositions."
    block = plan_dataflows(fc_layers(gpt3, 128, 2048))
    got = {c.layer.name: (c.stationary, c.transposed) for c in block.layers}
    assert got == {
        "qkv": (Stationary.Y, False),
        "attn_out": (Stationary.Y, False),
        "mlp_up": (Stationary.Y, False),
        "mlp_down": (Stationary.X, False),
    }
    assert block.transposes == ()


def test_gpt3_small_batch_is_weight_stationary(gpt3: ModelSpec) -> None:
    # 1 × 2048 tokens < hidden: W is the largest matrix of every layer.
    block = plan_dataflows(fc_layers(gpt3, 1, 2048))
    assert {c.stationary for c in block.layers} == {Stationary.W}
    got = {c.layer.name: c.transposed for c in block.layers}
    assert got == {"qkv": True, "attn_out": False, "mlp_up": True, "mlp_down": False}
    assert block.transposes == ()


def test_ystn_mode_forces_y_everywhere(gpt3: ModelSpec) -> None:
    for batch in (1, 128):
        block = plan_dataflows(fc_layers(gpt3, batch, 2048), mode="ystn")
        assert {(c.stationary, c.transposed) for c in block.layers} == {(Stationary.Y, False)}
        assert block.transposes == ()
        for c in block.layers:
            assert [op.dataflow for op in c.ops] == [Dataflow.OS, Dataflow.LS, Dataflow.RS]


def test_ystn_mode_forces_y_on_a_w_largest_layer() -> None:
    block = plan_dataflows([W_LARGEST], mode="ystn")
    assert block.layers[0].stationary is Stationary.Y
    assert block.layers[0].transposed is False
