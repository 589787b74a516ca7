"""argmax / argmin / max_with_index on the CPU executor against an independent numpy
reference, at odd shapes (rows not a multiple of threads x vector), with ties, -inf,
NaN, all-equal rows, int32 and bool inputs and both storage orders. Every program is
also compiled for sm_80 and sm_90a and assembled (tests/conftest.py wraps emulate)."""
import numpy as np
import pytest

import plait
from plait.dsl import (DType, PlaitError, Tensor, algorithm, argmax, argmin, evaluate,
                       max_with_index, min_with_index)
from plait.lowering.pipeline import lower
from plait.schedule import load_schedule
from plait.lowering.ir.thread_view import KernelView


def first_extreme(x: np.ndarray, axis: int, kind: str) -> np.ndarray:
    """torch's rule, written without np.argmax/argmin on the values: the first NaN of a
    row if it has one, else the first position equal to the row's extreme."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
    clean = np.where(nan, 0, x)
    big = np.where(nan, -np.inf if kind == "max" else np.inf, x) if x.dtype.kind == "f" \
        else clean
    best = big.max(-1, keepdims=True) if kind == "max" else big.min(-1, keepdims=True)
    hit = np.where(nan.any(-1, keepdims=True), nan, (big == best) & ~nan)
    pos = np.arange(x.shape[-1])
    return np.where(hit, pos, x.shape[-1]).min(-1).astype(np.int32)


@algorithm
def rows(x: Tensor["M", "N"]):
    v, i = max_with_index(x, over="N")
    w, j = min_with_index(x, over="N")
    return {"max": v, "argmax": i, "min": w, "argmin": j}


@algorithm
def cols(x: Tensor["M", "N"]):
    return {"argmax": argmax(x, over="M"), "argmin": argmin(x, over="M")}


@algorithm
def int_rows(x: Tensor["M", "N", "int32"]):
    return {"argmax": argmax(x, over="N"), "argmin": argmin(x, over="N")}


@algorithm
def bool_rows(x: Tensor["M", "N"], t: float = 1.0):
    return {"first_above": argmax(x > t, over="N"), "first_below": argmin(x > t, over="N")}


def _planted(M, N, rng, dtype=np.float32):
    """Random rows, then: a tie of two maxima, an all-equal row, a row of -inf, NaN in a
    row (twice), a NaN beside +inf, a row of ties at the minimum."""
    x = rng.standard_normal((M, N)).astype(dtype)
    special = [
        lambda r: r.__setitem__(slice(None), 0.5),
        lambda r: r.__setitem__(slice(None), -np.inf),
        lambda r: (r.__setitem__(N // 2, np.nan), r.__setitem__(N - 1, np.nan)),
        lambda r: (r.__setitem__(0, np.inf), r.__setitem__(N - 1, np.nan)),
        lambda r: (r.__setitem__(N - 1, 9.0), r.__setitem__(N // 3, 9.0),
                   r.__setitem__(N // 4, -9.0), r.__setitem__(N - 2, -9.0)),
    ]
    for k, plant in enumerate(special[:M]):
        plant(x[k])
    return x


SHAPES = [(7, 3001), (5, 50257), (6, 1), (9, 37), (5, 1031)]


@pytest.mark.parametrize("M,N", SHAPES)
def test_rows_agree_with_torch_rule(M, N):
    x = _planted(M, N, np.random.default_rng())
    got = plait.run(rows, x, device="cpu")
    for kind in ("max", "min"):
        want = first_extreme(x, 1, kind)
        assert got[f"arg{kind}"].dtype == np.int32
        np.testing.assert_array_equal(got[f"arg{kind}"], want)
        np.testing.assert_array_equal(evaluate(rows.graph(), {"x": x})[f"arg{kind}"], want)
        # the value is the element at the index (NaN where the index is a NaN's)
        picked = x[np.arange(M), want]
        np.testing.assert_array_equal(got[kind], picked)


@pytest.mark.parametrize("M,N", [(37, 301), (200, 13), (5, 1), (301, 6), (3001, 3)])
def test_columns_reduce_the_outer_axis(M, N):
    x = _planted(N, M, np.random.default_rng()).T.copy()   # planted rows become columns
    got = plait.run(cols, x, device="cpu")
    np.testing.assert_array_equal(got["argmax"], first_extreme(x, 0, "max"))
    np.testing.assert_array_equal(got["argmin"], first_extreme(x, 0, "min"))


@pytest.mark.parametrize("M,N", [(7, 3001), (3, 70001)])
def test_bf16_rows(M, N):
    import ml_dtypes
    x = _planted(M, N, np.random.default_rng()).astype(ml_dtypes.bfloat16)   # many ties
    got = plait.run(rows, x, device="cpu")
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(got["argmax"], first_extreme(xf, 1, "max"))
    np.testing.assert_array_equal(got["argmin"], first_extreme(xf, 1, "min"))


@pytest.mark.parametrize("M,N", [(7, 3001), (4, 33)])
def test_int32_rows_with_extremes_and_ties(M, N):
    rng = np.random.default_rng()
    x = rng.integers(-50, 50, (M, N)).astype(np.int32)    # many ties
    x[0, :] = np.iinfo(np.int32).min                        # the identity's own value
    x[1, N // 2] = np.iinfo(np.int32).max
    got = plait.run(int_rows, x, device="cpu")
    np.testing.assert_array_equal(got["argmax"], first_extreme(x, 1, "max"))
    np.testing.assert_array_equal(got["argmin"], first_extreme(x, 1, "min"))


@pytest.mark.parametrize("M,N", [(6, 3001), (3, 40)])
def test_bool_rows_give_the_first_true(M, N):
    x = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    x[0] = 0.0                        # no element above: argmax of all-False is 0
    got = plait.run(bool_rows, x, device="cpu")
    np.testing.assert_array_equal(got["first_above"], first_extreme(x > 1.0, 1, "max"))
    np.testing.assert_array_equal(got["first_below"], first_extreme(x > 1.0, 1, "min"))


def test_types_and_one_reduction_per_index():
    g = rows.graph()
    assert g.outputs["argmax"].dtype == DType.INT32
    assert g.outputs["max"].dtype == DType.FP32
    tile = KernelView(lower(g, None, {"M": 3, "N": 3001}, True, "sm_90a").threads[0])
    steps = [op for op in tile.in_order if op.attr("op") == "argmax"]
    assert [op.op for op in steps if op.op.startswith(("reduce", "smem"))] == \
        ["reduce_local", "reduce_shfl", "smem_put", "smem_fold", "reduce_done"]
    # max and argmax of one x share one exchange (one pair of barriers for all four)
    assert sum(op.op == "barrier" for op in tile.in_order) == 2


def test_a_split_axis_is_refused_by_name(tmp_path):
    path = tmp_path / "rows.yaml"
    path.write_text("algorithm: rows\ngrid: {M: 1, N: 1024}\n"
                    "block: {N: {threads: 256, vector: 4}}\n")
    with pytest.raises(PlaitError, match=r"argm(ax|in) over N is split across blocks"):
        lower(rows.graph(), load_schedule(path), {"M": 3, "N": 3001}, True, "sm_90a")


def test_dsl_errors_name_the_line():
    with pytest.raises(PlaitError, match=r"test_argmax_cpu.py:\d+.*one axis name"):
        @algorithm
        def two(x: Tensor["M", "N"]):
            return argmax(x, over=("M", "N"))
        two.graph()
    with pytest.raises(PlaitError, match=r"argmin over 'K'"):
        @algorithm
        def unknown(x: Tensor["M", "N"]):
            return argmin(x, over="K")
        unknown.graph()
