"""On the GPU: the rand and dropout programs of the CPU tests (tests/random_cases.py)
through the real kernels. rand's bits must equal the CPU executor's and the test's own
Philox exactly; dropout's mask exactly, its values against torch on cuda applying the
same mask (x * mask / (1 - p) in the input's dtype); the fused dropout + residual +
LayerNorm against torch's layer_norm; attention with dropout on P against torch."""
import numpy as np
import pytest

import plait
from random_cases import (SHAPES, attention_dropout, dropout_residual_layernorm, drops,
                          keep_want, uniforms, uniforms_want)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("M, N", SHAPES + [(1000, 4099)])
@pytest.mark.parametrize("seed, offset", [(0, 0), (-123456789, 2 ** 31 - 40)])
def test_rand_bits_equal_the_cpu_executor_and_the_definition(M, N, seed, offset):
    x = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    gpu = plait.run(uniforms, x, seed=seed, offset=offset, device="gpu")
    cpu = plait.run(uniforms, x, seed=seed, offset=offset, device="cpu")
    want = uniforms_want(M, N, seed, offset) if M * N < 100_000 else None
    for name in cpu:
        np.testing.assert_array_equal(np.asarray(gpu[name]), np.asarray(cpu[name]), name)
        if want is not None:
            np.testing.assert_array_equal(np.asarray(gpu[name]), want[name], name)


@pytest.mark.parametrize("M, N", SHAPES + [(513, 2050)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_dropout_against_torch_with_the_same_mask(M, N, dtype):
    torch = pytest.importorskip("torch")
    tdtype = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(M * N)
    x = torch.randn(M, N, device="cuda", dtype=tdtype, generator=gen) + 0.01
    xt = torch.randn(N, M, device="cuda", dtype=tdtype, generator=gen) + 0.01
    got = plait.run(drops, x, xt, seed=5, device="gpu")
    masks = {"dx": keep_want((M, N), 0.3, 5), "dxt": keep_want((M, N), 0.3, 5, 12345),
             "big_offset": keep_want((M, N), 0.5, 5, 2 ** 32 - 5)}
    source = {"dx": x, "dxt": xt.T, "big_offset": x}
    for name, mask in masks.items():
        p = 0.5 if name == "big_offset" else 0.3
        keep = torch.from_numpy(mask).cuda()
        want = (source[name].float() * keep * (1.0 / (1 - p))).to(tdtype)
        g = torch.as_tensor(got[name], device="cuda")
        assert torch.equal(g == 0, ~keep | (source[name] == 0)), name
        torch.testing.assert_close(g, want, msg=name)


@pytest.mark.parametrize("M, N", [(37, 129), (300, 7), (4096, 4096)])
def test_fused_dropout_residual_layernorm_against_torch(M, N):
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(N)
    x, r = (torch.randn(M, N, device="cuda", generator=gen) for _ in range(2))
    w, b = (torch.randn(N, device="cuda", generator=gen) for _ in range(2))
    got = plait.run(dropout_residual_layernorm, x, r, w, b, seed=11, device="gpu")
    keep = torch.from_numpy(keep_want((M, N), 0.1, 11)).cuda()
    want = torch.nn.functional.layer_norm(x * keep / 0.9 + r, (N,), w, b, 1e-5)
    torch.testing.assert_close(torch.as_tensor(got, device="cuda"), want, rtol=1e-4,
                               atol=1e-4)


def test_attention_with_dropout_on_p_against_torch():
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(3)
    B, H, S, T, D = 2, 4, 300, 257, 64
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    got = plait.run(attention_dropout, q, k, v, seed=9, device="gpu")
    keep = torch.from_numpy(keep_want((B, H, S, T), 0.2, 9, 3)).cuda()
    p = torch.softmax(q.float() @ k.float().transpose(-1, -2) * 0.125, dim=-1)
    want = (p * keep / 0.8) @ v.float()
    torch.testing.assert_close(torch.as_tensor(got, device="cuda").float(), want,
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("M, N", [(37, 129), (1000, 4099)])
def test_grad_of_fused_dropout_layernorm_against_torch_autograd(M, N):
    torch = pytest.importorskip("torch")
    from plait.autodiff import grad
    gen = torch.Generator(device="cuda").manual_seed(M)
    x, r, g = (torch.randn(M, N, device="cuda", generator=gen) for _ in range(3))
    w, b = (torch.randn(N, device="cuda", generator=gen) for _ in range(2))
    got = plait.run(grad(dropout_residual_layernorm, wrt=["x"]), x, r, w, b, seed=11,
                    dout=g, device="gpu")["dx"]
    keep = torch.from_numpy(keep_want((M, N), 0.1, 11)).cuda()
    xx = x.clone().requires_grad_(True)
    torch.nn.functional.layer_norm(xx * keep / 0.9 + r, (N,), w, b, 1e-5).backward(g)
    torch.testing.assert_close(torch.as_tensor(got, device="cuda"), xx.grad, rtol=1e-4,
                               atol=1e-4)
