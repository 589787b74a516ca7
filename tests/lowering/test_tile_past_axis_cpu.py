"""A grid tile longer than its axis: one block, whose threads hold only what the axis has.

Found by the gradient fuzzer on the device (seeds 3024224, 3024295, 3024343, 3024949,
3025355): `grid: {N: 64}` with `block: {N: {threads: 1}}` over N = 1 unrolled 64 elements
per thread, each under a bounds check, and a gradient body made minutes of code generation
and ptxas (past the fuzzer's 300 s). The layout now sizes the fragment by the axis.
"""
import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, exp, sum
from plait.lowering.graph.layout import make_layout
from plait.lowering.pipeline import emulate
from plait.schedule import Schedule


@algorithm(name="scaled_rows")
def scaled_rows(x: Tensor["M", "N"], w: Tensor["N"]):
    return exp(x * w) / sum(x * x + 1.0, over="N")


def _schedule(tile: int):
    return Schedule.from_dict({"algorithm": "scaled_rows", "grid": {"N": tile},
                               "block": {"M": {"threads": 32}, "N": {"threads": 1}}})


@pytest.mark.parametrize("n, held", [(1, 1), (3, 3), (64, 64), (100, 64)])
def test_fragment_is_sized_by_the_axis_not_the_tile(n, held):
    lay = make_layout("scaled_rows", ("M", "N"), _schedule(64).default, {"M": 40, "N": n}, {})
    assert lay.col.tile == 64                     # still gridded: bounds checks stay
    assert lay.col.reps * lay.col.vector == held


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_tile_past_axis_runs_right(n, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((37, n)).astype(dtype)
    w = rng.standard_normal(n).astype(dtype)
    out = emulate(scaled_rows.graph({"x": np.dtype(dtype), "w": np.dtype(dtype)}),
                  _schedule(64), {"M": 37, "N": n}, {"x": x, "w": w}, {})["out"]
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    ref = np.exp(x64 * w64) / (x64 * x64 + 1.0).sum(1, keepdims=True)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol)
