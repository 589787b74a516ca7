"""Tier 2: derived gradient kernels on the GPU against torch.autograd (float64 reference)."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.autodiff import grad, to_torch  # noqa: E402

F = torch.nn.functional
TOL = {torch.bfloat16: 2e-2, torch.float32: 1e-4}


def reference(name):
    return {
        "layernorm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
        "rmsnorm": lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w,
        "softmax": lambda x: torch.softmax(x, -1),
        "swiglu": lambda g, u: F.silu(g) * u,
        "geglu": lambda g, u: F.gelu(g) * u,
    }[name]


ARGS = {"layernorm": ("x", "w", "b"), "rmsnorm": ("x", "w"), "softmax": ("x",),
        "swiglu": ("g", "u"), "geglu": ("g", "u")}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(4097, 3001), (5, 17), (1000, 8192)])
@pytest.mark.parametrize("name", sorted(ARGS))
def test_gradient_matches_autograd(name, shape, dtype):
    algo = getattr(__import__(name), name)
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    M, N = shape
    args = [torch.randn(*((M, N) if a in ("x", "g", "u") else (N,)), generator=gen,
                        device="cuda").to(dtype) for a in ARGS[name]]
    dy = torch.randn(M, N, generator=gen, device="cuda").to(dtype)
    got = plait.run(grad(algo), *args, dout=dy)
    leaves = [a.double().requires_grad_() for a in args]
    want = torch.autograd.grad(reference(name)(*leaves), leaves, dy.double())
    for a, w in zip(ARGS[name], want):
        g = got["d" + a]
        assert g.dtype == dtype and g.shape == w.shape
        err = ((g.double() - w).abs().max() / w.abs().max()).item()
        assert err < TOL[dtype], f"d{a}: max_rel_err {err}"


def test_torch_bridge_trains_layernorm():
    from layernorm import layernorm
    fn = to_torch(layernorm)
    x = torch.randn(64, 1000, device="cuda", requires_grad=True)
    w = torch.randn(1000, device="cuda", requires_grad=True)
    b = torch.randn(1000, device="cuda", requires_grad=True)
    y = fn(x, w, b)
    (y * y).sum().backward()
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    yr = reference("layernorm")(*leaves)
    (yr * yr).sum().backward()
    for got, want in zip((x.grad, w.grad, b.grad), leaves):
        err = ((got.double() - want.grad).abs().max() / want.grad.abs().max()).item()
        assert err < 1e-4


def test_torch_bridge_saves_what_the_backward_schedule_says():
    from plait.dsl import Tensor, algorithm, mean, name, rsqrt
    from plait.schedule import Schedule

    @algorithm
    def ln(x: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"], eps: float = 1e-5):
        mu = name(mean(x, over="N"), "mu")
        xc = x - mu
        rstd = name(rsqrt(mean(xc * xc, over="N") + eps), "rstd")
        return xc * rstd * w + b

    bwd_schedule = Schedule.from_dict({"algorithm": "ln.bwd", "save": ["rstd", "mu"],
                                       "grid": {"M": 16},
                                       "block": {"N": {"threads": 128, "vector": 4}}})
    fn = to_torch(ln, grad_schedule=bwd_schedule)
    assert fn.saved == ("rstd", "mu")
    x = torch.randn(300, 1000, device="cuda", requires_grad=True)
    w = torch.randn(1000, device="cuda", requires_grad=True)
    b = torch.randn(1000, device="cuda", requires_grad=True)
    (fn(x, w, b) ** 2).sum().backward()
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    (reference("layernorm")(*leaves) ** 2).sum().backward()
    for got, want in zip((x.grad, w.grad, b.grad), leaves):
        err = ((got.double() - want.grad).abs().max() / want.grad.abs().max()).item()
        assert err < 1e-4
