"""The float64 reference keeps each value in its node's axis order: a reduction or a
broadcast of a tensor stored in another order (a gradient of a permuted output) is
typed in canonical order, and numpy's positional axes must be moved to match."""
import numpy as np
import pytest

from plait.autodiff import grad
from plait.dsl import Tensor, abs, algorithm, broadcast, evaluate, log_softmax, permute, sigmoid
from plait.dsl import sum


@algorithm
def permuted_out(x: Tensor["B", "M", "N"], y0: Tensor["N", "M", "B"]):
    return permute(log_softmax(sigmoid(x) / (abs(y0) + 1.0), over="M"), "N", "B", "M")


@algorithm
def spread(x: Tensor["B", "M", "N"], y0: Tensor["N", "M", "B"]):
    return broadcast(sum(y0, over="M"), ("M",)) * x


def _grads_by_hand(x, y0, dout):
    """dx, dy0 of permuted_out in numpy, written from the chain rule."""
    y = np.transpose(y0, (2, 1, 0))                 # [B, M, N]
    s = 1.0 / (1.0 + np.exp(-x))
    d = np.abs(y) + 1.0
    z = s / d
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    g = np.transpose(dout, (1, 2, 0))               # dout[N, B, M] -> [B, M, N]
    dz = g - p * g.sum(1, keepdims=True)
    dx = dz / d * s * (1.0 - s)
    dy = -dz * z / d * np.sign(y)
    return dx, np.transpose(dy, (2, 1, 0))


@pytest.mark.parametrize("B, M, N", [(3, 2, 3), (3, 2, 1), (5, 7, 3), (1, 4, 6)])
def test_gradient_of_a_permuted_output_matches_numpy(B, M, N):
    rng = np.random.default_rng()
    x, y0 = rng.standard_normal((B, M, N)), rng.standard_normal((N, M, B))
    dout = rng.standard_normal((N, B, M))
    got = evaluate(grad(permuted_out).graph(), {"x": x, "y0": y0, "dout": dout})
    want_dx, want_dy0 = _grads_by_hand(x, y0, dout)
    assert got["dx"].shape == (B, M, N) and got["dy0"].shape == (N, M, B)
    np.testing.assert_allclose(got["dx"], want_dx, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got["dy0"], want_dy0, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("B, M, N", [(3, 2, 4), (1, 5, 1), (7, 3, 2)])
def test_broadcast_of_a_value_in_another_order_matches_numpy(B, M, N):
    rng = np.random.default_rng()
    x, y0 = rng.standard_normal((B, M, N)), rng.standard_normal((N, M, B))
    got = evaluate(spread.graph(), {"x": x, "y0": y0})["out"]
    want = np.einsum("nmb->bn", y0)[:, None, :] * x
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
