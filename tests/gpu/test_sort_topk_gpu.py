"""Tier 2: sort and topk on the GPU against torch.sort(stable=True) and torch.topk on
cuda, at odd row lengths up to 4096, fp32 / bf16 / fp16 / int32, with planted ties, NaN,
+-inf and -0.0, both directions, an outer axis, k from 1 to 129, and the values'
gradient against torch autograd. torch returns int64 indices; plait's are int32."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402
from plait.dsl import Tensor, algorithm, sort, sum, topk  # noqa: E402


def rows_of(dtype):
    @algorithm
    def rows(x: Tensor["M", "N", dtype]):
        up, up_at = sort(x, over="N", return_indices=True)
        down, down_at = sort(x, over="N", descending=True, return_indices=True)
        return {"up": up, "up_at": up_at, "down": down, "down_at": down_at}
    return rows


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "int32": torch.int32}


def planted(m, n, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if dtype == torch.int32:
        return torch.randint(-6, 7, (m, n), device="cuda", generator=gen, dtype=dtype)
    x = torch.randint(-4, 5, (m, n), device="cuda", generator=gen).float() * 0.5
    x += (torch.rand(m, n, device="cuda", generator=gen) < 0.5) * \
        torch.randn(m, n, device="cuda", generator=gen)
    flat = x.view(-1)
    for value in (float("nan"), float("inf"), float("-inf"), -0.0):
        at = torch.randint(0, flat.numel(), (max(1, flat.numel() // 25),), device="cuda",
                           generator=gen)
        flat[at] = value
    return x.to(dtype)


def same(got_values, got_at, x, dim, descending):
    want = torch.sort(x, dim=dim, descending=descending, stable=True)
    assert got_at.dtype == torch.int32
    torch.testing.assert_close(got_at.long(), want.indices, rtol=0, atol=0)
    torch.testing.assert_close(got_values, want.values, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("m, n", [(3, 1), (7, 37), (5, 129), (33, 1000), (9, 4096)])
def test_rows_match_torch_sort(m, n, dtype):
    x = planted(m, n, DTYPES[dtype], m * 31 + n)
    got = plait.run(rows_of(dtype), x)
    same(got["up"], got["up_at"], x, 1, False)
    same(got["down"], got["down_at"], x, 1, True)


@pytest.mark.parametrize("m, n", [(5, 37), (3, 3001)])
def test_an_outer_axis(m, n):
    @algorithm
    def outer(x: Tensor["N", "M"]):
        return sort(x, over="N", descending=True, return_indices=True)
    x = planted(n, m, torch.float32, n)
    values, at = plait.run(outer, x)
    same(values, at, x, 0, True)


@pytest.mark.parametrize("k", [1, 5, 64, 129])
@pytest.mark.parametrize("n", [129, 4000])
def test_topk_matches_torch(k, n):
    @algorithm
    def top(x: Tensor["M", "N"]):
        return topk(x, k, over="N", into="K")
    x = torch.randn(17, n, device="cuda")            # distinct values: torch's tie order
    values, at = plait.run(top, x)
    want = torch.topk(x, k, dim=1, sorted=True)
    torch.testing.assert_close(values, want.values, rtol=0, atol=0)
    torch.testing.assert_close(at.long(), want.indices, rtol=0, atol=0)


def test_the_values_gradient_matches_autograd():
    @algorithm
    def weighted(x: Tensor["M", "N"], w: Tensor["M", "K"]):
        values, _ = topk(x, 5, over="N", into="K")
        return sum(values * w, over="K")
    x = torch.randn(8, 1000, device="cuda", requires_grad=True)
    w = torch.randn(8, 5, device="cuda")
    dout = torch.randn(8, device="cuda")
    (torch.topk(x, 5, dim=1).values * w).sum(1).backward(dout)
    dx = plait.run(grad(weighted, wrt=["x"]), x.detach(), w, dout=dout)["dx"]
    torch.testing.assert_close(dx, x.grad, rtol=1e-6, atol=0)
