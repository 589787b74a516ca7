"""Reductions split across blocks along different axes (a gradient summing over the rows
and over the columns of one [M, B, N] iteration space, the fuzzer's seed 3002883) are
finished by a kernel per set of axes, and what reads them is planned afresh: before, one
finish kernel iterated over the union of both rows of partials, 61.8 M blocks for 8,127
elements. Checked: every kernel's grid stays within the problem, and the CPU executor
agrees with numpy float64 (each program is also compiled and assembled, conftest.py)."""
import math

import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, sum
from plait.lowering.ir.nodes import Kernel
from plait.lowering.pipeline import emulate, lower
from plait.schedule import Schedule


@algorithm
def both_ways(x: Tensor["M", "B", "N"], y: Tensor["M", "B", "N"]):
    over_m = sum(x * y, over="M")                  # [B, N]
    over_b = sum(x, over="B")                      # [M, N]
    return x * over_m - y * over_b                 # reads both over [M, B, N] again


@algorithm
def both_totals(x: Tensor["M", "B", "N"]):
    return {"rows": sum(x, over="M"), "cols": sum(x * x, over="B")}


SCHEDULE = {"grid": {"M": 1, "B": 2}, "block": {"N": {"threads": 32, "vector": 1}}}


def _blocks(low) -> list[int]:
    out = []
    for k in low.threads:
        if isinstance(k, Kernel):
            out.append(math.prod(-(-low.sizes[a] // t) for a, t in k.grid))
    return out


@pytest.mark.parametrize("sizes", [{"M": 9, "B": 301, "N": 3}, {"M": 37, "B": 5, "N": 7}])
def test_splits_along_two_axes_stay_in_proportion(sizes):
    rng = np.random.default_rng()
    x, y = (rng.standard_normal([sizes[a] for a in "MBN"]).astype(np.float32)
            for _ in range(2))
    elements = math.prod(sizes.values())
    for algo, inputs in ((both_ways, {"x": x, "y": y}), (both_totals, {"x": x})):
        graph = algo.graph()
        schedule = Schedule.from_dict({"algorithm": algo.name, **SCHEDULE}) \
            if algo is both_ways else None
        low = lower(graph, schedule, sizes, True)
        assert max(_blocks(low)) <= elements, low.kernel_graph.text()
        got = emulate(graph, schedule, sizes, inputs, {})
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        if algo is both_ways:
            want = {"out": x64 * (x64 * y64).sum(0, keepdims=True)
                    - y64 * x64.sum(1, keepdims=True)}
        else:
            want = {"rows": x64.sum(0), "cols": (x64 * x64).sum(1)}
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
