"""The checks' bound for a product of two values that each carry rounding error: where the
exact values are 0 the first-order terms vanish and only ea*eb is left. Found by the
forward fuzzer (seed 4201403): t = x - bf16(x) is 0 in exact math and about 2^-9 |x| in
the kernel, so t * tanh(t) came out 6e-5 against a bound of 0. The bound still catches a
product that is wrong by more than its operands' errors allow."""
import numpy as np

from bounds import error_bounds, mismatch
from checks import executor_rounding
from plait.dsl import Tensor, algorithm, cast, evaluate, tanh
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
