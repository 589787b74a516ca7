"""No gradient flows through an index (argmax is piecewise constant, as comparisons are):
an algorithm whose output is only an index has a zero gradient, and the value of
max_with_index keeps max's gradient (one-hot at the maximum), checked on fresh inputs
against numpy and through the derived kernels on the CPU executor."""
import numpy as np

import plait
from plait.autodiff import grad
from plait.dsl import Tensor, algorithm, argmax, cast, max_with_index


@algorithm
def token(x: Tensor["M", "N"]):
    return argmax(x, over="N")


@algorithm
def scored(x: Tensor["M", "N"]):
    top, at = max_with_index(x, over="N")
    return top * 3.0 + cast(at, "fp32")


def test_an_index_output_has_a_zero_gradient():
    x = np.random.default_rng().standard_normal((5, 301)).astype(np.float32)
    dx = plait.run(grad(token, wrt=["x"]), x, dout=np.ones(5, np.int32), device="cpu")["dx"]
    assert dx.shape == x.shape and not np.asarray(dx).any()


def test_the_value_keeps_the_gradient_of_max():
    rng = np.random.default_rng()
    x = rng.standard_normal((7, 3001)).astype(np.float32)
    dout = rng.standard_normal(7).astype(np.float32)
    dx = plait.run(grad(scored, wrt=["x"]), x, dout=dout, device="cpu")["dx"]
    want = np.zeros_like(x)
    want[np.arange(7), x.argmax(1)] = 3.0 * dout
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=0)
