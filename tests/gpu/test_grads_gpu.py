"""Tier 2: derived gradient kernels on the GPU against torch.autograd (float64 reference)."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.autodiff import grad, to_torch  # noqa: E402
from plait.runtime.api import compile as plait_compile  # noqa: E402

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
    check_gradient(name, shape, dtype)


@pytest.mark.parametrize("name", ["swiglu", "geglu", "layernorm"])
def test_gradient_with_more_row_blocks_than_grid_y_holds(name):
    """70001 rows: the row blocks of a 2-axis grid spill from y onto z."""
    check_gradient(name, (70001, 1030), torch.bfloat16)


def check_gradient(name, shape, dtype):
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


@pytest.mark.parametrize("shape", [(264, 136, 72), (1024, 2048, 512)])
def test_matmul_bias_gelu_gradients_on_tensor_cores(shape):
    """The derived backward: dy' = dout * gelu'(a @ b + bias) comes from a GEMM whose
    epilogue reads dout; da = dy' @ b^T and db = a^T @ dy' are GEMMs of their own."""
    from matmul_bias_gelu import matmul_bias_gelu
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M + N)
    a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    b = torch.randn(K, N, generator=gen, device="cuda").bfloat16() * 0.1
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    dy = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    bwd = grad(matmul_bias_gelu)
    program = plait_compile(bwd, {"a": "bf16", "b": "bf16", "bias": "bf16", "dout": "bf16"},
                            {"M": M, "N": N, "K": K})
    gemms = [k.name for k in program.kernels if any(x.kind == "tensormap" for x in k.args)]
    assert len(gemms) == 3, gemms
    got = plait.run(bwd, a, b, bias, dout=dy)
    leaves = [t.double().requires_grad_() for t in (a, b, bias)]
    want = torch.autograd.grad(F.gelu(leaves[0] @ leaves[1] + leaves[2]), leaves, dy.double())
    for key, w in zip(("da", "db", "dbias"), want):
        err = ((got[key].double() - w).abs().max() / w.abs().max()).item()
        assert err < TOL[torch.bfloat16], f"{key}: max_rel_err {err}"


def test_torch_bridge_trains_a_linear_layer():
    from matmul_bias_gelu import matmul_bias_gelu
    fn = to_torch(matmul_bias_gelu)
    a = torch.randn(200, 96, device="cuda").bfloat16().requires_grad_()
    b = (torch.randn(96, 136, device="cuda") * 0.1).bfloat16().requires_grad_()
    bias = torch.randn(136, device="cuda").bfloat16().requires_grad_()
    (fn(a, b, bias).float() ** 2).sum().backward()
    leaves = [t.detach().double().requires_grad_() for t in (a, b, bias)]
    (F.gelu(leaves[0] @ leaves[1] + leaves[2]) ** 2).sum().backward()
    for got, want in zip((a.grad, b.grad, bias.grad), leaves):
        err = ((got.double() - want.grad).abs().max() / want.grad.abs().max()).item()
        assert err < 3e-2, err


@pytest.mark.parametrize("into,dtype,vector", [("registers", torch.float32, 4),
                                               ("shared", torch.float32, 4),
                                               ("shared", torch.bfloat16, 8),
                                               ("shared", torch.bfloat16, 4)])
@pytest.mark.parametrize("prefetch", [0, 1, 2, 3])
@pytest.mark.parametrize("rows,M", [(16, 37), (4, 3), (64, 200)])
@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_walked_rows_any_prefetch_depth(name, rows, M, prefetch, into, dtype, vector):
    """A block walking `rows` rows with loads `prefetch` steps ahead, in registers or a
    cp.async ring: row counts that end mid-block, blocks with fewer rows than the depth,
    and a row width (1000) that leaves the last vectors partly or wholly outside."""
    from plait.schedule import Schedule
    if into == "shared" and prefetch == 0:
        pytest.skip("a shared ring needs a step ahead (checked on the CPU tier)")
    algo = getattr(__import__(name), name)
    gen = torch.Generator(device="cuda").manual_seed(M * 10 + prefetch)
    N = 1000
    args = [torch.randn(*((M, N) if a == "x" else (N,)), generator=gen, device="cuda").to(dtype)
            for a in ARGS[name]]
    dy = torch.randn(M, N, generator=gen, device="cuda").to(dtype)
    g = grad(algo)
    sched = Schedule.from_dict({"algorithm": g.name, "grid": {"M": rows}, "prefetch": prefetch,
                                "prefetch_into": into,
                                "block": {"N": {"threads": 128, "vector": vector}}})
    got = plait.run(g, *args, dout=dy, schedule=sched)
    leaves = [a.double().requires_grad_() for a in args]
    want = torch.autograd.grad(reference(name)(*leaves), leaves, dy.double())
    for a, w in zip(ARGS[name], want):
        err = ((got["d" + a].double() - w).abs().max() / w.abs().max()).item()
        assert err < TOL[dtype], f"d{a}: max_rel_err {err}"
