"""Scans split across blocks along their axis (graph/scan_split.py: the chunks' totals,
then each chunk scanned from its carry-in) on the CPU executor, against numpy float64
loops written here on fresh random inputs: scan axes of 1 to 5000 split into chunks
that do not divide them, other axes of 3, 37 and 129, cumsum / cumprod / cummax / cummin
both ways, the generic linear recurrence (not commutative: a carry folded out of order
fails it), fp32 / bf16 / int32 operands, outputs stored in another order, schedules
in YAML and Python, the default for a long outer axis, cumsum's gradient, and what is
still refused. tests/conftest.py compiles every program run here for sm_80 and sm_90a and
assembles it with ptxas."""
import ml_dtypes
import numpy as np
import pytest

from plait.autodiff import grad
from plait.dsl import (PlaitError, Tensor, algorithm, cummax, cummin, cumprod, cumsum,
                       permute, scan)
from plait.dsl import sum as total
from plait.lowering.pipeline import emulate, lower
from plait.schedule.loader import load_schedule
from plait.schedule.model import Schedule
from scan_cases import accumulate

ULP = 2.0 ** -24


@pytest.fixture
def rng():
    return np.random.default_rng()        # fresh inputs every run


def split(name: str, N: int, tile: int, rows: int, cols: int = 32, vector: int = 1) -> dict:
    """A schedule splitting N into chunks of `tile` (rows threads down each), the
    columns M a warp's lanes wide."""
    return {"algorithm": name, "grid": {"N": tile, "M": cols * vector},
            "block": {"N": {"threads": rows}, "M": {"threads": cols, "vector": vector}}}


def run(algo, sizes, inputs, schedule=None):
    sched = schedule if schedule is None or isinstance(schedule, Schedule) else \
        Schedule.from_dict(schedule)
    return emulate(algo.graph(), sched, sizes, inputs, {})


def kernels(algo, sizes, schedule=None):
    sched = None if schedule is None else Schedule.from_dict(schedule)
    return lower(algo.graph(), sched, sizes, True, "sm_90a").kernel_graph


def sum_bound(x, axis, chunks, reverse=False, storage_eps=ULP):
    """Where an fp32 prefix sum may lie: each of its adds within 2^-24 of its partial's
    magnitude, at most (chunks folded in the carry + the chunk's own ~80: lanes, warps,
    repeats) deep, plus the store's rounding."""
    ref = accumulate(np.add, x, axis, reverse)
    depth = (chunks + 80) * ULP
    return ref, depth * accumulate(np.add, np.abs(x), axis, reverse) + storage_eps * np.abs(ref)


@algorithm
def cols(x: Tensor["N", "M"]):
    return {"sum": cumsum(x, over="N"), "rsum": cumsum(x, over="N", reverse=True),
            "prod": cumprod(x, over="N"), "max": cummax(x, over="N"),
            "min": cummin(x, over="N", reverse=True)}


def _near_one(rng, shape):
    """Factors whose running products stay in range over 5000 positions, some zero."""
    x = rng.uniform(0.99, 1.01, shape) * rng.choice([-1.0, 1.0], shape)
    x[rng.random(shape) < 0.0005] = 0.0
    return x


CASES = [   # N, M, schedule (None: the default, which splits an outer axis past 512)
    (1, 3, None),          # one chunk: one kernel
    (37, 129, split("cols", 37, 8, 4)),
    (300, 37, split("cols", 300, 64, 8)),
    (1000, 3, None),
    (5000, 37, None),
    (5000, 129, split("cols", 5000, 128, 16, 16, 2)),
]


