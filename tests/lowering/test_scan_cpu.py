"""Scans on the CPU executor against numpy's float64 accumulate written here, on fresh
random inputs: lengths 1 to 5000 (longer than a block's chunk: repeats carry the running
total), fp32 / bf16 / fp16 / int32 / bool operands, NaN, both directions, the scan along
the contiguous axis, an outer axis and a middle one, inputs and outputs stored in other
orders, fused producers and consumers, the generic `scan`, schedules that force many
warps and repeats, and the refusals. tests/conftest.py compiles every program run here
for sm_80 and sm_90a and assembles it with ptxas."""
import ml_dtypes
import numpy as np
import pytest

from plait.dsl import (PlaitError, Tensor, algorithm, cummax, cummin, cumprod, cumsum, exp,
                       permute, scan)
from plait.dsl import sum as total
from plait.lowering.pipeline import emulate, lower
from plait.schedule.model import Schedule
from plait.lowering.ir.thread_view import KernelView
from scan_cases import accumulate

EPS = {np.float32: 2.0 ** -24, ml_dtypes.bfloat16: 2.0 ** -8, np.float16: 2.0 ** -11}
DEPTH = 80 * 2.0 ** -24    # fp32 rounding of a prefix: at most ~80 adds deep (lanes, warps,
#                            64 repeats, vector lanes), each within 2^-24 of the operands


@pytest.fixture
def rng():
    return np.random.default_rng()        # fresh inputs every run


def check_sum(got, x, axis, reverse=False, storage=np.float32, offset=0.0):
    """A prefix sum within its rounding: the summation's DEPTH x sum |x|, plus the
    store's rounding to `storage` (of the sum plus a fused `offset`)."""
    ref = accumulate(np.add, x, axis, reverse)
    bound = DEPTH * accumulate(np.add, np.abs(x), axis, reverse) + \
        EPS[storage] * np.abs(ref + offset)
    assert (np.abs(np.asarray(got, np.float64) - offset - ref) <= bound * 1.0001).all()


def check_prod(got, x, axis, reverse=False):
    """Each product of i factors takes i - 1 multiplies: relative error <= i * 2^-24."""
    ref = accumulate(np.multiply, x, axis, reverse)
    count = accumulate(np.add, np.ones_like(x), axis, reverse)
    assert (np.abs(np.asarray(got, np.float64) - ref) <= count * 2.0 ** -23 * np.abs(ref)).all()


def run(algo, sizes, inputs, schedule=None, dtypes=None):
    graph = algo.graph(dtypes or {})
    sched = None if schedule is None else Schedule.from_dict({"algorithm": algo.name,
                                                              **schedule})
    return emulate(graph, sched, sizes, inputs, {})


@algorithm
def rows(x: Tensor["M", "N"]):
    return {"sum": cumsum(x, over="N"), "prod": cumprod(x, over="N"),
            "max": cummax(x, over="N"), "min": cummin(x, over="N", reverse=True),
            "rsum": cumsum(x, over="N", reverse=True)}


def _signed_near_one(rng, shape):
    """Factors whose running products stay in range over 5000 positions, some zero."""
    x = rng.uniform(0.99, 1.01, shape) * rng.choice([-1.0, 1.0], shape)
    x[rng.random(shape) < 0.0005] = 0.0
    return x


@pytest.mark.parametrize("N", [1, 7, 37, 129, 300, 1000, 5000])
def test_rows_fp32_every_length(rng, N):
    x = _signed_near_one(rng, (3, N)).astype(np.float32)
    y = rng.standard_normal((3, N)).astype(np.float32)
    y[rng.random((3, N)) < 0.01] = np.nan
    got = run(rows, {"M": 3, "N": N}, {"x": x})
    x64 = x.astype(np.float64)
    check_sum(got["sum"], x64, 1)
    check_sum(got["rsum"], x64, 1, reverse=True)
    check_prod(got["prod"], x64, 1)
    got = run(rows, {"M": 3, "N": N}, {"x": y})
    y64 = y.astype(np.float64)
    np.testing.assert_array_equal(got["max"], accumulate(np.maximum, y64, 1))
    np.testing.assert_array_equal(got["min"], accumulate(np.minimum, y64, 1, reverse=True))


