"""dq added up in the dk/dv kernel's loop (lowering/graph/sums_merge.py), chosen by the dq
kernel's `reduction`: the kernels it leaves and their order, the zeroed fp32 buffer, a
clear error where the merge cannot be made, and the CPU executor against float64 next
to dq's own loop (the numbers: tests/lowering/test_streaming_backward.py, both ways)."""
import numpy as np
import pytest
from test_streaming import CASES, _inputs

from plait.autodiff import grad
from plait.dsl import DType, PlaitError
from plait.lowering.pipeline import emulate, lower
from plait.schedule import Schedule

SIZES = {"B": 1, "H": 2, "S": 70, "T": 90, "D": 16, "E": 24}


def _graph(algo):
    return grad(algo, wrt=["q", "k", "v"], save=("out",)).graph(
        {n: DType.BF16 for n in ("q", "k", "v", "dout", "out")})


def _schedule(graph, reduction):
    return Schedule.from_dict({"algorithm": graph.name,
                               "kernels": {f"{graph.name}.dq": {"reduction": reduction}}})


def test_atomic_merges_dq_into_the_dk_kernel_then_casts():
    graph = _graph(CASES[0][0])
    kg = lower(graph, _schedule(graph, "atomic"), SIZES, True, "sm_90a").kernel_graph
    names = [k.name for k in kg.kernels]
    acc = f"{graph.name}.dq.acc"
    assert names.index(f"{graph.name}.dk") < names.index(f"{graph.name}.dq")
    dk = next(k for k in kg.kernels if k.name.endswith(".dk"))
    assert [n for n, _ in dk.outputs] == ["dk", "dv", acc]
    buf = next(b for b in kg.buffers if b.name == acc)
    assert buf.zero and buf.dtype == DType.FP32 and buf.axes == ("B", "H", "S", "D")
    dq = next(k for k in kg.kernels if k.name.endswith(".dq"))
    assert dq.stream is None and [n for n, _ in dq.outputs] == ["dq"]


def test_two_stage_and_the_default_keep_dq_s_own_loop():
    graph = _graph(CASES[0][0])
    for schedule in (None, _schedule(graph, "two_stage")):
        text = lower(graph, schedule, SIZES, True, "sm_90a").kernel_graph.text()
        assert "sums over T giving dq" in text and ".dq.acc" not in text


def test_atomic_where_no_kernel_walks_dq_s_rows_is_an_error():
    """Grouped queries: dk and dv also sum over a group's heads, folded into their loop
    (dq's rows are not theirs: dq has the heads, they do not)."""
    algo, sizes = next(c for c in CASES if c[0].name == "grouped")
    graph = grad(algo, wrt=["q", "k", "v"], save=("out",)).graph({n: DType.BF16 for n in "qkv"})
    with pytest.raises(PlaitError, match=r"reduction 'atomic' adds its sums up in another "
                                         r"streamed kernel's loop, but"):
        lower(graph, _schedule(graph, "atomic"), sizes, True, "sm_90a")


def test_the_merged_dq_matches_dq_s_own_loop():
    """Both from the CPU executor: the atomic adds' sum, per 64 key rows, is the loop's
    sum in another order (fp32), so the two agree to a few bf16 steps."""
    graph = _graph(CASES[0][0])
    inputs = _inputs(SIZES, DType.BF16)
    rng = np.random.default_rng(3)
    for name in ("dout", "out"):
        inputs[name] = rng.standard_normal(inputs["q"].shape[:-1] + (SIZES["E"],)).astype(
            inputs["q"].dtype)
    got = {r: emulate(graph, _schedule(graph, r), SIZES, inputs, {"scale": 0.125}, "sm_90a")
           for r in ("atomic", "two_stage")}
    a, b = (np.asarray(got[r]["dq"], np.float64) for r in ("atomic", "two_stage"))
    assert np.abs(a).max() > 0.01 and not np.isnan(a).any()
    assert np.abs(a - b).max() <= 4 * 2.0 ** -8 * np.abs(b).max()
