"""Tier 2: IEEE edge cases on the GPU against torch on cuda, element by element (NaN and
inf positions included): rows holding +inf, all -inf, NaN, +inf and -inf, half -inf,
at random rows of odd-shaped inputs in fp32, bf16 and fp16, through softmax,
log_softmax, logsumexp, max and min (rows within a block, and rows split over blocks);
streamed attention with a NaN query and an inf key against SDPA."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import torch.nn.functional as F  # noqa: E402

import plait  # noqa: E402
from plait.dsl import (Tensor, algorithm, index, log_softmax, logsumexp,  # noqa: E402
                       softmax, where)
from plait.dsl import sum as sum_  # noqa: E402
from plait.dsl import max as max_  # noqa: E402
from plait.dsl import min as min_  # noqa: E402

from attention import attention  # noqa: E402  (examples/ is on the path: tests/conftest.py)

TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


@algorithm
def row_ops(x: Tensor["M", "N"]):
    return {"softmax": softmax(x, over="N"), "log_softmax": log_softmax(x, over="N"),
            "logsumexp": logsumexp(x, over="N"), "max": max_(x, over="N"),
            "min": min_(x, over="N")}


def _special_rows(M, N, dtype, rng):
    x = torch.randn(M, N, device="cuda") * 3
    rows = rng.choice(M, size=5, replace=False).tolist()
    cols = lambda k: torch.as_tensor(rng.choice(N, size=k, replace=False))  # noqa: E731
    x[rows[0], cols(1)] = float("inf")
    x[rows[1]] = float("-inf")
    x[rows[2], cols(1)] = float("nan")
    c = cols(2)
    x[rows[3], c[0]], x[rows[3], c[1]] = float("inf"), float("-inf")
    x[rows[4], cols(N // 2)] = float("-inf")
    return x.to(dtype)


def _assert_ieee_equal(got, want, tol, what):
    got, want = got.double(), want.double()
    assert torch.equal(torch.isnan(got), torch.isnan(want)), f"{what}: NaN positions differ"
    inf = torch.isinf(want) | torch.isinf(got)
    assert torch.equal(got[inf], want[inf]), f"{what}: infinities differ"
    finite = torch.isfinite(want)
    scale = want[finite].abs().max().item() if finite.any() else 1.0
    torch.testing.assert_close(got[finite], want[finite], rtol=tol, atol=tol * max(scale, 1))


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("N", [37, 1531, 20011, 100003])
def test_row_ops_match_torch(N, dtype):
    rng = np.random.default_rng()
    M = int(rng.integers(7, 40))
    x = _special_rows(M, N, dtype, rng)
    got = plait.run(row_ops, x)
    t = x.float()
    want = {"softmax": torch.softmax(t, 1), "log_softmax": torch.log_softmax(t, 1),
            "logsumexp": torch.logsumexp(t, 1), "max": t.amax(1), "min": t.amin(1)}
    for name, w in want.items():
        _assert_ieee_equal(got[name], w, TOL[dtype], f"{name} {dtype} {M}x{N}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_streamed_attention_matches_sdpa_with_nan_and_inf(dtype):
    rng = np.random.default_rng()
    B, H, S, T, D = 2, 4, int(rng.integers(100, 300)), int(rng.integers(100, 300)), 64
    q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=dtype) for n in (S, T, T))
    q[0, 1, int(rng.integers(S)), int(rng.integers(D))] = float("nan")
    k[1, 2, int(rng.integers(T)), int(rng.integers(D))] = float("inf")
    got = plait.run(attention, q, k, v)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.125)
    _assert_ieee_equal(got, want, 2e-2, f"attention {dtype}")


@algorithm
def later_keys(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
               v: Tensor["B", "H", "T", "D"]):
    """Query s sees keys t >= s: a row's first key tiles are all masked (running max -inf)."""
    s = where(index("T") >= index("S"), sum_(q * k, over="D") * 0.125, float("-inf"))
    return sum_(softmax(s, over="T") * v, over="T")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_online_softmax_rescale_after_masked_tiles(dtype):
    rng = np.random.default_rng()
    B, H, S, D = 2, 4, int(rng.integers(200, 500)), 64
    T = S + int(rng.integers(0, 100))
    q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=dtype) for n in (S, T, T))
    keep = torch.arange(T, device="cuda")[None, :] >= torch.arange(S, device="cuda")[:, None]
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=keep,
                                          scale=0.125)
    got = plait.run(later_keys, q, k, v)
    assert torch.isfinite(got).all()
    _assert_ieee_equal(got, want, 2e-2, f"later keys {dtype}")
