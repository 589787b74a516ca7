"""examples/embedding_cross_entropy.py and examples/topk_sampler.py on the CPU executor
(every program also compiled and assembled, tests/conftest.py): the loss and its derived
gradient against numpy float64 written here; the sampler's token is one of the row's top
k (numpy's stable argsort) and, over thousands of rows with the same logits (each its own
uniform), its frequencies match softmax over the top k by a chi-square bound."""
import math

import numpy as np
import pytest

import plait
from plait.autodiff import grad
from plait.dsl import evaluate

import embedding_cross_entropy
import topk_sampler


def numpy_loss(ids, labels, table, head):
    h = table.astype(np.float64)[ids]
    logits = h @ head.astype(np.float64).T
    top = logits.max(1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(1)) + top[:, 0]
    loss = np.mean(lse - logits[np.arange(len(ids)), labels])
    p = np.exp(logits - lse[:, None])
    p[np.arange(len(ids)), labels] -= 1.0
    dlogits = p / len(ids)
    dtable = np.zeros_like(table, np.float64)
    np.add.at(dtable, ids, dlogits @ head.astype(np.float64))
    return loss, dtable, dlogits.T @ h


@pytest.mark.parametrize("N,V,D", [(37, 129, 24), (5, 1000, 7)])
def test_the_loss_and_its_gradient(N, V, D):
    rng = np.random.default_rng()
    ids = rng.integers(0, V, N)
    labels = rng.integers(0, V, N)
    table = rng.standard_normal((V, D)).astype(np.float32)
    head = rng.standard_normal((V, D)).astype(np.float32)
    loss, dtable, dhead = numpy_loss(ids, labels, table, head)
    got = plait.run(embedding_cross_entropy.lm_loss, ids, labels, table, head, device="cpu")
    assert float(got) == pytest.approx(loss, rel=2e-6)
    g = grad(embedding_cross_entropy.lm_loss, wrt=["table", "head"])
    dout = np.asarray(rng.standard_normal(), np.float32)
    out = plait.run(g, ids, labels, table, head, dout=dout, device="cpu")
    scale = np.abs(dtable).max() * abs(dout)
    np.testing.assert_allclose(out["dtable"], dtable * dout, rtol=1e-4, atol=1e-5 * scale)
    scale = np.abs(dhead).max() * abs(dout)
    np.testing.assert_allclose(out["dhead"], dhead * dout, rtol=1e-4, atol=1e-5 * scale)


def test_the_token_is_one_of_the_top_k():
    rng = np.random.default_rng()
    logits = rng.standard_normal((64, 1000)).astype(np.float32)
    sample = topk_sampler.sampler(7)
    for seed in (0, 12345):
        got = plait.run(sample, logits, seed=seed, temperature=0.8, device="cpu")
        top = np.argsort(-logits, axis=1, kind="stable")[:, :7]
        assert got["token"].dtype == np.int32
        assert all(t in row for t, row in zip(got["token"], top))
        z = np.take_along_axis(logits, top, 1).astype(np.float64) / 0.8
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        chosen = np.argmax(top == got["token"][:, None], axis=1)
        np.testing.assert_allclose(got["p"], p[np.arange(64), chosen], rtol=2e-6)
        want = evaluate(sample.graph(), {"logits": logits, "seed": seed, "temperature": 0.8})
        np.testing.assert_array_equal(got["token"], want["token"])


def chi_square_bound(df: int, tail: float) -> float:
    """x with P(chi2_df > x) = tail, df even: the survival function's closed form."""
    def survival(x):
        return math.exp(-x / 2) * sum((x / 2) ** i / math.factorial(i) for i in range(df // 2))
    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if survival(mid) > tail else (lo, mid)
    return hi


@pytest.mark.parametrize("seed", [7, 2024])
def test_the_draws_follow_the_softmax_of_the_top_k(seed):
    rng = np.random.default_rng(seed)
    row = rng.standard_normal(300).astype(np.float32)
    rows = 4000
    logits = np.tile(row, (rows, 1))                     # one uniform per row
    k, temperature = 6, 0.5
    got = plait.run(topk_sampler.sampler(k), logits, seed=seed, temperature=temperature,
                    device="cpu")
    top = np.argsort(-row.astype(np.float64), kind="stable")[:k]
    z = row.astype(np.float64)[top] / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    counts = np.array([(got["token"] == t).sum() for t in top])
    assert counts.sum() == rows                          # every draw is a top-k token
    chi2 = float(((counts - rows * p) ** 2 / (rows * p)).sum())
    assert chi2 < chi_square_bound(k if k % 2 == 0 else k + 1, 1e-6)