@pytest.mark.parametrize("storage", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("N", [37, 1000])
def test_narrow_floats_round_once_on_the_store(rng, storage, N):
    x = rng.standard_normal((5, N)).astype(storage)
    name = "bf16" if storage is ml_dtypes.bfloat16 else "fp16"
    got = run(rows, {"M": 5, "N": N}, {"x": x}, dtypes={"x": name})
    x64 = x.astype(np.float64)
    assert got["sum"].dtype == storage
    check_sum(got["sum"], x64, 1, storage=storage)
    np.testing.assert_array_equal(got["max"], accumulate(np.maximum, x64, 1).astype(storage))


@algorithm
def integers(n: Tensor["M", "N", "int32"], b: Tensor["M", "N", "bool"]):
    return {"sum": cumsum(n, over="N"), "prod": cumprod(n, over="N"),
            "max": cummax(n, over="N", reverse=True), "count": cumsum(b, over="N"),
            "any": cummax(b, over="N"), "all": cummin(b, over="N")}


@pytest.mark.parametrize("N", [7, 300, 5000])
def test_int32_and_bool_operands(rng, N):
    n = rng.integers(-9, 10, (4, N)).astype(np.int32)
    n[0, :] = rng.integers(2**28, 2**30, N)         # sums and products wrap at 32 bits
    b = rng.random((4, N)) < 0.3
    b[1] = False
    got = run(integers, {"M": 4, "N": N}, {"n": n, "b": b})
    assert got["count"].dtype == np.int32 and got["any"].dtype == np.bool_
    np.testing.assert_array_equal(got["sum"], accumulate(np.add, n, 1))
    np.testing.assert_array_equal(got["prod"], accumulate(np.multiply, n, 1))
    np.testing.assert_array_equal(got["max"], accumulate(np.maximum, n, 1, reverse=True))
    np.testing.assert_array_equal(got["count"], np.cumsum(b, 1, dtype=np.int32))
    np.testing.assert_array_equal(got["any"], np.logical_or.accumulate(b, 1))
    np.testing.assert_array_equal(got["all"], np.logical_and.accumulate(b, 1))


@algorithm
def middle(x: Tensor["B", "L", "D"], w: Tensor["D"]):
    """The scan over L between B and D, exp and * w fused into its loads, + 1 into its
    stores; the maximum over the first axis stored [L, B, D]."""
    return {"sum": cumsum(exp(x) * w, over="L") + 1.0,
            "max": permute(cummax(x, over="B"), "L", "B", "D")}


@pytest.mark.parametrize("B,L,D", [(2, 37, 5), (3, 300, 33), (1, 1000, 3)])
def test_outer_and_middle_axes_fused_and_permuted(rng, B, L, D):
    x = rng.standard_normal((B, L, D)).astype(np.float32)
    w = rng.standard_normal(D).astype(np.float32)
    got = run(middle, {"B": B, "L": L, "D": D}, {"x": x, "w": w})
    x64 = x.astype(np.float64)
    check_sum(got["sum"], np.exp(x64) * w, 1, offset=1.0)
    np.testing.assert_array_equal(got["max"],
                                  np.transpose(accumulate(np.maximum, x64, 0), (1, 0, 2)))


@algorithm
def stored_transposed(x: Tensor["N", "M"]):
    """x stored N-major, scanned along N: the block's rows are N, its columns M."""
    return {"sum": cumsum(x, over="N"), "min": cummin(x, over="N")}


@pytest.mark.parametrize("N,M", [(37, 3), (300, 33), (5000, 2)])
def test_scan_along_the_strided_axis(rng, N, M):
    x = rng.standard_normal((N, M)).astype(np.float32)
    got = run(stored_transposed, {"N": N, "M": M}, {"x": x})
    check_sum(got["sum"], x.astype(np.float64), 0)
    np.testing.assert_array_equal(got["min"], accumulate(np.minimum, x.astype(np.float64), 0))


SCHEDULES = {   # many warps and repeats; 8 lanes per warp along N beside 4 rows
    "warps": {"grid": {"M": 1}, "block": {"N": {"threads": 256, "vector": 1}}},
    "repeats": {"grid": {"M": 1}, "block": {"N": {"threads": 64, "vector": 2}}},
    "rows": {"grid": {"M": 4}, "block": {"M": {"threads": 4}, "N": {"threads": 8,
                                                                    "vector": 4}}},
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedules_with_many_warps_and_repeats(rng, name):
    N = 1000 if name == "rows" else 5000
    x = _signed_near_one(rng, (7, N)).astype(np.float32)
    got = run(rows, {"M": 7, "N": N}, {"x": x}, SCHEDULES[name])
    check_sum(got["sum"], x.astype(np.float64), 1)
    check_sum(got["rsum"], x.astype(np.float64), 1, reverse=True)
    check_prod(got["prod"], x.astype(np.float64), 1)
    np.testing.assert_array_equal(got["min"], accumulate(np.minimum, x.astype(np.float64), 1,
                                                         reverse=True))


def linear(left, right):
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


@algorithm
def recurrence(a: Tensor["M", "L"], b: Tensor["M", "L"], c: Tensor["L", "D"]):
    pa, h = scan(linear, (1.0, 0.0), (a, b), over="L")
    _, back = scan(linear, (1.0, 0.0), (c, c), over="L", reverse=True)
    return {"h": h, "pa": pa, "back": back}


@pytest.mark.parametrize("L", [1, 37, 1000, 5000])
def test_generic_scan_is_the_sequential_loop(rng, L):
    a = rng.uniform(0.998, 1.0, (3, L)).astype(np.float32)    # no product underflows
    b = rng.standard_normal((3, L)).astype(np.float32)
    c = rng.uniform(0.5, 0.9, (L, 5)).astype(np.float32)
    got = run(recurrence, {"M": 3, "L": L, "D": 5}, {"a": a, "b": b, "c": c})
    h, back, later = np.zeros(3), np.zeros(5), np.ones(5)
    want_h, want_back = np.empty((3, L)), np.empty((L, 5))
    for t in range(L):
        h = a[:, t] * h + b[:, t]
        want_h[:, t] = h
    for t in reversed(range(L)):   # x_t first, then x_{t+1}, ...: c_t times the later a's
        back = c[t] * later + back
        later = later * c[t]
        want_back[t] = back
    scale = np.abs(b).sum(1, keepdims=True)      # |h_t| <= sum |b|: the loop's scale
    assert (np.abs(got["h"] - want_h) <= DEPTH * 4 * scale).all()
    check_prod(got["pa"], a.astype(np.float64), 1)
    assert (np.abs(got["back"] - want_back) <= L * 2.0 ** -22 * np.abs(want_back)).all()


def test_selective_scan_example(rng):
    import selective_scan as example
    B, L, D, N = 2, 300, 5, 4
    x = rng.standard_normal((B, L, D)).astype(np.float32)
    dt = rng.uniform(0.01, 0.2, (B, L, D)).astype(np.float32)
    A = -rng.uniform(0.5, 2.0, (D, N)).astype(np.float32)
    Bm, C = (rng.standard_normal((B, L, N)).astype(np.float32) for _ in range(2))
    got = run(example.selective_scan, {"B": B, "L": L, "D": D, "N": N},
              {"x": x, "dt": dt, "A": A, "Bm": Bm, "C": C})["out"]
    h, want = np.zeros((B, D, N)), np.empty((B, L, D))
    for t in range(L):
        step = dt[:, t, :, None].astype(np.float64)
        h = np.exp(step * A) * h + step * Bm[:, t, None, :] * x[:, t, :, None]
        want[:, t] = (C[:, t, None, :] * h).sum(-1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    a, b = (rng.uniform(0.9, 1.0, (2, 129, 7)).astype(np.float32) for _ in range(2))
    got = run(example.linear_recurrence, {"B": 2, "L": 129, "D": 7}, {"a": a, "b": b})["out"]
    h = np.zeros((2, 7))
    for t in range(129):
        h = a[:, t] * h + b[:, t]
        np.testing.assert_allclose(got[:, t], h, rtol=2e-5)


def test_a_scan_the_block_walks_index_by_index_is_refused_by_name(tmp_path):
    # (a scan split across blocks is two kernels: tests/lowering/test_scan_split_cpu.py)
    with pytest.raises(PlaitError, match=r"walks N index by index"):
        lower(stored_transposed.graph(), Schedule.from_dict({
            "algorithm": "stored_transposed", "grid": {"N": 4096},
            "block": {"M": {"threads": 32}}}), {"N": 300, "M": 64}, True, "sm_90a")


def test_the_thread_level_ir_scans_lanes_then_warps_then_repeats():
    low = lower(rows.graph(), Schedule.from_dict({"algorithm": "rows",
                                                  **SCHEDULES["repeats"]}),
                {"M": 3, "N": 5000}, True, "sm_90a")
    prog = KernelView(low.threads[0])
    blocks = [op for op in prog.in_order if op.op == "scan_block"]
    assert len(blocks) == 5 and all(op.attr("lanes") == (1, 2, 4, 8, 16) for op in blocks)
    assert all(op.attr("warp_bits") == (5,) for op in blocks)
    assert prog.layout.col.reps == 40          # 40 chunks of 128 carry the running total


def test_reduction_of_a_scan_splits_across_blocks(rng):
    @algorithm
    def summed(x: Tensor["M", "N"]):
        return total(cumsum(x, over="N"), over="M")
    x = rng.standard_normal((300, 37)).astype(np.float32)
    got = run(summed, {"M": 300, "N": 37}, {"x": x})["out"]
    ref = np.cumsum(x.astype(np.float64), 1).sum(0)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(np.cumsum(np.abs(x), 1)).sum(0).max()
