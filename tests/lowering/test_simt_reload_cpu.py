"""Rows longer than the registers hold, read again after each reduction instead of held
(lowering/ir/simt_reload.py, PLAIT_RELOAD_ROWS=1): the CPU executor against numpy float64
at long rows that are not multiples of the vector or the block, with the kernels checked
to reload, and the ptxas spills that the reload removes. Every program the executor runs
is also compiled for sm_80 and sm_90a and assembled (tests/conftest.py wraps emulate)."""
import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, log_softmax, permute, softmax
from plait.lowering.graph.layout import make_layout
from plait.lowering.ir import simt_reload
from plait.lowering.ir.nodes import walk
from plait.lowering.pipeline import emulate, lower
from plait.lowering.target import get_target
from plait.runtime.api import compile as compile_program
from plait.runtime.ptxas import find_ptxas, resource_usage
from plait.schedule import Schedule
from reload_cases import masked_probs, norm


@pytest.fixture(autouse=True)
def reload_on(monkeypatch):
    monkeypatch.setenv(simt_reload.SWITCH, "1")


@algorithm
def probs(x: Tensor["M", "N"]):
    return softmax(x, over="N")


@algorithm
def log_probs(x: Tensor["M", "N"]):
    return log_softmax(x, over="N")


@algorithm
def probs_transposed(x: Tensor["M", "N"]):      # the result stored [N, M]
    return permute(softmax(x, over="N"), "N", "M")


def _loads(graph, sizes, buffer="x"):
    low = lower(graph, None, sizes, True)
    return [sum(1 for op in walk(t.body) if op.name == "load" and op.attr("buffer") == buffer)
            for t in low.threads]


def _f64(a):
    return np.asarray(a, np.float64)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("n", [50257, 53011])
def test_long_rows_are_read_after_each_reduction(n, monkeypatch):
    sizes = {"M": 3, "N": n}
    assert _loads(probs.graph(), sizes) == [3]          # max, sum, the output
    assert _loads(norm.graph(), sizes) == [3]           # mean, variance, the output
    monkeypatch.setenv(simt_reload.SWITCH, "0")
    assert _loads(probs.graph(), sizes) == [1]


def test_a_load_is_issued_only_where_it_is_read():
    """softmax's backward reads dout in its third and fourth epochs only (its sum with p,
    then dx): the load its first epoch held is gone once both read copies."""
    from plait.autodiff import grad
    graph = grad(probs).graph({"x": "bf16", "dout": "bf16"})
    assert _loads(graph, {"M": 3, "N": 50257}, "dout") == [2]
    assert _loads(graph, {"M": 3, "N": 50257}, "x") == [4]     # p in every epoch


def test_rows_that_fit_are_held():
    assert _loads(probs.graph(), {"M": 3, "N": 1000}) == [1]


def _layout(n, block, occupancy=None):
    d = {"algorithm": "probs", "grid": {"M": 1}, "block": {"N": block}}
    if occupancy:
        d["occupancy"] = occupancy
    return make_layout("probs", ("M", "N"), Schedule.from_dict(d).default,
                       {"M": 8, "N": n}, {})


@pytest.mark.parametrize("n, block, occupancy, spills", [
    (50257, {"threads": 1024, "vector": 8}, None, True),    # 56 a thread, 64 registers
    (8192, {"threads": 256, "vector": 8}, 3, False),        # the shipped sm_90 softmax
    (8192, {"threads": 256, "vector": 8}, 8, True),         # 32 registers a thread
    (2048, {"threads": 256, "vector": 8}, None, False),
    (50257, {"threads": 256, "vector": 8}, None, True),     # 200 of 255
    (40000, {"threads": 256, "vector": 8}, None, False),    # 160 of 255
    (44000, {"threads": 1024, "vector": 8}, None, False),   # 48 of 64
])
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_would_spill(n, block, occupancy, spills, target):
    low = lower(probs.graph(), None, {"M": 8, "N": n}, True)
    ops = list(low.tiles[0].ops)
    assert simt_reload.would_spill(ops, _layout(n, block, occupancy), get_target(target)) is spills


@pytest.mark.parametrize("n", [50257, 49999])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_softmax_and_log_softmax_reloaded_run_right(n, dtype):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n)) * 4).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    for algo, ref in ((probs, _softmax(_f64(x))),
                      (log_probs, np.log(_softmax(_f64(x))))):
        out = emulate(algo.graph({"x": np.dtype(dtype)}), None, {"M": 3, "N": n},
                      {"x": x}, {})["out"]
        np.testing.assert_allclose(_f64(out), ref, rtol=tol, atol=tol * 1e-2, err_msg=algo.name)


def test_layernorm_reloaded_runs_right():
    rng = np.random.default_rng(1)
    n = 53011
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, n), (n,), (n,)))
    out = emulate(norm.graph(), None, {"M": 4, "N": n}, {"x": x, "w": w, "b": b}, {})["out"]
    xc = _f64(x) - _f64(x).mean(1, keepdims=True)
    ref = xc / np.sqrt((xc * xc).mean(1, keepdims=True) + 1e-5) * _f64(w) + _f64(b)
    np.testing.assert_allclose(_f64(out), ref, rtol=1e-4, atol=1e-4)


def test_bool_and_int_inputs_reloaded_run_right():
    rng = np.random.default_rng(2)
    n = 50001
    x = rng.standard_normal((3, n)).astype(np.float32)
    keep = rng.random((3, n)) < 0.7
    bias = rng.integers(-3, 4, n).astype(np.int32)
    out = emulate(masked_probs.graph(), None, {"M": 3, "N": n},
                  {"x": x, "keep": keep, "bias": bias}, {})["out"]
    ref = _softmax(np.where(keep, _f64(x) + bias, -1e4))
    np.testing.assert_allclose(_f64(out), ref, rtol=1e-5, atol=1e-9)
    assert _loads(masked_probs.graph(), {"M": 3, "N": n}, "keep") == [3]


def test_permuted_output_reloaded_runs_right():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 52001)).astype(np.float32)
    out = emulate(probs_transposed.graph(), None, {"M": 3, "N": 52001}, {"x": x}, {})["out"]
    assert _loads(probs_transposed.graph(), {"M": 3, "N": 52001}) == [3]
    np.testing.assert_allclose(_f64(out), _softmax(_f64(x)).T, rtol=1e-5, atol=1e-10)


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_reloading_removes_the_spills(arch, monkeypatch):
    def spills(on: str):
        monkeypatch.setenv(simt_reload.SWITCH, on)
        program = compile_program(probs, {"x": "bf16"}, {"M": 8192, "N": 50257}, target=arch)
        usage = resource_usage(program.kernels[0].ptx, arch)
        return sum(u.spill_stores + u.spill_loads for u in usage.values())
    assert spills("0") > 0           # why the pass exists: the held row does not fit
    assert spills("1") == 0
