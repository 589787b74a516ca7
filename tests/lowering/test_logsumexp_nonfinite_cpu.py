"""logsumexp of rows holding infinities gives torch's answers: +inf for a row with +inf,
-inf for a row of -inf (both were NaN: the shift by the max was inf - inf), NaN for a
row with NaN; rows with some -inf (masked) and finite rows as before. Reference and CPU
executor against numpy's logaddexp, rows that fit a block and rows split across blocks;
the gradient stays finite on finite and masked rows."""
import numpy as np
import pytest

import plait
from plait.autodiff import grad
from plait.dsl import Tensor, algorithm, evaluate, log_softmax, logsumexp


@algorithm
def lse(x: Tensor["M", "N"]):
    return logsumexp(x, over="N")


@algorithm
def log_probs(x: Tensor["M", "N"]):
    return log_softmax(x, over="N")


SHAPES = [(7, 13), (6, 1531), (5, 100003)]      # the last splits N across blocks


def _rows(M, N, rng):
    """Random rows; then row 0 holds +inf, row 1 is all -inf, row 2 is partly -inf,
    row 3 holds +inf and -inf, row 4 holds NaN."""
    x = rng.standard_normal((M, N)).astype(np.float32) * 3
    cols = lambda k: rng.choice(N, size=k, replace=False)      # noqa: E731
    x[0, cols(1)] = np.inf
    x[1] = -np.inf
    x[2, cols(N // 2)] = -np.inf
    x[3, cols(2)] = (np.inf, -np.inf)
    x[4, cols(1)] = np.nan
    return x


def _masked_rows(M, N, rng):
    x = rng.standard_normal((M, N)).astype(np.float32) * 3
    x[1, rng.choice(N, size=N // 2, replace=False)] = -np.inf
    return x


@pytest.mark.parametrize("M, N", SHAPES)
def test_rows_with_infinities_give_torchs_answers(M, N):
    x = _rows(M, N, np.random.default_rng())
    want = np.logaddexp.reduce(x.astype(np.float64), axis=1)
    assert np.isposinf(want[[0, 3]]).all() and np.isneginf(want[1]) and np.isnan(want[4])
    with np.errstate(invalid="ignore", divide="ignore"):
        ref = evaluate(lse.graph(), {"x": x})["out"]
    np.testing.assert_allclose(ref, want, rtol=1e-12, atol=0)
    got = plait.run(lse, x, device="cpu")
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=0)


@pytest.mark.parametrize("M, N", SHAPES[:2])
def test_gradients_of_finite_and_masked_rows_are_finite_and_right(M, N):
    rng = np.random.default_rng()
    x, g = _masked_rows(M, N, rng), rng.standard_normal((M, N)).astype(np.float32)
    dout = rng.standard_normal(M).astype(np.float32)
    x64 = x.astype(np.float64)
    p = np.exp(x64 - x64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    cases = [(lse, dout, p * dout[:, None]),
             (log_probs, g, g - p * g.astype(np.float64).sum(1, keepdims=True))]
    for algo, seed, want in cases:
        got = plait.run(grad(algo), x, seed, device="cpu")["dx"]
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())
        ref = evaluate(grad(algo).graph(), {"x": x, "dout": seed})["dx"]
        np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-14)
