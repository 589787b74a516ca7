"""Contractions that one output combines elementwise (a gated MLP, and its gradient's
dx = dh1 . w1 + dh3 . w3) each get a tensor-core kernel: all but the last are written to
a temporary that the last one's epilogue reads. Checked on the CPU executor against
float64 numpy at odd shapes, bf16 and fp32 and a transposed weight; the CPU runs also
compile and assemble every kernel for sm_80 and sm_90a (tests/conftest.py)."""
import numpy as np
import pytest

from plait.autodiff import grad
from plait.dsl import DType, Tensor, algorithm, silu, sum
from plait.lowering.gemm.plan import GemmProgram
from plait.lowering.pipeline import emulate, lower
from plait.runtime.tolerance import tolerance

import gated_mlp as example

SIZES = [{"M": 37, "N": 72, "K": 80}, {"M": 130, "N": 24, "K": 208}]


@algorithm
def gated_mlp_wt(x: Tensor["M", "K"], w1: Tensor["K", "N"], w3: Tensor["N", "K"]):
    """w1 stored [K, N] (a transposed weight): the B operand in the other order."""
    return silu(sum(x * w1, over="K")) * sum(x * w3, over="K")


def _silu(v):
    return v / (1.0 + np.exp(-v))


def _inputs(algo, sizes, dtype, rng):
    np_dtype = dtype.numpy
    return {p.name: (rng.standard_normal([sizes[a] for a in p.axes]) * 0.3).astype(np_dtype)
            for p in algo.tensor_params}


def _want(inputs):
    x = inputs["x"].astype(np.float64)
    w1 = inputs["w1"].astype(np.float64)
    w1 = w1.T if w1.shape[0] == x.shape[1] and w1.shape[1] != x.shape[1] else w1
    w3 = inputs["w3"].astype(np.float64)
    h1, h3 = x @ w1.T, x @ w3.T
    return h1, h3, _silu(h1) * h3


def _rel(got, want):
    got = np.asarray(got, np.float64)
    assert not np.isnan(got).any(), "an output element was never written"
    return np.abs(got - want).max() / np.abs(want).max()


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("algo", [example.gated_mlp, gated_mlp_wt], ids=["nk", "kn"])
def test_each_product_gets_a_tensor_core_kernel(algo, target):
    graph = algo.graph({"x": "bf16", "w1": "bf16", "w3": "bf16"})
    low = lower(graph, None, {"M": 8192, "N": 11008, "K": 4096}, True, target)
    assert [type(t) for t in low.threads] == [GemmProgram, GemmProgram], \
        low.kernel_graph.text()
    temps = [b for b in low.kernel_graph.buffers if b.role == "temp"]
    # one [M, N] temporary in the algorithm's dtype; no partial sums over K
    assert [(b.axes, b.dtype) for b in temps] == [(("M", "N"), DType.BF16)]
    assert not low.kernel_graph.derived


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "x".join(map(str, s.values())))
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP32])
@pytest.mark.parametrize("algo", [example.gated_mlp, gated_mlp_wt], ids=["nk", "kn"])
def test_gated_mlp_matches_float64(algo, dtype, sizes):
    rng = np.random.default_rng()
    inputs = _inputs(algo, sizes, dtype, rng)
    graph = algo.graph({k: dtype for k in inputs})
    got = emulate(graph, None, sizes, inputs, {}, "sm_90a")["out"]
    *_, want = _want(inputs)
    assert _rel(got, want) <= tolerance([dtype])


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "x".join(map(str, s.values())))
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP32])
def test_gated_mlp_gradient_matches_float64(sizes, dtype):
    rng = np.random.default_rng()
    bwd = grad(example.gated_mlp)
    inputs = _inputs(example.gated_mlp, sizes, dtype, rng)
    dout = rng.standard_normal((sizes["M"], sizes["N"])).astype(dtype.numpy)
    graph = bwd.graph({p.name: dtype for p in bwd.tensor_params})
    if dtype == DType.BF16:      # every product on tensor cores, h1 computed once
        low = lower(graph, None, sizes, True, "sm_90a")
        gemms = [t for t in low.threads if isinstance(t, GemmProgram)]
        assert len(gemms) == 6 and not low.kernel_graph.derived, low.kernel_graph.text()
    got = emulate(graph, None, sizes, {**inputs, "dout": dout}, {}, "sm_90a")
    x, w1, w3 = (inputs[k].astype(np.float64) for k in ("x", "w1", "w3"))
    dout = dout.astype(np.float64)
    h1, h3, _ = _want(inputs)
    sig = 1.0 / (1.0 + np.exp(-h1))
    dh3 = dout * _silu(h1)
    dh1 = dout * h3 * (sig * (1.0 + h1 * (1.0 - sig)))
    want = {"dx": dh1 @ w1 + dh3 @ w3, "dw1": dh1.T @ x, "dw3": dh3.T @ x}
    for name, w in want.items():
        assert _rel(got[name], w) <= tolerance([dtype]), name
