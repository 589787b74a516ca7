"""On the GPU: the wrong answers and crashes of issue 31, fixed and checked on the CPU
executor by their CPU tests, run through the real kernels against numpy float64 (and torch
for logsumexp's infinities): counts of bools, reductions of different ranks sharing one
round, split bf16 max gradients, logsumexp over infinite rows, an output of constants.
"""
import ml_dtypes
import numpy as np
import pytest

import plait
from plait.autodiff import grad
from plait.dsl import Tensor, algorithm, cast, logsumexp, max, mean, sum
from plait.runtime.tolerance import max_rel_err

pytestmark = pytest.mark.gpu


@algorithm
def fraction_and_count(x: Tensor["M", "N"]):
    return mean(x > 0.0, over="N"), sum(x > 0.3, over="N")


@algorithm
def ranks_sharing_a_round(x: Tensor["B", "M", "N"]):
    v2 = max(x, over=("N", "M"))
    return v2 * sum(v2, over="B"), max(x, over="M")


@algorithm
def col_max(x: Tensor["M", "N"]):
    return max(x * 1.3, over="M")


@algorithm
def lse(x: Tensor["M", "N"]):
    return logsumexp(x, over="N")


@algorithm
def with_constant(x: Tensor["M"]):
    return x * 2.0, cast(cast(1, "int32"), "fp32") * 0.125


@pytest.mark.parametrize("M, N", [(5, 37), (257, 3), (3, 100003)])
def test_counts_of_bools(M, N):
    x = np.random.default_rng(M).standard_normal((M, N)).astype(np.float32)
    frac, count = plait.run(fraction_and_count, x, device="gpu")
    assert count.dtype == np.int32
    np.testing.assert_array_equal(count, (x > 0.3).sum(axis=1))
    assert max_rel_err(frac, (x > 0).mean(axis=1)) <= 1e-6


@pytest.mark.parametrize("B, M, N", [(3, 3, 3), (2, 5, 7), (4, 33, 65)])
def test_reductions_of_different_ranks_in_one_round(B, M, N):
    x = np.random.default_rng(B * M).standard_normal((B, M, N)).astype(np.float32)
    a, b = plait.run(ranks_sharing_a_round, x, device="gpu")
    v2 = x.astype(np.float64).max(axis=(1, 2))
    assert max_rel_err(a, v2 * v2.sum()) <= 1e-5
    assert max_rel_err(b, x.max(axis=1)) == 0.0


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("M", [37, 300, 1001])
def test_split_max_gradient_in_low_precision(dtype, M):
    rng = np.random.default_rng(M)
    x = rng.standard_normal((M, 33)).astype(dtype)
    dout = rng.standard_normal(33).astype(dtype)
    dx = plait.run(grad(col_max), x, dout=dout, device="gpu")
    dx = dx["dx"] if isinstance(dx, dict) else dx
    y = x.astype(np.float64) * 1.3
    pick = y == y.max(axis=0)
    want = pick / pick.sum(axis=0) * dout.astype(np.float64) * 1.3
    assert np.isfinite(np.asarray(dx, np.float64)).all()
    assert max_rel_err(dx, want) <= 2e-2


def test_logsumexp_of_infinite_rows_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 1531)).astype(np.float32)
    x[1, 7] = np.inf
    x[2, :] = -np.inf
    x[3, ::2] = -np.inf
    got = plait.run(lse, x, device="gpu")
    want = torch.logsumexp(torch.from_numpy(x).double(), dim=1).numpy()
    assert max_rel_err(got, want) <= 1e-5
    assert got[1] == np.inf and got[2] == -np.inf


def test_an_output_of_constants():
    x = np.random.default_rng(1).standard_normal(37).astype(np.float32)
    doubled, constant = plait.run(with_constant, x, device="gpu")
    np.testing.assert_array_equal(doubled, x * 2)
    assert float(constant) == 0.125


@algorithm
def shifted_causal(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                   v: Tensor["B", "H", "T", "D"], shift: int = 0):
    """A causal mask on positions moved by `shift`: near 2**31 the int32 sums wrap (the
    DSL's definition), so the mask is no longer causal past the wrap; tile skipping must
    follow the wrapped values (stream/masks.interval_arith), not skip live tiles."""
    from plait.dsl import index, softmax, where
    s = sum(q * k, over="D") * 0.125
    s = where(index("T") + shift <= index("S") + shift, s, float("-inf"))
    return sum(softmax(s, over="T") * v, over="T")


@pytest.mark.parametrize("shift", [0, 2 ** 31 - 300, 2 ** 31 - 1000])
def test_masked_tiles_follow_wrapping_positions(shift):
    import torch
    from plait.dsl import evaluate
    rng = np.random.default_rng()
    shape = (1, 2, 700, 64)
    q, k, v = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for _ in range(3))
    got = plait.run(shifted_causal, *(torch.from_numpy(a.astype(np.float32)).to(
        torch.bfloat16).cuda() for a in (q, k, v)), shift=shift)
    want = evaluate(shifted_causal.graph({"q": "bf16", "k": "bf16", "v": "bf16"}),
                    {"q": q, "k": k, "v": v, "shift": shift})["out"]
    got = got.float().cpu().numpy().astype(np.float64)
    want = np.asarray(want, np.float64)
    live = ~np.isnan(want)          # rows whose keys are all masked: NaN in the reference
    assert np.array_equal(np.isnan(got[live]), np.zeros(live.sum(), bool))
    assert max_rel_err(got[live], want[live]) < 2e-2
