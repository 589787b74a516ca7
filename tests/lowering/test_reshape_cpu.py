"""split_axis, merge_axes, slice, pad and concat through the generic lowering on the CPU
executor, against numpy's reshape, slicing, np.pad and np.concatenate written here (not
the reference evaluator), on fresh random inputs at odd sizes (C = 300 into 5 x 60,
slices at unaligned starts, pads on both sides, concat of differently sized operands),
permuted storage orders, fp32, bf16, int32 and bool tensors, several schedules; a
reshape of a computed value (staged into a temporary) and of a reshape (one load); the
gradients' kernels. tests/conftest.py compiles every program run here for sm_80 and
sm_90a and assembles it with ptxas."""
import numpy as np
import pytest

from plait.autodiff import grad
from plait.dsl import (DType, PlaitError, Tensor, algorithm, concat, exp, merge_axes, pad,
                       split_axis, sum)
from plait.lowering.pipeline import emulate, lower
from plait.schedule.model import Schedule


@pytest.fixture
def rng():
    return np.random.default_rng()       # fresh inputs every run


KINDS = ["fp32", "bf16", "int32", "bool"]


def _values(rng, shape, kind):
    if kind == "bool":
        return rng.random(shape) < 0.5
    if kind == "int32":
        return rng.integers(-10 ** 6, 10 ** 6, shape).astype(np.int32)
    dtype = DType.BF16.numpy if kind == "bf16" else np.float32
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def _run(algo, inputs, sizes, schedule=None, dtypes=None):
    sched = None if schedule is None else Schedule.from_dict({"algorithm": algo.name,
                                                               **schedule})
    return emulate(algo.graph(dtypes), sched, sizes, inputs, {})


def _same(got, want):
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64),
                                  np.asarray(want).astype(np.float64))


@pytest.mark.parametrize("kind", KINDS)
def test_split_into_heads(kind, rng):
    @algorithm
    def heads(x: Tensor["B", "C", kind]):
        return split_axis(x, "C", ("H", "D"), D=60)
    x = _values(rng, (7, 300), kind)
    _same(_run(heads, {"x": x}, {"B": 7, "C": 300})["out"], x.reshape(7, 5, 60))


