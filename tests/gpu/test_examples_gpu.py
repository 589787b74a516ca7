"""Tier 2: every example, with every shipped schedule, on the GPU against torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.schedule.lookup import find_schedule  # noqa: E402

SHAPES = [(4097, 3001), (64, 8192), (5, 17), (300, 12288)]
TOL = {torch.bfloat16: 1.5e-2, torch.float16: 3e-3, torch.float32: 3e-5}


def torch_reference(name, args):
    a = [t.double() for t in args]
    if name == "layernorm":
        x, w, b = a
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    if name == "rmsnorm":
        x, w = a
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w
    if name == "softmax":
        return torch.softmax(a[0], -1)
    if name == "swiglu":
        g, u = a
        return torch.nn.functional.silu(g) * u
    if name == "geglu":
        g, u = a
        return torch.nn.functional.gelu(g) * u
    raise KeyError(name)


def make_args(name, M, N, dtype, gen):
    def r(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    if name in ("layernorm",):
        return [r(M, N), r(N), r(N)]
    if name == "rmsnorm":
        return [r(M, N), r(N)]
    if name == "softmax":
        return [r(M, N) * 3]
    return [r(M, N), r(M, N)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "default"])
@pytest.mark.parametrize("name", ["layernorm", "rmsnorm", "softmax", "swiglu", "geglu"])
def test_example_on_gpu(name, arch, shape, dtype):
    module = __import__(name)
    algo = getattr(module, name)
    gen = torch.Generator(device="cuda").manual_seed(hash((name, arch, shape)) % 2**31)
    args = make_args(name, *shape, dtype, gen)
    schedule = None if arch == "default" else find_schedule(name, arch)
    if schedule is None and arch != "default":
        pytest.fail(f"no shipped {arch} schedule for {name}")
    out = plait.run(algo, *args, schedule=schedule) if schedule is not None else \
        plait.run(algo, *args)
    torch.cuda.synchronize()
    assert out.dtype == dtype and out.shape == args[0].shape
    ref = torch_reference(name, args)
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert np.isfinite(err) and err < TOL[dtype], f"max_rel_err {err}"


@pytest.mark.parametrize("name", ["swiglu", "geglu"])
def test_more_row_blocks_than_grid_y_holds(name):
    """70001 rows of blocks: 65535 on y, the rest on z = 2 (whose last 61069 blocks must
    leave without writing); columns end mid-block on x."""
    module = __import__(name)
    algo = getattr(module, name)
    gen = torch.Generator(device="cuda").manual_seed(7)
    args = make_args(name, 70001, 1030, torch.bfloat16, gen)
    schedule = find_schedule(name, "sm_90")
    out = plait.run(algo, *args, schedule=schedule)
    ref = torch_reference(name, args)
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert np.isfinite(err) and err < TOL[torch.bfloat16], f"max_rel_err {err}"
