"""Tier 2: topk on the GPU at row lengths from 1 to 128256 (one block per row up to
4096, two kernels past it, three past 4096 / k chunks of candidates) against torch on
cuda: values and indices against torch.sort(stable=True)'s first k (ties exactly: the
lower index first, NaN largest), with planted ties, NaN, +-inf, -0.0 and the int32
extremes, fp32 / bf16 / fp16 / int32, largest and smallest, k from 1 to 100; against
torch.topk on distinct values; an outer axis; the values' gradient against autograd.
torch returns int64 indices; plait's are int32."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402
from plait.dsl import Tensor, algorithm, sum, topk  # noqa: E402
from topk_cases import top_of  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "int32": torch.int32}
def planted(m, n, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if dtype == torch.int32:
        x = torch.randint(-6, 7, (m, n), device="cuda", generator=gen, dtype=dtype)
        values = (torch.iinfo(torch.int32).min, torch.iinfo(torch.int32).max)
    else:
        x = torch.randint(-4, 5, (m, n), device="cuda", generator=gen).float() * 0.5
        x += (torch.rand(m, n, device="cuda", generator=gen) < 0.3) * \
            torch.randn(m, n, device="cuda", generator=gen)
        values = (float("nan"), float("inf"), float("-inf"), -0.0)
    flat = x.view(-1)
    for value in values:
        at = torch.randint(0, flat.numel(), (max(1, flat.numel() // 40),), device="cuda",
                           generator=gen)
        flat[at] = value
    return x.to(dtype)


def same(got_values, got_at, x, k, dim, largest):
    want = torch.sort(x, dim=dim, descending=largest, stable=True)
    assert got_at.dtype == torch.int32
    torch.testing.assert_close(got_at.long(), want.indices.narrow(dim, 0, k), rtol=0, atol=0)
    torch.testing.assert_close(got_values, want.values.narrow(dim, 0, k), rtol=0, atol=0,
                               equal_nan=True)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("k", [1, 5, 64, 100])
@pytest.mark.parametrize("m, n", [(3, 300), (9, 4096), (5, 4097), (7, 10000), (3, 40000),
                                  (4, 128256), (2, 300000)])
def test_rows_match_torch(m, n, k, dtype):
    x = planted(m, n, DTYPES[dtype], m * 31 + n + k)
    got = plait.run(top_of(k, dtype), x)
    same(got["values"], got["at"], x, k, 1, True)
    same(got["low"], got["low_at"], x, k, 1, False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1000, 128256])
def test_distinct_values_match_torch_topk(n, dtype):
    @algorithm
    def top64(logits: Tensor["M", "V"]):
        return topk(logits, 64, over="V", into="K")
    x = torch.randn(64, n, device="cuda").to(dtype)
    values, at = plait.run(top64, x)
    want = torch.topk(x, 64, dim=1, sorted=True)
    torch.testing.assert_close(values, want.values, rtol=0, atol=0)
    # bf16 rounds some logits equal: where values tie, compare with the stable order
    want_at = torch.sort(x, dim=1, descending=True, stable=True).indices[:, :64]
    torch.testing.assert_close(at.long(), want_at, rtol=0, atol=0)


@pytest.mark.parametrize("n", [37, 10000])
def test_an_outer_axis(n):
    @algorithm
    def outer(x: Tensor["N", "M"]):
        return topk(x, 7, over="N", into="K")
    x = planted(n, 5, torch.float32, n)
    values, at = plait.run(outer, x)
    same(values, at, x, 7, 0, True)


@pytest.mark.parametrize("n", [1000, 50000])
def test_the_values_gradient_matches_autograd(n):
    @algorithm
    def weighted(x: Tensor["M", "N"], w: Tensor["M", "K"]):
        values, _ = topk(x, 5, over="N", into="K")
        return sum(values * w, over="K")
    x = torch.randn(8, n, device="cuda", requires_grad=True)
    w = torch.randn(8, 5, device="cuda")
    dout = torch.randn(8, device="cuda")
    (torch.topk(x, 5, dim=1).values * w).sum(1).backward(dout)
    dx = plait.run(grad(weighted, wrt=["x"]), x.detach(), w, dout=dout)["dx"]
    torch.testing.assert_close(dx, x.grad, rtol=1e-6, atol=0)