SCHEDULES = {
    "default": None,
    "vector4": {"grid": {"N": 8}, "block": {"N": {"threads": 8}, "E": {"threads": 4,
                                                                      "vector": 4}}},
    "gridded": {"grid": {"N": 16, "E": 2}, "block": {"N": {"threads": 16},
                                                     "E": {"threads": 2, "vector": 1}}},
    "walk": {"grid": {"N": 8, "E": 64}, "block": {"E": {"threads": 32, "vector": 2}},
             "prefetch": 2},
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("kind", KINDS)
def test_merge_of_a_permuted_storage_order(kind, schedule, rng):
    @algorithm
    def flat(x: Tensor["T", "E", "B", kind]):      # stored [T, E, B]
        return merge_axes(x, ("B", "T"), "N")       # n = b * T + t
    x = _values(rng, (13, 9, 5), kind)
    out = _run(flat, {"x": x}, {"T": 13, "E": 9, "B": 5}, SCHEDULES[schedule])["out"]
    _same(out, np.transpose(x, (2, 0, 1)).reshape(65, 9))


@pytest.mark.parametrize("kind", KINDS)
def test_slice_pad_and_concat(kind, rng):
    value = {"fp32": -2.5, "bf16": 0.5, "int32": 7, "bool": True}[kind]

    @algorithm
    def ranges(x: Tensor["B", "T", kind], a: Tensor["Ta", "B", kind],
               b: Tensor["B", "Tb", kind]):
        return {"s": x.slice(T=(13, 142), into="S"),
                "p": pad(x, T=(3, 11), into="P", value=value),
                "c": concat([a, b], over=("Ta", "Tb"), into="C")}
    x, a, b = _values(rng, (3, 301), kind), _values(rng, (5, 3), kind), \
        _values(rng, (3, 37), kind)
    out = _run(ranges, {"x": x, "a": a, "b": b}, {"B": 3, "T": 301, "Ta": 5, "Tb": 37})
    _same(out["s"], x[:, 13:142])
    _same(out["p"], np.pad(x, ((0, 0), (3, 11)), constant_values=value))
    _same(out["c"], np.concatenate([a, b.T], axis=0).T)     # axes [B, C]


def test_a_chain_of_reshapes_is_one_load_and_fuses_with_its_consumer(rng):
    @algorithm
    def attention_rows(x: Tensor["B", "C"], w: Tensor["D"]):
        heads = split_axis(x, "C", ("H", "D"), D=37)
        window = pad(heads.slice(H=(1, 4), into="G"), D=(2, 1), into="P", value=1.0)
        return sum(exp(window) * pad(w, D=(2, 1), into="P"), over="P")
    x, w = rng.standard_normal((9, 185)).astype(np.float32), \
        rng.standard_normal(37).astype(np.float32)
    graph = attention_rows.graph()
    low = lower(graph, None, {"B": 9, "C": 185, "D": 37}, True)
    assert len(low.kernel_graph.kernels) == 1         # no copy kernel
    out = emulate(graph, None, {"B": 9, "C": 185, "D": 37}, {"x": x, "w": w}, {})["out"]
    heads = np.pad(x.astype(np.float64).reshape(9, 5, 37)[:, 1:4], ((0, 0), (0, 0), (2, 1)),
                   constant_values=1.0)
    terms = np.exp(heads) * np.pad(w.astype(np.float64), (2, 1))
    want = terms.sum(-1)
    # fp32 sums of 40 terms of either sign: the error follows the terms' size, not the
    # sum's (a row's terms may cancel to near 0)
    bound = 2e-6 * np.abs(terms).sum(-1) + 1e-6
    assert np.all(np.abs(np.asarray(out, np.float64) - want) <= bound), \
        np.max(np.abs(out - want) / bound)


def test_a_reshape_of_a_computed_value_reads_it_from_a_temporary(rng):
    @algorithm
    def scaled_heads(x: Tensor["B", "C"], s: Tensor["C"]):
        return merge_axes(split_axis(x * s, "C", ("H", "D"), H=4), ("D", "B"), "N")
    x, s = rng.standard_normal((3, 44)).astype(np.float32), \
        rng.standard_normal(44).astype(np.float32)
    graph = scaled_heads.graph()
    kernels = lower(graph, None, {"B": 3, "C": 44}, True).kernel_graph.kernels
    assert len(kernels) == 2
    out = emulate(graph, None, {"B": 3, "C": 44}, {"x": x, "s": s}, {})["out"]
    want = (x * s).reshape(3, 4, 11).transpose(2, 0, 1).reshape(33, 4)     # [N, H]
    _same(out, want)


def test_gradient_kernels_pad_and_slice_back(rng):
    @algorithm
    def windows(x: Tensor["B", "T"], a: Tensor["B", "Ta"]):
        joined = concat([x, a], over=("T", "Ta"), into="J")
        return {"s": joined.slice(J=(4, 40), into="S") * 3.0,
                "h": split_axis(x, "T", ("G", "K"), K=7)}
    bwd = grad(windows, wrt=["x", "a"])
    x, a = rng.standard_normal((3, 35)).astype(np.float32), \
        rng.standard_normal((3, 9)).astype(np.float32)
    ds, dh = rng.standard_normal((3, 36)).astype(np.float32), \
        rng.standard_normal((3, 5, 7)).astype(np.float32)
    out = emulate(bwd.graph(), None, {"B": 3, "T": 35, "Ta": 9, "G": 5},
                  {"x": x, "a": a, "ds": ds, "dh": dh}, {})
    djoined = np.zeros((3, 44))
    djoined[:, 4:40] = 3.0 * ds
    np.testing.assert_allclose(out["dx"], djoined[:, :35] + dh.reshape(3, 35), rtol=1e-6)
    np.testing.assert_allclose(out["da"], djoined[:, 35:], rtol=1e-6)


def test_a_split_that_does_not_divide_is_refused_when_compiling():
    @algorithm
    def heads(x: Tensor["B", "C"]):
        return split_axis(x, "C", ("H", "D"), D=64)
    with pytest.raises(PlaitError, match=r"test_reshape_cpu.py:\d+: split_axis: axis C of "
                                         r"size 300 does not split into H x D"):
        lower(heads.graph(), None, {"B": 2, "C": 300}, True)
