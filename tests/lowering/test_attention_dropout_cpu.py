"""Attention with dropout through the streamed kernels, on the CPU executor against a
float64 reference whose masks come from the test's own Philox (tests/random_cases.py):

- dropout on P (the softmax weights): streamed in two passes, the log-sum-exp first, then
  p = exp(s - lse) recomputed per key tile, dropped and summed against v; each element's
  counter is its (b, h, s, t) linear index, as the definition says;
- dropout of the scores before the softmax (a random -inf mask): streamed in one pass
  (the tile-skipping interval arithmetic knows no philox, so it skips nothing).

A wrong counter or a mask left out would move the answer by far more than bf16 rounding.
Every program is also compiled for sm_80 and sm_90a and assembled (tests/conftest.py)."""
import ml_dtypes
import numpy as np
import pytest

from plait.dsl import DType
from plait.lowering.pipeline import emulate, lower
from plait.lowering.stream.plan import StreamKernel
from random_cases import attention_dropout, keep_want, score_dropout


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _reference(name, q, k, v, seed):
    s = np.einsum("bhsd,bhtd->bhst", q, k) * 0.125
    if name == "attention_dropout":
        p = np.where(keep_want(s.shape, 0.2, seed, 3), _softmax(s) / 0.8, 0.0)
    else:
        p = _softmax(np.where(keep_want(s.shape, 0.1, seed), s, -np.inf))
    return np.einsum("bhst,bhte->bhse", p, v)


SIZES = [{"B": 2, "H": 3, "S": 37, "T": 129, "D": 32, "E": 24},
         {"B": 1, "H": 2, "S": 100, "T": 70, "D": 64, "E": 16}]


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"S{s['S']}T{s['T']}")
@pytest.mark.parametrize("algo", [attention_dropout, score_dropout], ids=lambda a: a.name)
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
def test_streamed_attention_with_dropout_matches_float64(algo, sizes, dtype):
    rng = np.random.default_rng()
    np_dtype = ml_dtypes.bfloat16 if dtype == DType.BF16 else np.float16
    b, h = sizes["B"], sizes["H"]
    q = rng.standard_normal((b, h, sizes["S"], sizes["D"])).astype(np_dtype)
    k = rng.standard_normal((b, h, sizes["T"], sizes["D"])).astype(np_dtype)
    v = rng.standard_normal((b, h, sizes["T"], sizes["E"])).astype(np_dtype)
    graph = algo.graph({n: dtype for n in "qkv"})
    low = lower(graph, None, sizes, True, "sm_90a")
    assert all(isinstance(t, StreamKernel) for t in low.threads), low.kernel_graph.text()
    seed = int(rng.integers(-2 ** 31, 2 ** 31))
    out = emulate(graph, None, sizes, {"q": q, "k": k, "v": v},
                  {"seed": seed, "scale": 0.125}, "sm_90a")["out"]
    out = np.asarray(out, np.float64)
    ref = _reference(algo.name, *(a.astype(np.float64) for a in (q, k, v)), seed)
    step = 2.0 ** -8 if dtype == DType.BF16 else 2.0 ** -11
    assert not np.isnan(out).any()
    assert np.abs(out - ref).max() < 4 * step * max(1.0, np.abs(ref).max())
    # the same answer without the mask is far away: the test sees the mask
    unmasked = np.einsum("bhst,bhte->bhse", _softmax(np.einsum(
        "bhsd,bhtd->bhst", q.astype(np.float64), k.astype(np.float64)) * 0.125),
        v.astype(np.float64))
    assert np.abs(unmasked - ref).max() > 20 * step * max(1.0, np.abs(ref).max())


def test_the_backward_of_dropout_on_p_regenerates_the_mask_and_matches_float64():
    """dq, dk, dv of attention_dropout (streamed dq and dk/dv kernels, each regenerating
    the mask at its (b, h, s, t) counters) against the float64 chain rule."""
    from plait.autodiff import grad
    sizes = {"B": 1, "H": 2, "S": 37, "T": 70, "D": 32, "E": 24}
    rng = np.random.default_rng()
    q, k, v, do = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for shape in
                   ((1, 2, 37, 32), (1, 2, 70, 32), (1, 2, 70, 24), (1, 2, 37, 24)))
    graph = grad(attention_dropout, wrt=["q", "k", "v"]).graph(
        {n: DType.BF16 for n in ("q", "k", "v", "dout")})
    got = emulate(graph, None, sizes, {"q": q, "k": k, "v": v, "dout": do},
                  {"seed": 5, "scale": 0.125}, "sm_90a")
    Q, K, V, DO = (a.astype(np.float64) for a in (q, k, v, do))
    s = np.einsum("bhsd,bhtd->bhst", Q, K) * 0.125
    p, scale = _softmax(s), keep_want(s.shape, 0.2, 5, 3) / 0.8
    dp = np.einsum("bhse,bhte->bhst", DO, V) * scale
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    want = {"dq": np.einsum("bhst,bhtd->bhsd", ds, K) * 0.125,
            "dk": np.einsum("bhst,bhsd->bhtd", ds, Q) * 0.125,
            "dv": np.einsum("bhst,bhse->bhte", p * scale, DO)}
    for name, w in want.items():
        err = np.abs(np.asarray(got[name], np.float64) - w).max()
        assert err < 4 * 2.0 ** -8 * max(1.0, np.abs(w).max()), (name, err)
