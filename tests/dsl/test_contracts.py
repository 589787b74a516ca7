"""Declared dtypes are contracts, dtype typos are not axes, Python/numpy escapes are refused."""
import math

import ml_dtypes
import numpy as np
import pytest

import plait
from plait.dsl import PlaitError, Tensor, algorithm, cast, exp, sum


@algorithm
def gather_free(idx: Tensor["M", "int32"], x: Tensor["M", "N"]):
    return cast(idx, "fp32") * sum(x, over="N")


@algorithm
def fp8_scale(q: Tensor["N", "fp8_e4m3"]):
    return cast(q, "fp32") * 2.0


def test_a_declared_dtype_is_not_retraced_with_another():
    with pytest.raises(PlaitError, match=r"argument 'idx' is declared int32 but was given fp32"):
        gather_free.graph({"idx": "fp32"})
    with pytest.raises(PlaitError, match=r"'q' is declared fp8_e4m3 but was given bf16"):
        fp8_scale.graph({"q": "bf16"})
    # the declared dtype itself (in any spelling) and other arguments' dtypes are fine
    assert gather_free.graph({"idx": np.int32, "x": "bf16"}).input_dtypes()["idx"].short == "int32"
    assert fp8_scale.graph({"q": "float8_e4m3fn"}) is fp8_scale.graph()


def test_run_with_a_mismatching_array_names_argument_and_both_dtypes():
    rng = np.random.default_rng()
    x = rng.standard_normal((5, 3)).astype(np.float32)
    with pytest.raises(PlaitError, match=r"'idx' is declared int32 but was given fp32"):
        plait.run(gather_free, x[:, 0].copy(), x, device="cpu")
    q = rng.standard_normal(7).astype(ml_dtypes.bfloat16)
    with pytest.raises(PlaitError, match=r"'q' is declared fp8_e4m3 but was given bf16"):
        plait.run(fp8_scale, q, device="cpu")


@pytest.mark.parametrize("typo", ["bf17", "fp33", "int12", "float128", "fp8_e4m4", "bfloat",
                                  "in32", "fp61"])
def test_an_axis_named_like_a_dtype_is_refused(typo):
    with pytest.raises(PlaitError, match=r"looks like a dtype.*fp32.*bf16|looks like a dtype"
                                         r".*bf16.*fp32") as err:
        Tensor["M", "N", typo]
    assert "fp8_e4m3" in str(err.value) and typo in str(err.value)


def test_ordinary_axis_names_and_trailing_dtypes_still_work():
    for axes in [("M", "N", "K"), ("B", "H", "T", "D"), ("i", "j"), ("pool", "embed", "vocab"),
                 ("seq", "head", "batch", "hidden")]:
        assert Tensor[axes].axes == axes
    spec = Tensor["M", "N", "bf16"]
    assert spec.axes == ("M", "N") and spec.dtype.short == "bf16"
    with pytest.raises(PlaitError, match="must come last"):
        Tensor["M", "bf16", "N"]


def _misuse_error(body):
    @algorithm
    def f(x: Tensor["M", "N"]):
        return body(x)
    with pytest.raises(PlaitError) as err:
        f.graph()
    return str(err.value)


@pytest.mark.parametrize("body, expect", [
    (lambda x: x[0], r"cannot be indexed.*x.slice\(T=\(start, stop\)"),
    (lambda x: x[0, 1:3], r"cannot be indexed.*take"),
    (lambda x: math.exp(x), r"use plait.dsl's functions, e.g. plait.dsl.exp\(x\)"),
    (lambda x: float(x), "no Python float value"),
    (lambda x: np.exp(x), "np.exp cannot run on a traced tensor.*plait.dsl.exp"),
    (lambda x: np.asarray(x), "not a numpy array"),
    (lambda x: np.sum(x), "np.sum cannot run"),
    (lambda x: x if x else -x, "no truth value"),
    (lambda x: bool(x), "no truth value.*where"),
    (lambda x: int(x), "no Python int value"),
])
def test_python_and_numpy_escapes_give_one_located_error(body, expect):
    message = _misuse_error(body)
    import re
    assert re.search(expect, message, re.S), message
    first, _, quoted = message.partition("\n")
    assert first.startswith(__file__ + ":"), message          # file:line: of the user's code
    line = int(first[len(__file__) + 1:].split(":")[0])
    assert "lambda x:" in quoted and "lambda x:" in open(__file__).read().splitlines()[line - 1]
    assert "index by axis names" not in message


def test_numpy_arrays_still_combine_with_nothing_silently():
    """A numpy array on the left of a tensor is refused too, not broadcast by position."""
    for body in (lambda x: np.ones(3) * x, lambda x: np.float32(2.0) * x):
        message = _misuse_error(body)
        assert "numpy scalars do not mix with traced tensors" in message, message
    message = _misuse_error(lambda x: np.arctan2(x, x))
    assert "plait.dsl.arctan2" not in message  # advice names only functions plait has
    assert "plait.dsl.exp" in _misuse_error(lambda x: np.exp(x)) and exp