@pytest.mark.parametrize("N,M,schedule", CASES)
def test_named_scans_split_across_blocks(rng, N, M, schedule):
    x = _near_one(rng, (N, M)).astype(np.float32)
    kg = kernels(cols, {"N": N, "M": M}, schedule)
    chunks = dict((s, t) for _, s, t in kg.derived).get("N")
    if N > 1:       # two kernels: the chunks' totals, then the chunks from their carry
        assert [k.name for k in kg.kernels] == ["cols", "cols.then"]
    got = run(cols, {"N": N, "M": M}, {"x": x}, schedule)
    x64 = x.astype(np.float64)
    count = -(-N // chunks) if chunks else 1
    for key, reverse in (("sum", False), ("rsum", True)):
        ref, bound = sum_bound(x64, 0, count, reverse)
        assert (np.abs(got[key] - ref) <= bound).all(), key
    steps = accumulate(np.add, np.ones_like(x64), 0)      # i factors: i - 1 multiplies
    ref = accumulate(np.multiply, x64, 0)
    assert (np.abs(got["prod"] - ref) <= (steps + count) * 2 * ULP * np.abs(ref)).all()
    np.testing.assert_array_equal(got["max"], accumulate(np.maximum, x64, 0))
    np.testing.assert_array_equal(got["min"], accumulate(np.minimum, x64, 0, reverse=True))


def linear(left, right):
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


@algorithm
def recurrence(a: Tensor["N", "M"], b: Tensor["N", "M"]):
    pa, h = scan(linear, (1.0, 0.0), (a, b), over="N")
    _, back = scan(linear, (1.0, 0.0), (a, b), over="N", reverse=True)
    return {"h": h, "pa": pa, "back": back}


def _loop(a, b, reverse=False):
    """The recurrence as a float64 loop: y_t = x_0 o ... o x_t with (a1, b1) o (a2, b2) =
    (a1 a2, a2 b1 + b2); reversed, y_t = x_t o ... o x_last."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    out_a, out_b = np.empty_like(a), np.empty_like(b)
    sa, sb = np.ones(a.shape[1]), np.zeros(a.shape[1])
    for t in (reversed(range(len(a))) if reverse else range(len(a))):
        sa, sb = (a[t] * sa, a[t] * sb + b[t]) if not reverse else (a[t] * sa, sa * b[t] + sb)
        out_a[t], out_b[t] = sa, sb
    return out_a, out_b


@pytest.mark.parametrize("N,M,schedule", [
    (37, 3, split("recurrence", 37, 8, 4)), (300, 129, split("recurrence", 300, 64, 8)),
    (1000, 37, None), (5000, 3, None)])
def test_linear_recurrence_carries_in_order(rng, N, M, schedule):
    """Not commutative: a chunk's carry folded in another order than the chunks' (or a
    reverse scan's from the chunks before it) is far off the loop."""
    a = rng.uniform(0.9, 0.99, (N, M)).astype(np.float32)
    b = rng.standard_normal((N, M)).astype(np.float32)
    assert len(kernels(recurrence, {"N": N, "M": M}, schedule).kernels) == 2
    got = run(recurrence, {"N": N, "M": M}, {"a": a, "b": b}, schedule)
    pa, h = _loop(a, b)
    _, back = _loop(a, b, reverse=True)
    # Each step's rounding (a few ulps of |h|) decays by a < 0.99 per later step, so
    # the error stays within 1 / (1 - 0.99) = 100 steps' worth, in any association.
    for key, want in (("h", h), ("back", back)):
        assert np.abs(got[key] - want).max() <= 8 * 100 * ULP * np.abs(want).max(), key
    steps = accumulate(np.add, np.ones_like(pa), 0)        # then below fp32's normals
    assert (np.abs(got["pa"] - pa) <= (steps + 64) * 2 * ULP * np.abs(pa) + 2.0 ** -120).all()


@algorithm
def narrow(x: Tensor["N", "M", "bf16"], n: Tensor["N", "M", "int32"]):
    return {"sum": cumsum(x, over="N"), "max": cummax(x, over="N", reverse=True),
            "isum": cumsum(n, over="N"), "iprod": cumprod(n, over="N"),
            "imin": cummin(n, over="N", reverse=True)}


@pytest.mark.parametrize("N,M", [(300, 37), (1000, 129)])
def test_bf16_and_int32_operands(rng, N, M):
    x = rng.standard_normal((N, M)).astype(ml_dtypes.bfloat16)
    n = rng.integers(-9, 10, (N, M)).astype(np.int32)
    n[:, 0] = rng.integers(2 ** 28, 2 ** 30, N)          # sums and products wrap at 32 bits
    schedule = split("narrow", N, 64, 8, 32, 2) if N < 512 else None
    got = run(narrow, {"N": N, "M": M}, {"x": x, "n": n}, schedule)
    assert got["isum"].dtype == np.int32
    np.testing.assert_array_equal(got["isum"], accumulate(np.add, n, 0))
    np.testing.assert_array_equal(got["iprod"], accumulate(np.multiply, n, 0))
    np.testing.assert_array_equal(got["imin"], accumulate(np.minimum, n, 0, reverse=True))
    x64 = x.astype(np.float64)
    ref, bound = sum_bound(x64, 0, 64, storage_eps=2.0 ** -8)   # fp32 sum, one bf16 store
    assert (np.abs(got["sum"].astype(np.float64) - ref) <= bound).all()
    np.testing.assert_array_equal(got["max"].astype(np.float64),
                                  accumulate(np.maximum, x64, 0, reverse=True))


@algorithm
def transposed(x: Tensor["N", "M"], y: Tensor["M", "N"]):
    """Outputs stored [M, N] of a scan over the outer N, and a scan of an input stored
    [M, N] over its outer M."""
    return {"t": permute(cumsum(x, over="N", reverse=True), "M", "N"),
            "u": cummax(y, over="M")}


def test_permuted_storage_orders(rng):
    N, M = 1000, 129
    x = rng.standard_normal((N, M)).astype(np.float32)
    y = rng.standard_normal((M, N)).astype(np.float32)
    got = run(transposed, {"N": N, "M": M}, {"x": x, "y": y})
    ref, bound = sum_bound(x.astype(np.float64), 0, 64, reverse=True)
    assert (np.abs(got["t"] - ref.T) <= bound.T).all()
    np.testing.assert_array_equal(got["u"], accumulate(np.maximum, y.astype(np.float64), 0))


YAML = """\
algorithm: cols
grid: {N: 256, M: 16}
block:
  N: {threads: 16}
  M: {threads: 8, vector: 2}
"""


@pytest.mark.parametrize("form", ["yaml", "python"])
def test_schedules_in_yaml_and_python(rng, tmp_path, form):
    path = tmp_path / "cols.yaml"
    path.write_text(YAML)
    sched = load_schedule(path)
    if form == "python":
        path = tmp_path / "cols_schedule.py"
        path.write_text(sched.to_python())
        sched = load_schedule(path)
    N, M = 3001, 37
    x = _near_one(rng, (N, M)).astype(np.float32)
    low = lower(cols.graph(), sched, {"N": N, "M": M}, True, "sm_90a").kernel_graph
    assert ("N_chunks0", "N", 256) in low.derived
    got = run(cols, {"N": N, "M": M}, {"x": x}, sched)
    ref, bound = sum_bound(x.astype(np.float64), 0, 12)
    assert (np.abs(got["sum"] - ref) <= bound).all()
    np.testing.assert_array_equal(got["min"], accumulate(np.minimum, x.astype(np.float64), 0,
                                                         reverse=True))


def test_the_default_splits_a_long_outer_axis_into_many_blocks():
    kg = kernels(cols, {"N": 8192, "M": 4096})
    first, then = kg.kernels
    grid = dict(first.schedule.grid)
    block = dict(first.schedule.block)
    assert then.schedule == first.schedule and grid["N"] < 8192
    assert block["M"].threads == 32                   # a warp's lanes along the row
    blocks = -(-8192 // grid["N"]) * -(-4096 // grid["M"])
    assert blocks >= 4 * 132 and block["N"].threads * block["M"].threads >= 128
    assert len(kernels(cols, {"N": 512, "M": 4096}).kernels) == 1    # short: one kernel


@algorithm
def colsum(x: Tensor["N", "M"]):
    return cumsum(x, over="N")


def test_cumsum_gradient_split_matches_torch_autograd(rng):
    torch = pytest.importorskip("torch")
    N, M = 1000, 37
    x, g = rng.standard_normal((N, M)), rng.standard_normal((N, M))
    t = torch.tensor(x, requires_grad=True)
    torch.cumsum(t, 0).backward(torch.tensor(g))
    want = t.grad.numpy()
    derived = grad(colsum, wrt=["x"]).graph()
    kg = lower(derived, None, {"N": N, "M": M}, True, "sm_90a").kernel_graph
    assert any(k.name.endswith(".then") for k in kg.kernels)     # the reverse cumsum split
    got = emulate(derived, None, {"N": N, "M": M},
                  {"x": x.astype(np.float32), "dout": g.astype(np.float32)}, {})["dx"]
    bound = (64 + 80) * ULP * accumulate(np.add, np.abs(g), 0, reverse=True) + \
        ULP * np.abs(want)
    assert (np.abs(got - want) <= bound).all()


def test_what_is_still_refused_by_name():
    @algorithm
    def flags(b: Tensor["N", "M", "bool"]):
        return cummax(b, over="N")

    @algorithm
    def twice(x: Tensor["N", "M"]):
        return cumsum(cumsum(x, over="N"), over="N")

    @algorithm
    def beside(x: Tensor["N", "M"]):
        return cumsum(x, over="N") - total(x, over="N")
    for algo, match in ((flags, "cummax of bool over N is split"),
                        (twice, "scans another scan split"),
                        (beside, "are both split across blocks in one kernel")):
        with pytest.raises(PlaitError, match=match):
            lower(algo.graph(), Schedule.from_dict(split(algo.name, 3000, 256, 8)),
                  {"N": 3000, "M": 37}, True, "sm_90a")
    with pytest.raises(PlaitError, match="under cols's schedule; schedule cols instead"):
        lower(cols.graph(), Schedule.from_dict({**split("cols", 3000, 256, 8), "kernels": {
            "then": {"grid": {"N": 512}}}}), {"N": 3000, "M": 37}, True, "sm_90a")
    # the default keeps what cannot split in one block
    assert len(kernels(flags, {"N": 3000, "M": 37}).kernels) == 1
    assert len(kernels(twice, {"N": 3000, "M": 37}).kernels) == 1
