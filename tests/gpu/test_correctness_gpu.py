"""On the GPU, against torch: what the CPU tier found wrong or crashing (issue 10).

A gradient stored like its input (nn.Linear's dw is [N, K]), the fp8 scaling epilogue
with fp32 scales and bias on tensor cores, and integer reductions.
"""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402
from plait.dsl import Tensor, algorithm, max, min, sum, where  # noqa: E402
from plait.runtime.tolerance import max_rel_err as _host_err  # noqa: E402


def max_rel_err(out, ref) -> float:
    return _host_err(out.detach().double().cpu().numpy(), ref.detach().double().cpu().numpy())


@algorithm
def linear(a: Tensor["M", "K"], w: Tensor["N", "K"]):
    return sum(a * w, over="K")


@algorithm
def fp8_scaled(a: Tensor["M", "K"], b: Tensor["N", "K"], sa: Tensor["M", "fp32"],
               sb: Tensor["N", "fp32"], bias: Tensor["N", "fp32"]):
    return sum(a * b, over="K") * sa * sb + bias


@algorithm
def int_rows(x: Tensor["M", "N", "int32"]):
    return sum(x, over="N"), max(x, over="N"), min(x, over="N")


@algorithm
def count_positive(x: Tensor["M", "N"]):
    return sum(where(x > 0, 1, 0), over="N")


@pytest.mark.parametrize("shape", [(256, 192, 192), (129, 40, 40), (67, 48, 80)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_linear_weight_gradient_has_the_weights_layout(shape, dtype):
    M, N, K = shape           # N == K in two shapes: a transposed dw would pass a shape check
    g = torch.Generator(device="cuda").manual_seed(M)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    w = torch.randn(N, K, device="cuda", generator=g).to(dtype)
    dy = torch.randn(M, N, device="cuda", generator=g).to(dtype)
    out = plait.run(grad(linear), a, w, dout=dy)
    assert out["dw"].shape == w.shape and out["da"].shape == a.shape
    a64, w64 = a.double().requires_grad_(), w.double().requires_grad_()
    torch.nn.functional.linear(a64, w64).backward(dy.double())
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    assert max_rel_err(out["dw"], w64.grad) < tol
    assert max_rel_err(out["da"], a64.grad) < tol


@pytest.mark.parametrize("operand", [torch.bfloat16, torch.float8_e4m3fn])
def test_fp8_scaling_epilogue_on_tensor_cores(operand):
    M, N, K = 300, 176, 256
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(M, K, device="cuda", generator=g).to(operand)
    b = torch.randn(N, K, device="cuda", generator=g).to(operand)
    sa = torch.rand(M, device="cuda", generator=g) + 0.5
    sb = torch.rand(N, device="cuda", generator=g) + 0.5
    bias = torch.randn(N, device="cuda", generator=g)
    out = plait.run(fp8_scaled, a, b, sa, sb, bias)
    ref = (a.double() @ b.double().t()) * sa.double()[:, None] * sb.double() + bias.double()
    assert out.dtype == torch.float32
    assert max_rel_err(out, ref) < 1e-3


@pytest.mark.parametrize("shape", [(37, 3001), (5, 70000)])
def test_integer_reductions(shape):
    g = torch.Generator(device="cuda").manual_seed(shape[1])
    x = torch.randint(-1000, 1000, shape, device="cuda", generator=g, dtype=torch.int32)
    s, hi, lo = plait.run(int_rows, x)
    assert torch.equal(s, x.sum(1, dtype=torch.int32))
    assert torch.equal(hi, x.amax(1)) and torch.equal(lo, x.amin(1))
    f = torch.randn(shape, device="cuda", generator=g)
    assert torch.equal(plait.run(count_positive, f).long(), (f > 0).sum(1))


def test_index_masks_on_the_gpu():
    """A causal softmax written with index() against torch in float64, odd shapes."""
    from plait.dsl import Tensor, algorithm, exp, index, max, sum, where

    @algorithm
    def causal(s: Tensor["S", "T"]):
        masked = where(index("T") <= index("S"), s, float("-inf"))
        e = exp(masked - max(masked, over="T"))
        return e / sum(e, over="T")

    s = torch.randn(300, 517, device="cuda")
    keep = torch.ones(300, 517, device="cuda", dtype=torch.bool).tril()
    ref = torch.softmax(s.double().masked_fill(~keep, float("-inf")), dim=1)
    out = plait.run(causal, s)
    torch.cuda.synchronize()
    assert (out.double() - ref).abs().max().item() < 1e-5
