"""IEEE edge cases against torch on CPU, element by element, NaN and inf positions included:
rows holding +inf, rows of -inf, rows holding NaN, rows partly -inf (masked) and rows
holding +inf and -inf, placed at random rows of random odd-shaped inputs, in fp32, bf16
and fp16, through softmax, log_softmax, logsumexp, max and min (NaN propagates, as in
torch), on the float64 reference and the CPU executor, with the default schedule and
with one that splits a row over several blocks' worth of steps. Attention through the
streamed kernel: a NaN query, an inf key. Every program run here is also compiled for
sm_80 and sm_90a and assembled (tests/conftest.py wraps the CPU executor).

Where torch has no answer of its own: max/min over an empty axis (torch refuses) is
covered by test_empty_tensors_cpu.py."""
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the reference these tests compare with
import torch.nn.functional as F  # noqa: E402

import plait
from plait.dsl import (Tensor, algorithm, evaluate, index, log_softmax, logsumexp, softmax,
                       where)
from plait.dsl import sum as sum_
from plait.dsl import max as max_
from plait.dsl import min as min_
from plait.lowering.pipeline import lower
from plait.lowering.stream.plan import StreamKernel
from plait.runtime.tolerance import TOLERANCE
from plait.dsl.dtypes import dtype_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from attention import attention  # noqa: E402


@algorithm
def row_ops(x: Tensor["M", "N"]):
    return {"softmax": softmax(x, over="N"), "log_softmax": log_softmax(x, over="N"),
            "logsumexp": logsumexp(x, over="N"), "max": max_(x, over="N"),
            "min": min_(x, over="N")}


@algorithm
def column_ops(x: Tensor["N", "M"]):            # the reduced axis is the slow one
    return {"softmax": softmax(x, over="N"), "logsumexp": logsumexp(x, over="N"),
            "max": max_(x, over="N")}


DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}
LOOPED = {"algorithm": "row_ops", "grid": {"M": 4}, "block": {"N": {"threads": 64, "vector": 2}}}


