"""dropout's gradient: the derived backward regenerates the mask from (seed, offset) in the
gradient kernel (it re-emits philox; nothing is saved), so dx == (mask / (1 - p)) * g
with the mask recomputed here by the test's own Philox (tests/random_cases.py). Checked
through the reference evaluator and through the derived kernels on the CPU executor, at
odd shapes, with the input stored in the other order and fused into LayerNorm."""
import numpy as np
import pytest

import plait
from plait.autodiff import grad, to_source
from plait.dsl import Tensor, algorithm, dropout, evaluate
from random_cases import (dropout_residual_layernorm, dropout_residual_layernorm_want,
                          keep_want)


@algorithm
def scaled_dropout(x: Tensor["M", "N"], xt: Tensor["N", "M"], seed: int = 0):
    return dropout(x, 0.3, seed, offset=17) * 2.0 + dropout(xt, 0.6, seed)


def _want(x, xt, dout, seed):
    M, N = x.shape
    dx = keep_want((M, N), 0.3, seed, 17) / (1 - 0.3) * 2.0 * dout
    dxt = (keep_want((M, N), 0.6, seed) / (1 - 0.6) * dout).T
    return dx, dxt


@pytest.mark.parametrize("M, N", [(37, 129), (300, 7)])
def test_grad_of_dropout_is_the_regenerated_mask_over_one_minus_p(M, N):
    rng = np.random.default_rng()
    x = rng.standard_normal((M, N)).astype(np.float32)
    xt = rng.standard_normal((N, M)).astype(np.float32)
    dout = rng.standard_normal((M, N)).astype(np.float32)
    bwd = grad(scaled_dropout, wrt=["x", "xt"])
    assert any(n.op == "philox" for n in bwd.graph().nodes)        # regenerated, not saved
    want_dx, want_dxt = _want(x, xt, dout.astype(np.float64), 9)
    ref = evaluate(bwd.graph(), {"x": x, "xt": xt, "seed": 9, "dout": dout})
    np.testing.assert_allclose(ref["dx"], want_dx, rtol=1e-6, atol=0)
    np.testing.assert_allclose(ref["dxt"], want_dxt, rtol=1e-6, atol=0)
    got = plait.run(bwd, x, xt, seed=9, dout=dout, device="cpu")
    for name, want in (("dx", want_dx), ("dxt", want_dxt)):
        np.testing.assert_array_equal(np.asarray(got[name]) == 0, want == 0, err_msg=name)
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=0, err_msg=name)


def test_the_backward_prints_as_source_that_traces_back():
    src = to_source(grad(scaled_dropout, wrt=["x"]))
    assert "philox(" in src
    namespace: dict = {}
    exec("from plait.dsl import *\n" + src, namespace)   # noqa: S102 - our own printout
    again = [v for v in namespace.values() if isinstance(v, plait.dsl.Algorithm)][-1]
    rng = np.random.default_rng()
    x, xt, dout = (rng.standard_normal(s).astype(np.float32) for s in ((6, 11), (11, 6),
                                                                         (6, 11)))
    inputs = {"x": x, "xt": xt, "seed": 4, "dout": dout}
    np.testing.assert_array_equal(evaluate(again.graph(), inputs)["dx"],
                                  evaluate(grad(scaled_dropout, wrt=["x"]).graph(),
                                           inputs)["dx"])


def test_grad_through_fused_dropout_residual_layernorm_matches_finite_differences():
    """d/dx of sum(LN(dropout(x) + r) * g) against central differences in float64 (the
    mask is piecewise constant, so the derivative is the kept positions' only)."""
    rng = np.random.default_rng()
    M, N = 5, 37
    x, r, g = (rng.standard_normal((M, N)) for _ in range(3))
    w, b = rng.standard_normal(N), rng.standard_normal(N)
    bwd = grad(dropout_residual_layernorm, wrt=["x"])
    got = plait.run(bwd, *(a.astype(np.float32) for a in (x, r, w, b)), seed=21,
                    dout=g.astype(np.float32), device="cpu")["dx"]
    direction = rng.standard_normal((M, N))
    h = 1e-6

    def f(xx):
        return float((dropout_residual_layernorm_want(xx, r, w, b, 21) * g).sum())
    numeric = (f(x + h * direction) - f(x - h * direction)) / (2 * h)
    analytic = float((np.asarray(got, np.float64) * direction).sum())
    assert abs(numeric - analytic) <= 1e-3 * max(1.0, abs(numeric))
    dropped = ~keep_want((M, N), 0.1, 21)
    assert dropped.any() and not np.asarray(got)[dropped].any()
