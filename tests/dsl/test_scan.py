"""Scans in the language: result types (bool and int32 count as int32, floats keep their
dtype, cummax of bool stays bool), errors with the user's line, and the float64 reference
against numpy's accumulate written here (NaN propagation included) and, for the generic
`scan`, against a plain Python loop over the positions."""
import numpy as np
import pytest

from plait.dsl import (DType, PlaitError, Tensor, algorithm, cummax, cummin, cumprod, cumsum,
                       evaluate, exp, scan)


@pytest.fixture
def rng():
    return np.random.default_rng()        # fresh inputs every run


def _typed(fn, dtype):
    @algorithm
    def typed(x: Tensor["M", "N", dtype]):
        return fn(x, over="N")
    return typed.graph().outputs["out"].dtype


@pytest.mark.parametrize("fn,dtype,want", [
    (cumsum, "bool", DType.INT32), (cumprod, "bool", DType.INT32),
    (cumsum, "int32", DType.INT32), (cumprod, "int64", DType.INT64),
    (cummax, "bool", DType.BOOL), (cummin, "int32", DType.INT32),
    (cumsum, "bf16", DType.BF16), (cumprod, "fp16", DType.FP16), (cummax, "fp32", DType.FP32),
])
def test_result_dtypes(fn, dtype, want):
    assert _typed(fn, dtype) == want


def test_a_scan_keeps_its_operand_axes():
    @algorithm
    def three(x: Tensor["B", "L", "D"]):
        return cumsum(x, over="L")
    assert three.graph().outputs["out"].axes == ("B", "L", "D")


def test_errors_name_the_line():
    with pytest.raises(PlaitError, match=r"test_scan.py:\d+.*one axis name"):
        @algorithm
        def two(x: Tensor["M", "N"]):
            return cumsum(x, over=("M", "N"))
        two.graph()
    with pytest.raises(PlaitError, match=r"test_scan.py:\d+.*cummax over 'K'"):
        @algorithm
        def unknown(x: Tensor["M", "N"]):
            return cummax(x, over="K")
        unknown.graph()
    with pytest.raises(PlaitError, match=r"reverse=\.\.\.\) takes True or False"):
        @algorithm
        def flag(x: Tensor["M", "N"]):
            return cumprod(x, over="N", reverse="yes")
        flag.graph()
    with pytest.raises(PlaitError, match=r"x must be a plait tensor"):
        cumsum([1.0, 2.0], over="N")


def _accumulate(ufunc, x, axis, reverse=False):
    x = np.flip(x, axis) if reverse else x
    out = ufunc.accumulate(x, axis=axis)
    return np.flip(out, axis) if reverse else out


@algorithm
def four(x: Tensor["M", "N"]):
    return {"sum": cumsum(x, over="N"), "prod": cumprod(x, over="M"),
            "max": cummax(x, over="N", reverse=True), "min": cummin(x, over="M")}


@pytest.mark.parametrize("M,N", [(1, 1), (7, 37), (3, 300)])
def test_reference_is_numpy_accumulate(rng, M, N):
    x = rng.standard_normal((M, N))
    x[rng.random((M, N)) < 0.05] = np.nan
    got = evaluate(four.graph(), {"x": x})
    np.testing.assert_array_equal(got["sum"], np.cumsum(x, 1))
    np.testing.assert_array_equal(got["prod"], np.cumprod(x, 0))
    np.testing.assert_array_equal(got["max"], _accumulate(np.maximum, x, 1, reverse=True))
    np.testing.assert_array_equal(got["min"], _accumulate(np.minimum, x, 0))


def test_nan_stays_once_met():
    x = np.array([[1.0, np.nan, 5.0, -2.0]])
    got = evaluate(four.graph(), {"x": x})
    assert np.isnan(got["sum"][0, 1:]).all() and np.isnan(got["max"][0, :2]).all()
    assert got["max"][0, 2] == 5.0


def test_integer_scans_wrap_at_32_bits():
    @algorithm
    def count(x: Tensor["N", "int32"]):
        return cumsum(x, over="N")
    x = np.array([2**31 - 1, 1, 5], np.int32)
    got = evaluate(count.graph(), {"x": x})["out"]
    assert got.dtype == np.int32 and list(got) == [2**31 - 1, -2**31, -2**31 + 5]


def linear(left, right):
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


@algorithm
def recurrence(a: Tensor["B", "L"], b: Tensor["B", "L"]):
    pa, h = scan(linear, (1.0, 0.0), (a, b), over="L")
    _, back = scan(linear, (1.0, 0.0), (a, b), over="L", reverse=True)
    return {"h": h, "pa": pa, "back": back}


def test_generic_scan_is_the_python_loop(rng):
    a, b = rng.uniform(0.5, 1.5, (4, 37)), rng.standard_normal((4, 37))
    got = evaluate(recurrence.graph(), {"a": a, "b": b})
    h, back = np.zeros(4), np.zeros(4)
    for t in range(37):
        h = a[:, t] * h + b[:, t]
        np.testing.assert_allclose(got["h"][:, t], h, rtol=1e-12)
    for t in reversed(range(37)):         # x_t o (x_{t+1} o ...): b_t a_rest + b_rest
        back = back + b[:, t] * np.prod(a[:, t + 1:], axis=1)
        np.testing.assert_allclose(got["back"][:, t], back, rtol=1e-12)
    np.testing.assert_allclose(got["pa"], np.cumprod(a, 1), rtol=1e-12)


def test_generic_scan_one_part_and_broadcast_operands(rng):
    @algorithm
    def running(x: Tensor["M", "N"], w: Tensor["N"]):
        return scan(lambda s, t: s + t, 0.0, exp(x) * w, over="N")
    x, w = rng.standard_normal((3, 11)), rng.standard_normal(11)
    got = evaluate(running.graph(), {"x": x, "w": w})["out"]
    np.testing.assert_allclose(got, np.cumsum(np.exp(x) * w, 1), rtol=1e-12)


def test_generic_scan_errors():
    with pytest.raises(PlaitError, match=r"test_scan.py:\d+.*must return the state, 2"):
        @algorithm
        def short(a: Tensor["L"], b: Tensor["L"]):
            return scan(lambda s, t: s[0], (1.0, 0.0), (a, b), over="L")
        short.graph()
    with pytest.raises(PlaitError, match=r"returns part 0 as fp32.*int32"):
        @algorithm
        def retyped(n: Tensor["L", "int32"]):
            return scan(lambda s, t: s * 0.5, 0, n, over="L")
        retyped.graph()
    with pytest.raises(PlaitError, match=r"only, not 'w'"):
        @algorithm
        def closure(x: Tensor["L"], w: Tensor["L"]):
            return scan(lambda s, t: s + t * w, 0.0, x, over="L")
        closure.graph()
    with pytest.raises(PlaitError, match=r"one number per part"):
        @algorithm
        def init(x: Tensor["L"]):
            return scan(lambda s, t: s + t, (0.0, 1.0), x, over="L")
        init.graph()


def test_graph_text_prints_the_combine():
    text = recurrence.graph().text()
    assert "combine=(mul(s0, s2):fp32, add(mul(s2, s1):fp32, s3):fp32)" in text
    assert text == recurrence.graph().text()
