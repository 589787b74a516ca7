"""The CPU executor's time and memory follow the problem, not the schedule: a grid tile far
past the axis's extent, or a block of many threads and wide vectors on a short axis, runs
as fast and as small as the problem, and gives the reference's answer."""
import contextlib
import signal
import time
import tracemalloc

import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, evaluate, max, mean, softmax, sum
from plait.lowering.pipeline import emulate
from plait.schedule.model import Schedule


@algorithm
def colsum(x: Tensor["M", "N"]):
    return sum(x, over="M")


@algorithm
def rowstats(x: Tensor["M", "N"]):
    return max(x, over="N"), mean(x, over="N"), softmax(x, over="N")


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail (rather than hang) when the body runs past `seconds`."""
    def expire(*_):
        raise TimeoutError(f"ran past {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _check(algo, schedule, x):
    graph = algo.graph({"x": "fp32"})
    out = emulate(graph, Schedule.from_dict(schedule), dict(zip("MN", x.shape)), {"x": x}, {})
    ref = evaluate(graph, {"x": x})
    for key in graph.outputs:
        got = np.asarray(out[key], np.float64)
        assert got.shape == ref[key].shape
        assert np.abs(got - ref[key]).max() <= 2e-6 * np.abs(ref[key]).max(), key


@pytest.mark.parametrize("tile", [10**6, 2**31 - 1])
def test_huge_loop_tile_on_a_tiny_problem_is_fast(tile):
    """M is walked by one block in a loop of `tile` steps; only 3 of them are inside."""
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    start = time.perf_counter()
    with deadline(30):
        _check(colsum, {"algorithm": "colsum", "grid": {"M": tile},
                        "block": {"N": {"threads": 32}}}, x)
    assert time.perf_counter() - start < 10


def test_many_threads_on_a_short_axis_stay_small():
    """1024 threads x 4 lanes per row over rows of 3: the executor holds the 3, not 4096."""
    x = np.random.default_rng(2).standard_normal((2003, 3)).astype(np.float32)
    schedule = {"algorithm": "rowstats", "grid": {"M": 1},
                "block": {"N": {"threads": 1024, "vector": 4}}}
    _check(rowstats, schedule, x)        # once untraced: imports, the compile check
    tracemalloc.start()
    try:
        _check(rowstats, schedule, x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Before: 2003 blocks x 4096 lanes, int64 indices: over 250 MB.
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.0f} MiB for a 24 KB input"


@pytest.mark.parametrize("shape", [(5, 37), (9, 1), (1, 300)])
def test_a_block_wider_than_its_rows_matches_the_reference(shape):
    """Threads and repeats past a short axis leave the reductions exact (butterfly, warps
    through shared memory, repeats), over random inputs at odd shapes."""
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    for block in ({"N": {"threads": 1024, "vector": 2}}, {"N": {"threads": 128}},
                  {"M": {"threads": 4}, "N": {"threads": 256, "vector": 4}}):
        grid = {} if "M" in block else {"M": 1}
        _check(rowstats, {"algorithm": "rowstats", "grid": grid, "block": block}, x)
