"""The checks for a product of two values that each carry rounding error. Where the
exact values are 0 the first-order terms vanish and only ea*eb is left. Found by the
forward fuzzer (seed 4201403): t = x - bf16(x) is 0 in exact math and about 2^-9 |x| in
the kernel, so t * tanh(t) came out 6e-5 against a bound of 0. The bound still catches a
product that is wrong by more than its operands' errors allow. And an infinity times a
value whose rounding may reach 0 (fp8 flushes it) has no answer to compare: the exact math
gives the infinity, the kernel NaN (seed 4300123); such a case is skipped, not failed."""
import numpy as np

from bounds import error_bounds, infinity_times_rounded_zero, mismatch
from checks import executor_rounding
from plait.dsl import Tensor, algorithm, cast, evaluate, tanh, where
from plait.lowering.pipeline import emulate


@algorithm
def square_of_rounding(x: Tensor["M", "N", "fp16"]):
    t = cast(x, "fp32") - cast(cast(x, "bf16"), "fp32")
    return t * tanh(t)


def _run(x):
    graph = square_of_rounding.graph()
    with np.errstate(all="ignore"):
        got = emulate(graph, None, {"M": x.shape[0], "N": x.shape[1]}, {"x": x}, {})["out"]
        return got, evaluate(graph, {"x": x})["out"], \
            error_bounds(graph, {"x": x}, executor_rounding)["out"]


def test_a_product_of_two_rounding_errors_is_within_the_bound():
    x = np.random.default_rng().standard_normal((7, 5)).astype(np.float16) * 3
    got, ref, bound = _run(x)
    assert np.abs(ref).max() == 0 and np.abs(got).max() > 0   # exact 0, rounded not
    assert mismatch(got, ref, bound) is None


def test_the_bound_still_catches_a_wrong_product():
    x = np.random.default_rng().standard_normal((7, 5)).astype(np.float16) * 3
    got, ref, bound = _run(x)
    assert mismatch(got + 10 * bound + 1e-3, ref, bound) is not None


@algorithm
def masked_times_fp8(x: Tensor["M", "N"], y: Tensor["M", "N"]):
    return where(y > 0.0, x, float("-inf")) * cast(cast(x, "fp8_e4m3"), "fp32")


def _masked_case(scale):
    rng = np.random.default_rng()
    x = (rng.uniform(0.5, 1.0, (6, 5)) * scale).astype(np.float32)
    y = rng.standard_normal((6, 5)).astype(np.float32)
    y[0, 0] = -1.0                                   # one masked element at least
    return {"x": x, "y": y}


def test_an_infinity_times_a_value_fp8_flushes_to_zero_is_no_test_case():
    """Forward seed 4300123: the exact math gives -inf, the kernel -inf * 0 = NaN."""
    inputs = _masked_case(1e-4)                      # under fp8 e4m3's smallest subnormal
    graph = masked_times_fp8.graph()
    got = emulate(graph, None, {"M": 6, "N": 5}, inputs, {})["out"]
    ref = evaluate(graph, inputs)["out"]
    masked = inputs["y"] <= 0
    assert np.isnan(got[masked]).all() and np.isneginf(ref[masked]).all()
    assert infinity_times_rounded_zero(graph, inputs, executor_rounding)


def test_an_infinity_times_a_value_that_stays_nonzero_is_compared():
    inputs = _masked_case(1.0)
    assert not infinity_times_rounded_zero(masked_times_fp8.graph(), inputs,
                                           executor_rounding)
