"""Tier 2: scans on the GPU against torch.cumsum / cumprod / cummax / cummin on cuda, at
lengths that are multiples of no tile (1 to 16384: many repeats carry the running total),
fp32 / bf16 / int32 / bool, NaN and ties, the contiguous and an outer axis, both
directions, the generic scan and the selective-scan example against float64 loops."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.dsl import (Tensor, algorithm, cummax, cummin, cumprod, cumsum,  # noqa: E402
                       scan)


@algorithm
def rows(x: Tensor["M", "N"]):
    return {"sum": cumsum(x, over="N"), "prod": cumprod(x, over="N"),
            "max": cummax(x, over="N"), "min": cummin(x, over="N"),
            "rsum": cumsum(x, over="N", reverse=True)}


@algorithm
def cols(x: Tensor["N", "M"]):
    return {"sum": cumsum(x, over="N"), "max": cummax(x, over="N")}


def _close_sum(got, want64, x):
    """Within the fp32 rounding of a prefix: ~80 adds deep, each 2^-24 of sum |x|; NaN
    exactly where the prefix holds one (a NaN in x propagates to the row's end)."""
    nan = torch.isnan(want64)
    assert torch.equal(torch.isnan(got), nan)
    bound = 80 * 2.0 ** -24 * torch.cumsum(x.double().abs(), -1) + 2.0 ** -8 * want64.abs()
    assert ((got.double() - want64).abs() <= bound)[~nan].all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("m, n", [(7, 1), (5, 37), (9, 1000), (3, 5000), (4, 16383)])
def test_rows_match_torch(m, n, dtype):
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + n)
    x = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    near_one = (1 + 0.01 * torch.randn(m, n, device="cuda", generator=gen)).to(dtype)
    x[0, n // 2] = float("nan")
    got = plait.run(rows, x)
    x64 = x.double()
    _close_sum(got["sum"], torch.cumsum(x64, 1), x)
    _close_sum(got["rsum"].flip(1), torch.cumsum(x64.flip(1), 1), x.flip(1))
    torch.testing.assert_close(got["max"], torch.cummax(x, 1).values, rtol=0, atol=0,
                               equal_nan=True)
    torch.testing.assert_close(got["min"], torch.cummin(x, 1).values, rtol=0, atol=0,
                               equal_nan=True)
    prod = plait.run(rows, near_one)["prod"].double()
    want = torch.cumprod(near_one.double(), 1)
    steps = torch.arange(1, n + 1, device="cuda", dtype=torch.float64)
    assert ((prod - want).abs() <= (steps * 2.0 ** -23 + 2.0 ** -8) * want.abs()).all()


@pytest.mark.parametrize("n, m", [(37, 129), (4096, 300)])
def test_outer_axis_matches_torch(n, m):
    x = torch.randn(n, m, device="cuda")
    got = plait.run(cols, x)
    _close_sum(got["sum"].t(), torch.cumsum(x.double(), 0).t(), x.t())
    torch.testing.assert_close(got["max"], torch.cummax(x, 0).values, rtol=0, atol=0)


def test_int32_and_bool_match_torch():
    @algorithm
    def ints(n: Tensor["M", "N", "int32"], f: Tensor["M", "N"]):
        return {"sum": cumsum(n, over="N"), "max": cummax(n, over="N"),
                "count": cumsum(f > 0.5, over="N"), "any": cummax(f > 2.0, over="N")}
    n = torch.randint(-50, 50, (9, 3001), device="cuda", dtype=torch.int32)
    f = torch.randn(9, 3001, device="cuda")
    got = plait.run(ints, n, f)
    torch.testing.assert_close(got["sum"], torch.cumsum(n, 1).int(), rtol=0, atol=0)
    torch.testing.assert_close(got["max"], torch.cummax(n, 1).values, rtol=0, atol=0)
    torch.testing.assert_close(got["count"], torch.cumsum(f > 0.5, 1).int(), rtol=0, atol=0)
    torch.testing.assert_close(got["any"], torch.cummax(f > 2.0, 1).values, rtol=0, atol=0)


def _linear(left, right):
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


def test_generic_linear_recurrence_matches_a_loop():
    @algorithm
    def recurrence(a: Tensor["B", "L", "D"], b: Tensor["B", "L", "D"]):
        return scan(_linear, (1.0, 0.0), (a, b), over="L")[1]
    a = torch.rand(2, 4096, 33, device="cuda") * 0.1 + 0.9
    b = torch.randn(2, 4096, 33, device="cuda")
    got = plait.run(recurrence, a, b).double()
    h = torch.zeros(2, 33, device="cuda", dtype=torch.float64)
    for t in range(4096):
        h = a[:, t].double() * h + b[:, t].double()
        assert (got[:, t] - h).abs().max().item() <= 1e-4 * (1 + h.abs().max().item())


def test_the_selective_scan_example():
    import selective_scan as example
    B, L, D, N = 2, 1000, 37, 16
    x, Bm, C = (torch.randn(*s, device="cuda") for s in ((B, L, D), (B, L, N), (B, L, N)))
    dt = torch.rand(B, L, D, device="cuda") * 0.2
    A = -torch.rand(D, N, device="cuda") * 2
    got = plait.run(example.selective_scan, x, dt, A, Bm, C).double()
    h = torch.zeros(B, D, N, device="cuda", dtype=torch.float64)
    want = []
    for t in range(L):
        step = dt[:, t, :, None].double()
        h = torch.exp(step * A.double()) * h + step * Bm[:, t, None, :].double() * \
            x[:, t, :, None].double()
        want.append((C[:, t, None, :].double() * h).sum(-1))
    want = torch.stack(want, 1)
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
