"""Rows that start unaligned, read and written through windows shifted to the alignment
(lowering/ir/shifted_rows.py, PLAIT_SHIFTED_ROWS=1): the CPU executor against numpy
float64 at row lengths that are not multiples of the vector (nor of threads x vector),
with the kernels checked to be shifted and their PTX to hold vector accesses; every
program is also compiled for sm_80 and sm_90a and assembled (tests/conftest.py wraps
emulate). Kernels it must leave alone (a broadcast row, an aligned length) keep their
layout."""
import numpy as np
import pytest

import plait
from plait.dsl import Tensor, algorithm, argmax, exp, permute, softmax
from plait.dsl import max as vmax
from plait.dsl import sum as total
from plait.lowering.ir.thread_view import KernelView
from plait.lowering.pipeline import lower
from plait.runtime.api import compile as compile_program


@pytest.fixture(autouse=True)
def shifted(monkeypatch):
    monkeypatch.setenv("PLAIT_SHIFTED_ROWS", "1")


@algorithm
def greedy(x: Tensor["M", "N"]):
    return argmax(x, over="N")


@algorithm
def probs(x: Tensor["M", "N"]):
    return softmax(x, over="N")


@algorithm
def scaled_rows(x: Tensor["B", "M", "N"], y: Tensor["B", "M", "N"]):
    z = x * y + 1.0
    return {"z": z, "sum": total(z, over="N"), "max": vmax(exp(x), over="N")}


@algorithm
def biased(x: Tensor["M", "N"], bias: Tensor["N"]):
    return softmax(x + bias, over="N")


def _layouts(algo, sizes, dtypes=None):
    low = lower(algo.graph(dtypes or {}), None, sizes, True, "sm_90a")
    return [KernelView(t).layout for t in low.threads]


def _round(x, dtype):
    import ml_dtypes
    return x.astype(ml_dtypes.bfloat16) if dtype == "bf16" else x.astype(np.float32)


def _softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("M,N", [(5, 37), (3, 1001), (7, 3001), (2, 50257), (1, 9), (5, 3), (6, 5)])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_argmax_and_softmax_of_unaligned_rows(M, N, dtype):
    rng = np.random.default_rng()
    x = _round(rng.standard_normal((M, N)) * 3, dtype)
    x[0, -1] = x.max() + 1                    # the last element of a row wins
    if M > 1:
        x[1, 0] = x.max() + 1                 # the first element of a row wins
    xd = x.astype(np.float64)
    got = plait.run(greedy, x, device="cpu")
    np.testing.assert_array_equal(got, xd.argmax(-1))
    p = plait.run(probs, x, device="cpu").astype(np.float64)
    tol = 2e-2 if dtype == "bf16" else 1e-5
    np.testing.assert_allclose(p, _softmax(xd), rtol=tol, atol=tol * 1e-2)
    for algo in (greedy, probs):
        assert all(lay.lead_axes == ("M", "N") for lay in _layouts(algo, {"M": M, "N": N},
                                                                 {"x": dtype}))


def test_three_axes_two_inputs_and_a_row_output():
    rng = np.random.default_rng()
    B, M, N = 3, 5, 203
    x = rng.standard_normal((B, M, N)).astype(np.float32)
    y = rng.standard_normal((B, M, N)).astype(np.float32)
    got = plait.run(scaled_rows, x, y, device="cpu")
    z = x.astype(np.float64) * y + 1.0
    np.testing.assert_allclose(got["z"], z, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["sum"], z.sum(-1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got["max"], np.exp(x.astype(np.float64)).max(-1), rtol=1e-5)
    assert any(lay.lead_axes == ("B", "M", "N")
               for lay in _layouts(scaled_rows, {"B": B, "M": M, "N": N}))


def test_int_and_bool_rows():
    @algorithm
    def counts(x: Tensor["M", "N", "int32"]):
        return {"first_max": argmax(x, over="N"), "positives": total(x > 0, over="N")}

    rng = np.random.default_rng()
    x = rng.integers(-5, 6, (6, 77)).astype(np.int32)
    got = plait.run(counts, x, device="cpu")
    np.testing.assert_array_equal(got["first_max"], x.argmax(-1))
    np.testing.assert_array_equal(got["positives"], (x > 0).sum(-1))


@algorithm
def transposed(x: Tensor["N", "M"]):
    return {"argmax": argmax(x, over="N"), "probs": permute(softmax(x, over="N"), "M", "N")}


def test_permuted_storage_order():
    rng = np.random.default_rng()
    x = rng.standard_normal((301, 6)).astype(np.float32)
    got = plait.run(transposed, x, device="cpu")
    np.testing.assert_array_equal(got["argmax"], x.argmax(0))
    np.testing.assert_allclose(got["probs"], _softmax(x.T.astype(np.float64)), rtol=1e-5,
                               atol=1e-7)


def test_left_alone_where_rows_do_not_share_a_lead():
    rng = np.random.default_rng()
    x = rng.standard_normal((4, 37)).astype(np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    np.testing.assert_allclose(plait.run(biased, x, bias, device="cpu"),
                               _softmax(x.astype(np.float64) + bias), rtol=1e-5, atol=1e-7)
    assert all(not lay.lead_axes for lay in _layouts(biased, {"M": 4, "N": 37}))
    assert all(not lay.lead_axes for lay in _layouts(greedy, {"M": 4, "N": 64}))


def test_off_by_default(monkeypatch):
    monkeypatch.delenv("PLAIT_SHIFTED_ROWS")
    assert all(not lay.lead_axes for lay in _layouts(greedy, {"M": 4, "N": 37}))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_ptx_has_vector_loads_and_stores(target):
    program = compile_program(probs, {"x": "bf16"}, {"M": 8, "N": 50257}, target=target)
    ptx = "".join(k.ptx for k in program.kernels)
    assert "ld.global.nc.v4.b32" in ptx            # 8 bf16 in one load
    assert "st.global.v4.b32" in ptx


def test_compiled_handles_key_on_the_switch(monkeypatch):
    """plait.run's handles and the program memo are kept per switch state: flipping it
    in one process must not reuse a program lowered the other way."""
    from plait.runtime import api
    x = np.ones((3, 37), np.float32)
    on = api._run_key(greedy, (x,), {}, None, "cpu", None)
    monkeypatch.setenv("PLAIT_SHIFTED_ROWS", "0")
    assert api._run_key(greedy, (x,), {}, None, "cpu", None) != on
