"""The algorithm language: tracing, broadcasting by name, promotion, reference, errors."""
import inspect

import numpy as np
import pytest

from plait.dsl import (DType, PlaitError, Tensor, algorithm, cast, evaluate, exp, mean, max,
                       promote, rsqrt, softmax, sum, where)


@algorithm
def normalize(x: Tensor["M", "N"], w: Tensor["N"], eps: float = 1e-5):
    mu = mean(x, over="N")
    xc = x - mu
    return xc * rsqrt(mean(xc * xc, over="N") + eps) * w


def test_reference_matches_numpy_on_random_inputs():
    rng = np.random.default_rng()
    x, w = rng.standard_normal((7, 13)), rng.standard_normal(13)
    out = evaluate(normalize.graph(), {"x": x, "w": w})["out"]
    xc = x - x.mean(1, keepdims=True)
    want = xc / np.sqrt((xc * xc).mean(1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(out, want, rtol=1e-12)


def test_broadcasting_is_by_name_not_position():
    @algorithm
    def outer(a: Tensor["M"], b: Tensor["N"]):
        return a * b
    rng = np.random.default_rng()
    a, b = rng.standard_normal(3), rng.standard_normal(5)
    graph = outer.graph()
    assert graph.outputs["out"].axes == ("M", "N")
    np.testing.assert_allclose(evaluate(graph, {"a": a, "b": b})["out"], np.outer(a, b))


def test_canonical_axis_order_follows_the_signature():
    @algorithm
    def f(b: Tensor["N"], a: Tensor["M", "N"]):
        return b + a
    assert f.graph().outputs["out"].axes == ("N", "M")


def test_promotion_and_weak_scalars():
    @algorithm
    def f(x: Tensor["M", "bf16"], y: Tensor["M", "fp16"], s: float = 2.0):
        return {"mixed": x + y, "weak": x * 3.0 + s, "cast": cast(x, "fp8_e4m3")}
    out = f.graph().outputs
    assert out["mixed"].dtype == DType.FP32          # bf16 with fp16 goes to fp32
    assert out["weak"].dtype == DType.BF16           # scalars do not promote
    assert out["cast"].dtype == DType.FP8_E4M3
    assert promote(DType.FP8_E4M3, DType.FP8_E5M2) == DType.FP16
    assert promote(DType.INT32, DType.BF16) == DType.BF16


def test_fp8_cast_rounds_and_saturates_in_the_reference():
    @algorithm
    def f(x: Tensor["M"]):
        return cast(x, "fp8_e4m3")
    x = np.array([1000.0, -1000.0, 0.3, 1.0625])
    out = evaluate(f.graph(), {"x": x}, rounding=lambda n: n.dtype)["out"]
    np.testing.assert_array_equal(out, [448.0, -448.0, 0.3125, 1.0])   # saturating, RNE


def test_softmax_composite_and_where():
    @algorithm
    def f(x: Tensor["M", "N"]):
        return where(x > 0, softmax(x, over="N"), exp(x) - max(x, over="M"))
    rng = np.random.default_rng()
    x = rng.standard_normal((4, 6))
    e = np.exp(x - x.max(1, keepdims=True))
    want = np.where(x > 0, e / e.sum(1, keepdims=True), np.exp(x) - x.max(0))
    np.testing.assert_allclose(evaluate(f.graph(), {"x": x})["out"], want, rtol=1e-12)


def _line_of(snippet: str, fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if snippet in line)


def test_unknown_axis_points_at_the_user_line():
    @algorithm
    def bad(x: Tensor["M", "N"]):
        return sum(x, over="K")
    with pytest.raises(PlaitError) as err:
        bad.graph()
    line = _line_of('over="K"', bad.fn)
    assert f"test_language.py:{line}:" in str(err.value)
    assert "over 'K'" in str(err.value) and 'over="K"' in str(err.value)


def test_python_control_flow_on_a_tensor_is_refused():
    @algorithm
    def bad(x: Tensor["M"]):
        if x > 0:
            return x
        return -x
    with pytest.raises(PlaitError, match="no truth value"):
        bad.graph()


def test_mismatched_extents_name_both_arguments():
    rng = np.random.default_rng()
    with pytest.raises(PlaitError, match="axis N is 13 in 'x' but 12 in 'w'"):
        evaluate(normalize.graph(), {"x": rng.standard_normal((7, 13)),
                                     "w": rng.standard_normal(12)})


def test_missing_annotation_is_an_error():
    with pytest.raises(PlaitError, match="needs an annotation"):
        @algorithm
        def bad(x):
            return x


def test_unsupported_argument_type():
    @algorithm
    def bad(x: Tensor["M"]):
        return x + "one"
    with pytest.raises(PlaitError, match="expected a plait tensor or a Python number"):
        bad.graph()


@pytest.mark.parametrize("returns", ["dict", "single"])
def test_an_output_named_like_a_parameter_is_refused(returns):
    """Buffers are named by their tensors: an output called `x` beside an input `x` was
    one buffer for both, and the CPU executor gave NaN (its poisoned output)."""
    if returns == "dict":
        @algorithm
        def triple(x: Tensor["M", "N"]):
            return {"x": x * 3.0}
    else:
        @algorithm
        def triple(out: Tensor["M", "N"]):
            return out * 3.0
    with pytest.raises(PlaitError, match="has the name of a parameter") as info:
        triple.graph({})
    assert "test_language.py" in str(info.value)
