"""Tier 2: axes of extent 0 on the GPU (CUDA tensors, numpy arrays through plait.run,
plait.compile handles, the torch op with gradients), against torch on cuda. No kernel is
launched (lowering/graph/empty_axes.py): outputs are empty, or the reductions' identities
(sum 0, max -inf, min +inf, mean NaN, logsumexp -inf), on the arguments' device."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.dsl import (PlaitError, Tensor, algorithm, argmax, log_softmax,  # noqa: E402
                       logsumexp, mean, softmax)
from plait.dsl import max as max_  # noqa: E402
from plait.dsl import min as min_  # noqa: E402
from plait.dsl import sum as sum_  # noqa: E402


@algorithm
def reductions(x: Tensor["M", "N"]):
    return {"sum": sum_(x, over="N"), "max": max_(x, over="N"), "min": min_(x, over="N"),
            "mean": mean(x, over="N"), "lse": logsumexp(x, over="N")}


@algorithm
def row_maps(x: Tensor["M", "N"], w: Tensor["N"]):
    return {"softmax": softmax(x * w, over="N"), "log_softmax": log_softmax(x, over="N")}


@algorithm
def matmul(a: Tensor["M", "K"], b: Tensor["K", "N"]):
    return sum_(a * b, over="K")


@algorithm
def first_max(x: Tensor["M", "N"]):
    return argmax(x, over="N")


SHAPES = [(0, 37), (37, 0), (0, 0), (37, 129)]


def _want(x):
    empty = x.shape[1] == 0
    full = lambda v: torch.full((x.shape[0],), v, device=x.device, dtype=x.dtype)  # noqa
    return {"sum": x.sum(1), "mean": x.mean(1), "lse": torch.logsumexp(x, 1),
            "max": full(float("-inf")) if empty else x.amax(1),
            "min": full(float("inf")) if empty else x.amin(1)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", SHAPES)
def test_reductions_on_cuda_tensors(shape, dtype):
    x = torch.randn(shape, device="cuda").to(dtype)
    got = plait.run(reductions, x)
    tol = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}[dtype]
    for name, want in _want(x.float()).items():
        assert got[name].device == x.device and got[name].dtype == dtype
        torch.testing.assert_close(got[name].float(), want, rtol=tol, atol=tol,
                                   equal_nan=True)


@pytest.mark.parametrize("shape", SHAPES)
def test_numpy_arrays_and_compiled_handles(shape):
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    handle = plait.compile(reductions, like=(x,))
    for _ in range(2):
        x = np.random.default_rng().standard_normal(shape).astype(np.float32)
        got = handle(x)
        want = _want(torch.from_numpy(x))
        for name in want:
            np.testing.assert_allclose(got[name], want[name].numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("M, K, N", [(0, 37, 29), (37, 0, 29), (37, 29, 0), (37, 129, 29)])
def test_contractions(M, K, N):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    got = plait.run(matmul, a, b)
    torch.testing.assert_close(got.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)


def test_argmax_of_an_empty_axis_refuses():
    with pytest.raises(PlaitError, match="axis is empty"):
        plait.run(first_max, torch.randn(5, 0, device="cuda"))


@pytest.mark.parametrize("shape", SHAPES)
def test_torch_op_gradients(shape):
    op = plait.torch_op(row_maps)
    x = torch.randn(shape, device="cuda", requires_grad=True)
    w = torch.randn(shape[1:], device="cuda", requires_grad=True)
    xt, wt = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    g = {k: torch.randn(shape, device="cuda") for k in ("softmax", "log_softmax")}
    got = op(x, w)
    want = {"softmax": torch.softmax(xt * wt, 1), "log_softmax": torch.log_softmax(xt, 1)}
    sum((got[k] * g[k]).sum() for k in g).backward()
    sum((want[k] * g[k]).sum() for k in g).backward()
    torch.testing.assert_close(x.grad, xt.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.grad, wt.grad, rtol=1e-4, atol=1e-4)
