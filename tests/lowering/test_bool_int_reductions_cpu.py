"""Reductions of bool and int32 tensors: a sum of bools counts them (int32), a mean of
bools is the fraction true (fp32), max/min of bools are any/all and stay bool, and an
int32 sum is exact. Reference, CPU executor and (through conftest) ptxas agree, on rows
that fit a block and rows split across blocks."""
import numpy as np
import pytest

import plait
from plait.dsl import DType, Tensor, algorithm, evaluate, max, mean, min, sum
from plait.lowering.pipeline import lower


@algorithm
def frac_positive(x: Tensor["M", "N"]):
    return mean(x > 0.0, over="N")


@algorithm
def counts(x: Tensor["M", "N"], t: float = 0.3):
    return {"rows": sum(x > t, over="N"), "cols": sum(x > t, over="M"),
            "all": sum(x > t, over=("M", "N"))}


@algorithm
def any_all(x: Tensor["M", "N"], t: float = 1.0):
    return {"any": max(x > t, over="N"), "all": min(x > -t, over="N")}


@algorithm
def int_sums(i: Tensor["M", "N", "int32"]):
    return {"rows": sum(i, over="N"), "cols": sum(i, over="M")}


SHAPES = [(5, 37), (257, 3), (1, 1), (3, 100003)]     # the last splits N across blocks


def _x(M, N):
    return np.random.default_rng().standard_normal((M, N)).astype(np.float32)


def test_the_types_follow_the_promotion_table():
    g = counts.graph()
    assert {k: v.dtype for k, v in g.outputs.items()} == {
        "rows": DType.INT32, "cols": DType.INT32, "all": DType.INT32}
    assert frac_positive.graph().outputs["out"].dtype == DType.FP32
    assert {v.dtype for v in any_all.graph().outputs.values()} == {DType.BOOL}
    # The kernels (CPU executor and emitter alike) fold the count as int32 adds.
    tiles = lower(frac_positive.graph(), None, {"M": 5, "N": 37}, True, "sm_90a").tiles
    sums = [op for t in tiles for op in t.ops if op.op == "sum"]
    assert sums and all(op.dtype == DType.INT32 for op in sums)


@pytest.mark.parametrize("M, N", SHAPES)
def test_mean_of_a_comparison_is_the_fraction_true(M, N):
    x = _x(M, N)
    want = (x > 0).sum(1) / N
    np.testing.assert_allclose(evaluate(frac_positive.graph(), {"x": x})["out"], want,
                               rtol=1e-15)
    got = plait.run(frac_positive, x, device="cpu")
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-7)


@pytest.mark.parametrize("M, N", SHAPES)
def test_sum_of_a_comparison_counts(M, N):
    x = _x(M, N)
    hit = x > 0.3
    want = {"rows": hit.sum(1), "cols": hit.sum(0), "all": hit.sum()}
    ref = evaluate(counts.graph(), {"x": x})
    got = plait.run(counts, x, device="cpu")
    for k, w in want.items():
        assert got[k].dtype == np.int32 and ref[k].dtype == np.int32
        np.testing.assert_array_equal(ref[k], w)
        np.testing.assert_array_equal(got[k], w)


@pytest.mark.parametrize("M, N", SHAPES)
def test_max_and_min_of_bools_are_any_and_all(M, N):
    x = _x(M, N)
    want = {"any": (x > 1.0).any(1), "all": (x > -1.0).all(1)}
    ref = evaluate(any_all.graph(), {"x": x})
    got = plait.run(any_all, x, device="cpu")
    for k, w in want.items():
        assert got[k].dtype == np.bool_
        np.testing.assert_array_equal(ref[k], w)
        np.testing.assert_array_equal(got[k], w)


@pytest.mark.parametrize("M, N", SHAPES)
def test_int32_sums_are_exact(M, N):
    i = np.random.default_rng().integers(-1000, 1000, (M, N)).astype(np.int32)
    want = {"rows": i.sum(1, dtype=np.int64), "cols": i.sum(0, dtype=np.int64)}
    ref = evaluate(int_sums.graph(), {"i": i})
    got = plait.run(int_sums, i, device="cpu")
    for k, w in want.items():
        assert got[k].dtype == np.int32
        np.testing.assert_array_equal(ref[k], w)
        np.testing.assert_array_equal(got[k], w)
