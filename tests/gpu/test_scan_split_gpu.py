"""Tier 2: scans split across blocks along an outer axis (two kernels: the chunks'
totals, then each chunk from its carry-in) on the GPU, against torch.cumsum / cumprod /
cummax / cummin on cuda and the linear recurrence against a float64 loop: the default
schedule (lengths past 512) and an explicit one whose chunks divide no length, fp32 /
bf16 / int32, both directions, a permuted output, cumsum's gradient."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402
from plait.dsl import (Tensor, algorithm, cummax, cummin, cumprod, cumsum,  # noqa: E402
                       permute, scan)
from plait.schedule.model import Schedule  # noqa: E402

ULP = 2.0 ** -24


@algorithm
def cols(x: Tensor["N", "M"]):
    return {"sum": cumsum(x, over="N"), "rsum": cumsum(x, over="N", reverse=True),
            "max": cummax(x, over="N"), "min": cummin(x, over="N", reverse=True),
            "prod": cumprod(x, over="N"), "t": permute(cumsum(x, over="N"), "M", "N")}


def _chunked(name: str, tile: int) -> Schedule:
    return Schedule.from_dict({"algorithm": name, "grid": {"N": tile, "M": 32},
                               "block": {"N": {"threads": 8}, "M": {"threads": 32}}})


def _close_sum(got, x64, dim, reverse=False):
    """Within fp32 rounding: (chunks + 80) adds deep, each 2^-24 of the sum of |x|."""
    flip = (lambda t: t.flip(dim)) if reverse else (lambda t: t)
    want = flip(torch.cumsum(flip(x64), dim))
    bound = (x64.shape[dim] // 64 + 80) * ULP * flip(torch.cumsum(flip(x64.abs()), dim)) + \
        2.0 ** -8 * want.abs()
    assert ((got.double() - want).abs() <= bound).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n, m, tile", [(8192, 4096, None), (5000, 37, None),
                                        (3001, 129, 200), (1000, 300, 72)])
def test_split_outer_scans_match_torch(n, m, tile, dtype):
    gen = torch.Generator(device="cuda").manual_seed(n + m)
    x = torch.randn(n, m, device="cuda", generator=gen).to(dtype)
    sched = None if tile is None else _chunked("cols", tile)
    got = plait.run(cols, x, schedule=sched)
    x64 = x.double()
    _close_sum(got["sum"], x64, 0)
    _close_sum(got["rsum"], x64, 0, reverse=True)
    _close_sum(got["t"].t(), x64, 0)
    torch.testing.assert_close(got["max"], torch.cummax(x, 0).values, rtol=0, atol=0)
    torch.testing.assert_close(got["min"], torch.cummin(x.flip(0), 0).values.flip(0),
                               rtol=0, atol=0)
    near_one = (1 + 0.01 * torch.randn(n, m, device="cuda", generator=gen)).to(dtype)
    prod = plait.run(cols, near_one, schedule=sched)["prod"].double()
    want = torch.cumprod(near_one.double(), 0)
    steps = torch.arange(1, n + 1, device="cuda", dtype=torch.float64)[:, None]
    assert ((prod - want).abs() <= ((steps + 64) * 2.0 ** -23 + 2.0 ** -8) * want.abs()).all()


def test_split_int32_matches_torch():
    @algorithm
    def ints(n: Tensor["N", "M", "int32"]):
        return {"sum": cumsum(n, over="N"), "max": cummax(n, over="N", reverse=True)}
    n = torch.randint(-50, 50, (6000, 129), device="cuda", dtype=torch.int32)
    got = plait.run(ints, n)
    torch.testing.assert_close(got["sum"], torch.cumsum(n, 0).int(), rtol=0, atol=0)
    torch.testing.assert_close(got["max"], torch.cummax(n.flip(0), 0).values.flip(0),
                               rtol=0, atol=0)


def _linear(left, right):
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


@algorithm
def recurrence(a: Tensor["B", "L", "D"], b: Tensor["B", "L", "D"]):
    return {"h": scan(_linear, (1.0, 0.0), (a, b), over="L")[1],
            "back": scan(_linear, (1.0, 0.0), (a, b), over="L", reverse=True)[1]}


@pytest.mark.parametrize("B, L, D", [(4, 4096, 2048), (2, 3001, 33)])
def test_split_linear_recurrence_matches_a_float64_loop(B, L, D):
    a = torch.rand(B, L, D, device="cuda") * 0.09 + 0.9
    b = torch.randn(B, L, D, device="cuda")
    got = plait.run(recurrence, a, b)
    a64, b64 = a.double(), b.double()
    h = torch.zeros(B, D, device="cuda", dtype=torch.float64)
    hs = []
    for t in range(L):
        h = a64[:, t] * h + b64[:, t]
        hs.append(h)
    want = torch.stack(hs, 1)
    s = torch.zeros(B, D, device="cuda", dtype=torch.float64)
    back = []
    for t in reversed(range(L)):
        s = a64[:, t] * s + b64[:, t]
        back.append(s)
    want_back = torch.stack(back[::-1], 1)
    for key, w in (("h", want), ("back", want_back)):
        assert (got[key].double() - w).abs().max().item() <= 800 * ULP * w.abs().max().item()


def test_split_cumsum_gradient_matches_torch_autograd():
    @algorithm
    def colsum(x: Tensor["N", "M"]):
        return cumsum(x, over="N")
    x = torch.randn(5000, 129, device="cuda", requires_grad=True)
    g = torch.randn(5000, 129, device="cuda")
    torch.cumsum(x.double(), 0).backward(g.double())
    got = plait.run(grad(colsum, wrt=["x"]), x.detach(), dout=g)["dx"].double()
    _close_sum(got.flip(0), g.double().flip(0), 0)
    assert torch.allclose(got, x.grad.double(), rtol=0,
                          atol=(5000 // 64 + 80) * ULP * g.abs().sum(0).max().item())
