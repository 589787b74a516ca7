"""An fp8 cast saturates to the largest finite value, infinities included (README, dtypes
section; the GPU's cvt.rn.satfinite): the float64 reference says so too, without rounding,
so it agrees with the CPU executor on an infinite or out-of-range value (the gradient
fuzzer's seed 3004247: a cotangent of -inf through an fp8 cast, -448 on the executor,
-inf in the reference before)."""
import ml_dtypes
import numpy as np
import pytest

import plait
from plait.dsl import Tensor, algorithm, cast, evaluate

SPECIAL = np.array([np.inf, -np.inf, 1e4, -1e6, np.nan, 1.0, -0.3], np.float32)


@pytest.mark.parametrize("fp8", ["fp8_e4m3", "fp8_e5m2"])
def test_the_reference_and_the_executor_saturate_alike(fp8):
    @algorithm
    def through(x: Tensor["N"]):
        return cast(cast(x, fp8), "fp32") * 2.0
    limit = float(ml_dtypes.finfo(getattr(ml_dtypes, {"fp8_e4m3": "float8_e4m3fn",
                                                      "fp8_e5m2": "float8_e5m2"}[fp8])).max)
    rng = np.random.default_rng()
    x = np.concatenate([SPECIAL, rng.standard_normal(37).astype(np.float32) * 3 * limit])
    exact = np.asarray(evaluate(through.graph(), {"x": x})["out"], np.float64)
    want = 2.0 * np.where(np.isnan(x), x, np.clip(x.astype(np.float64), -limit, limit))
    finite = ~np.isnan(want)
    assert np.array_equal(np.isnan(exact), ~finite)
    # exact math: values inside the range keep their value, outside it the limit
    assert np.array_equal(exact[finite], want[finite])
    got = np.asarray(plait.run(through, x, device="cpu"), np.float64)
    assert np.array_equal(np.isnan(got), ~finite)
    assert np.all(np.isfinite(got[finite]))
    # the executor rounds to fp8 as well: within half an fp8 step (3 or 2 mantissa bits)
    step = 2.0 ** -3 if fp8 == "fp8_e4m3" else 2.0 ** -2
    assert np.all(np.abs(got[finite] - exact[finite]) <= step * np.abs(exact[finite]) + 1e-6)
