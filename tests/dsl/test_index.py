"""`index(axis)`: the position along an axis, so that masks are math (causal, sliding
window, ALiBi). Each algorithm is run by the CPU executor against float64 numpy written
independently here (the conftest also compiles and assembles it for sm_80 and sm_90a),
on odd shapes; its gradient is checked against numpy's, and its source round-trips."""
import numpy as np
import pytest

from plait.autodiff import grad
from plait.autodiff.source import from_source, to_source
from plait.dsl import (DType, PlaitError, Tensor, algorithm, cast, evaluate, exp, index,
                       logical_and, max, sum, where)
from plait.lowering.gemm.plan import GemmProgram
from plait.lowering.pipeline import emulate, lower

NEG = -1e30       # a large negative score: exp underflows to exactly 0


@algorithm
def causal_softmax(s: Tensor["S", "T"]):
    masked = where(index("T") <= index("S"), s, NEG)
    e = exp(masked - max(masked, over="T"))
    return e / sum(e, over="T")


@algorithm
def alibi_window(s: Tensor["S", "T"], slope: float = 0.25):
    dist = cast(index("S") - index("T"), "fp32")
    near = logical_and(index("S") - index("T") < 5, index("T") <= index("S"))
    return where(near, s - slope * dist, 0.0)


@algorithm
def lower_triangular_matmul(a: Tensor["M", "K"], b: Tensor["K", "N"]):
    return where(index("N") <= index("M"), sum(a * b, over="K"), 0.0)


def _causal_softmax_np(s):
    S, T = s.shape
    keep = np.arange(T)[None, :] <= np.arange(S)[:, None]
    z = np.where(keep, s, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    e = np.where(keep, np.exp(z), 0.0)
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("shape", [(37, 45), (5, 129), (130, 3)])
def test_causal_softmax(shape):
    rng = np.random.default_rng(shape[0] * 7 + shape[1])
    s = rng.standard_normal(shape).astype(np.float32)
    g = causal_softmax.graph({})
    out = emulate(g, None, {"S": shape[0], "T": shape[1]}, {"s": s}, {}, "sm_90a")["out"]
    np.testing.assert_allclose(out, _causal_softmax_np(s.astype(np.float64)), atol=2e-6)
    # the reference stores fp32, as the algorithm declares: one rounding of values <= 1
    np.testing.assert_allclose(evaluate(g, {"s": s})["out"], _causal_softmax_np(s), atol=6e-8)


def test_window_and_alibi():
    rng = np.random.default_rng(3)
    s = rng.standard_normal((41, 33)).astype(np.float32)
    g = alibi_window.graph({})
    out = emulate(g, None, {"S": 41, "T": 33}, {"s": s}, {"slope": 0.25}, "sm_90a")["out"]
    i, j = np.arange(41)[:, None], np.arange(33)[None, :]
    ref = np.where((i - j < 5) & (j <= i), s - 0.25 * (i - j), 0.0)
    np.testing.assert_allclose(out, ref, atol=1e-6)


def test_index_in_a_tensor_core_epilogue():
    rng = np.random.default_rng(5)
    sizes = {"M": 67, "N": 136, "K": 72}
    a = rng.standard_normal((67, 72)).astype(np.float32)
    b = rng.standard_normal((72, 136)).astype(np.float32)
    g = lower_triangular_matmul.graph({"a": DType.BF16, "b": DType.BF16})
    low = lower(g, None, sizes, True, "sm_90a")
    assert isinstance(low.threads[0], GemmProgram)
    import ml_dtypes
    a16, b16 = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    out = emulate(g, None, sizes, {"a": a16, "b": b16}, {}, "sm_90a")["out"]
    exact = np.tril(a16.astype(np.float64) @ b16.astype(np.float64))
    assert np.abs(np.asarray(out, np.float64) - exact).max() < 2e-2 * np.abs(exact).max()
    assert np.all(np.asarray(out, np.float64)[np.triu_indices(67, 1, 136)] == 0)


def test_masked_positions_get_no_gradient():
    rng = np.random.default_rng(7)
    s = rng.standard_normal((19, 23)).astype(np.float32)
    dy = rng.standard_normal((19, 23)).astype(np.float32)
    g = grad(causal_softmax).graph({})
    ds = emulate(g, None, {"S": 19, "T": 23}, {"s": s, "dout": dy}, {}, "sm_90a")["ds"]
    y = _causal_softmax_np(s.astype(np.float64))
    ref = y * (dy - (dy * y).sum(axis=1, keepdims=True))      # softmax's vjp
    np.testing.assert_allclose(ds, ref, atol=2e-6)
    assert np.all(ds[np.triu_indices(19, 1, 23)] == 0)


def test_source_round_trip():
    text = to_source(causal_softmax)
    assert 'index("T") <= index("S")' in text
    again = from_source(text)
    assert again.graph({}).text() == causal_softmax.graph({}).text()


def test_index_of_an_unbound_axis_is_refused():
    @algorithm
    def stray(x: Tensor["N"]):
        return x + cast(index("Q"), "fp32")
    with pytest.raises(PlaitError, match="Q"):
        evaluate(stray.graph({}), {"x": np.ones(3, np.float32)})


@algorithm
def causal_softmax_inf(s: Tensor["S", "T"]):
    masked = where(index("T") <= index("S"), s, float("-inf"))
    e = exp(masked - max(masked, over="T"))
    return e / sum(e, over="T")


def test_minus_infinity_masks_as_in_ieee_arithmetic():
    """exp(-inf - m) is exactly 0 for a finite row maximum m; the source keeps -inf."""
    rng = np.random.default_rng(11)
    s = rng.standard_normal((29, 31)).astype(np.float32)
    g = causal_softmax_inf.graph({})
    out = emulate(g, None, {"S": 29, "T": 31}, {"s": s}, {}, "sm_90a")["out"]
    np.testing.assert_allclose(out, _causal_softmax_np(s.astype(np.float64)), atol=2e-6)
    assert 'float("-inf")' in to_source(causal_softmax_inf)
    assert from_source(to_source(causal_softmax_inf)).graph({}).text() == g.text()
