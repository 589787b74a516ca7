"""The gradient of max/min over a narrow float when the reduction is split across blocks:
the partial and total extremes are kept as the registers hold them, so the backward's
comparison with the recomputed values finds the arg-extreme (it found none, and the
share divided by a tie count of 0 made every element NaN)."""
import ml_dtypes
import numpy as np
import pytest

import plait
from plait.autodiff import grad

from ad_cases import col_max, col_min


def _dx_by_hand(x, dout, pick):
    """dx of pick(1.3 x, over M) in float64: dout shared evenly among tied extremes."""
    hit = (x == pick(x, axis=0, keepdims=True)).astype(np.float64)
    return 1.3 * hit * dout / hit.sum(0, keepdims=True)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("M", [37, 129, 300, 1001])
@pytest.mark.parametrize("algo, pick", [(col_max, np.max), (col_min, np.min)])
def test_split_extreme_gradient_matches_float64(algo, pick, M, dtype):
    rng = np.random.default_rng()
    N = 33
    x = rng.standard_normal((M, N)).astype(dtype)
    dout = rng.standard_normal(N).astype(dtype)
    got = plait.run(grad(algo), x, dout, device="cpu")["dx"].astype(np.float64)
    want = _dx_by_hand(x.astype(np.float64), dout.astype(np.float64), pick)
    assert np.isfinite(got).all()
    # fp32 arithmetic, then one rounding to the 8 (bf16) or 11 (fp16) bit output
    tol = 2.0 ** -8 if dtype is ml_dtypes.bfloat16 else 2.0 ** -11
    np.testing.assert_allclose(got, want, rtol=tol, atol=0)