def _special_rows(M, N, rng, dtype):
    """Random rows; at random rows: +inf at a random column, all -inf, NaN at a random
    column, +inf and -inf, half -inf; the rest finite. Returns (x, which rows)."""
    x = (rng.standard_normal((M, N)) * 3).astype(np.float32)
    rows = rng.choice(M, size=5, replace=False)
    cols = lambda k: rng.choice(N, size=k, replace=False)      # noqa: E731
    x[rows[0], cols(1)] = np.inf
    x[rows[1]] = -np.inf
    x[rows[2], cols(1)] = np.nan
    x[rows[3], cols(2)] = (np.inf, -np.inf)
    x[rows[4], cols(N // 2)] = -np.inf
    return x.astype(dtype), rows


def _torch_row_ops(x, dim):
    t = torch.from_numpy(np.asarray(x, np.float32))       # the same rounded values
    return {"softmax": torch.softmax(t, dim), "log_softmax": torch.log_softmax(t, dim),
            "logsumexp": torch.logsumexp(t, dim), "max": t.amax(dim), "min": t.amin(dim)}


def assert_ieee_equal(got, want, dtype, what):
    """NaN where torch has NaN, the same infinities, finite values within the dtype's
    tolerance of the largest finite magnitude."""
    got = np.asarray(got).astype(np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    assert (nan_got == nan_want).all(), \
        f"{what}: NaN at {np.argwhere(nan_got != nan_want)[:5].tolist()} differs from torch"
    inf = np.isinf(want) | np.isinf(got)
    assert (got[inf] == want[inf]).all(), \
        f"{what}: inf differs at {np.argwhere(inf & (got != want))[:5].tolist()}"
    finite = np.isfinite(want)
    tol = TOLERANCE[dtype_of(np.dtype(dtype))]
    scale = np.abs(want[finite]).max(initial=1.0)
    np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=tol * scale,
                               err_msg=what)


def _odd_shape(rng, wide=False):
    M = int(rng.integers(7, 40))
    N = int(rng.choice([37, 129, 300, 1531] + ([20011] if wide else [])))
    return M, N


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("schedule", [None, LOOPED], ids=["default", "looped"])
def test_row_ops_match_torch_with_inf_and_nan(dtype, schedule, rng):
    M, N = _odd_shape(rng, wide=schedule is None)
    x, _ = _special_rows(M, N, rng, DTYPES[dtype])
    want = _torch_row_ops(x, 1)
    with np.errstate(all="ignore"):
        ref = evaluate(row_ops.graph({"x": dtype}), {"x": x})
    got = plait.run(row_ops, x, device="cpu", schedule=schedule)
    for name, w in want.items():
        assert got[name].dtype == x.dtype
        assert_ieee_equal(ref[name], w.numpy(), np.float32, f"reference {name} {M}x{N}")
        assert_ieee_equal(got[name], w.numpy(), DTYPES[dtype], f"{name} {dtype} {M}x{N}")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_reductions_over_the_slow_axis_match_torch(dtype, rng):
    M, N = _odd_shape(rng)
    x, _ = _special_rows(M, N, rng, DTYPES[dtype])
    x = np.ascontiguousarray(x.T)                           # stored [N, M]
    want = _torch_row_ops(x, 0)
    got = plait.run(column_ops, x, device="cpu")
    for name in got:
        assert_ieee_equal(got[name], want[name].numpy(), DTYPES[dtype], f"{name} {N}x{M}")


def test_nan_propagates_through_max_and_min_beside_infinities(rng):
    """A NaN wins over +inf in max and over -inf in min, wherever it sits in the row."""
    M, N = _odd_shape(rng)
    x = rng.standard_normal((M, N)).astype(np.float32)
    for r in range(M):
        cols = rng.choice(N, size=3, replace=False)
        x[r, cols] = (np.nan, np.inf, -np.inf)
    got = plait.run(row_ops, x, device="cpu")
    assert np.isnan(got["max"]).all() and np.isnan(got["min"]).all()
    assert np.isnan(got["logsumexp"]).all() and np.isnan(got["softmax"]).all()


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_streamed_attention_propagates_nan_and_inf_as_sdpa(dtype, rng):
    """A NaN in one query row and an inf in one key: torch's SDPA answers (NaN rows where
    a score is NaN or where +inf meets +inf), element by element. bf16 runs the streamed
    kernel, fp32 (no tf32) the unstreamed softmax and contractions."""
    B, H, S, T, D = 1, 2, int(rng.integers(20, 70)), int(rng.integers(70, 150)), 16
    q, k, v = (rng.standard_normal(s).astype(np.float32).astype(DTYPES[dtype])
               for s in ((B, H, S, D), (B, H, T, D), (B, H, T, D)))
    q[0, 0, rng.integers(S), rng.integers(D)] = np.nan
    k[0, 1, rng.integers(T), rng.integers(D)] = np.inf
    tq, tk, tv = (torch.from_numpy(np.asarray(a, np.float32)) for a in (q, k, v))
    want = F.scaled_dot_product_attention(tq, tk, tv, scale=0.125).numpy()
    assert np.isnan(want).any() and np.isfinite(want).any()
    got = plait.run(attention, q, k, v, device="cpu")
    assert_ieee_equal(got, want, DTYPES[dtype], f"attention {dtype}")


@algorithm
def later_keys(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
               v: Tensor["B", "H", "T", "D"]):
    """Query s sees keys t >= s: a row's first key tiles are all masked, so its running
    max stays -inf there and the rescale exp(m - m_new) must not become NaN."""
    s = where(index("T") >= index("S"), sum_(q * k, over="D") * 0.125, float("-inf"))
    return sum_(softmax(s, over="T") * v, over="T")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_online_softmax_rescale_after_masked_tiles_matches_sdpa(dtype, rng):
    B, H, S, D = 1, 2, int(rng.integers(70, 140)), 16
    T = S + int(rng.integers(0, 60))                       # every row sees a key
    q, k, v = (rng.standard_normal(s).astype(np.float32).astype(DTYPES[dtype])
               for s in ((B, H, S, D), (B, H, T, D), (B, H, T, D)))
    tq, tk, tv = (torch.from_numpy(np.asarray(a, np.float32)) for a in (q, k, v))
    keep = torch.arange(T)[None, :] >= torch.arange(S)[:, None]
    want = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=keep, scale=0.125).numpy()
    sizes = {"B": B, "H": H, "S": S, "T": T, "D": D}
    low = lower(later_keys.graph({n: dtype for n in "qkv"}), None, sizes, True, "sm_90a")
    assert any(isinstance(t, StreamKernel) for t in low.threads), "not streamed"
    got = plait.run(later_keys, q, k, v, device="cpu")
    assert np.isfinite(np.asarray(got, np.float64)).all()
    assert_ieee_equal(got, want, DTYPES[dtype], f"later keys {dtype}")
