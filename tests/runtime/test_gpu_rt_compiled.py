"""plait.compile's handle on a real GPU: against plait.run and torch, new data through the same
handle (tensor maps re-encoded), CUDA graph capture and replay, side streams, cuda:1."""
import pytest

torch = pytest.importorskip("torch")

import plait  # noqa: E402
from plait.dsl import PlaitError  # noqa: E402
from plait.runtime import driver  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver.gpu_available(), reason="no CUDA GPU")]


def _layernorm():
    from layernorm import layernorm
    return layernorm


def _matmul():
    from matmul import matmul
    return matmul


def _ln_ref(x, w, b, eps=1e-5):
    return torch.nn.functional.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(),
                                          eps)


def _rand(gen, *shape, dtype=torch.float32, device="cuda"):
    return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def _close(out, ref, tol):
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= tol, f"max rel err {err:.3g} > {tol}"


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 3e-5), (torch.bfloat16, 1.5e-2)])
def test_handle_matches_run_and_torch(dtype, tol):
    layernorm = _layernorm()
    gen = torch.Generator(device="cuda").manual_seed(1)
    x, w, b = _rand(gen, 37, 3001, dtype=dtype), _rand(gen, 3001, dtype=dtype), \
        _rand(gen, 3001, dtype=dtype)
    k = plait.compile(layernorm, like=(x, w, b), eps=1e-6)
    y = k(x, w, b)
    assert y.dtype == dtype and y.device == x.device and y.shape == x.shape
    _close(y, _ln_ref(x, w, b, 1e-6), tol)
    torch.testing.assert_close(y, plait.run(layernorm, x, w, b, eps=1e-6), rtol=0, atol=0)
    for _ in range(3):                         # new data, same handle
        x2 = _rand(gen, 37, 3001, dtype=dtype)
        _close(k(x2, w, b), _ln_ref(x2, w, b, 1e-6), tol)
    _close(k(x, w, b, eps=1e-2), _ln_ref(x, w, b, 1e-2), tol)
    with pytest.raises(PlaitError, match=r"argument 'x' is .* \[36, 3001\]"):
        k(x[:36].contiguous(), w, b)


def _uses_tensor_maps(handle) -> bool:
    return any(a.kind == "tensormap" for k in handle.program.kernels for a in k.args)


def test_matmul_handle_with_tensor_maps_follows_new_pointers():
    matmul = _matmul()
    gen = torch.Generator(device="cuda").manual_seed(2)
    shapes = ((1000, 776), (776, 3000))      # rows of 16-byte multiples: the TMA path
    a, b = (_rand(gen, *s, dtype=torch.bfloat16) for s in shapes)
    k = plait.compile(matmul, like=(a, b))
    assert _uses_tensor_maps(k), "expected a wgmma kernel fed by tensor maps on this GPU"
    for _ in range(4):                         # fresh operands each time: maps re-encoded
        a, b = (_rand(gen, *s, dtype=torch.bfloat16) for s in shapes)
        _close(k(a, b), a.double() @ b.double(), 1.5e-2)
    _close(k(a, b), a.double() @ b.double(), 1.5e-2)   # and the same ones again


def test_cuda_graph_capture_and_replay():
    layernorm, matmul = _layernorm(), _matmul()
    gen = torch.Generator(device="cuda").manual_seed(3)
    x, w, b = _rand(gen, 67, 1531), _rand(gen, 1531), _rand(gen, 1531)
    p, q = _rand(gen, 129, 304, dtype=torch.bfloat16), _rand(gen, 304, 520,
                                                             dtype=torch.bfloat16)
    ln = plait.compile(layernorm, like=(x, w, b))
    mm = plait.compile(matmul, like=(p, q))
    assert _uses_tensor_maps(mm)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):              # warm up off the capture, as torch advises
        ln(x, w, b), mm(p, q), plait.run(layernorm, x, w, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = ln(x, w, b)
        z = mm(p, q)
        y2 = plait.run(layernorm, x, w, b)     # plait.run's cached handle is capturable too
    for _ in range(3):
        x.copy_(_rand(gen, 67, 1531))
        p.copy_(_rand(gen, 129, 304, dtype=torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        _close(y, _ln_ref(x, w, b), 3e-5)
        _close(y2, _ln_ref(x, w, b), 3e-5)
        _close(z, p.double() @ q.double(), 1.5e-2)


def test_launches_go_on_the_current_torch_stream():
    layernorm = _layernorm()
    gen = torch.Generator(device="cuda").manual_seed(4)
    x, w, b = _rand(gen, 4097, 3001), _rand(gen, 3001), _rand(gen, 3001)
    k = plait.compile(layernorm, like=(x, w, b))
    new = _rand(gen, 4097, 3001)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)          # the side stream is busy for a while,
        x.copy_(new)                           # then writes new data: a kernel on any
        y = k(x, w, b)                         # other stream would read the old x
    side.synchronize()
    _close(y, _ln_ref(new, w, b), 3e-5)


def test_misaligned_view_is_refused_by_the_handle_and_run_by_plait_run():
    layernorm = _layernorm()
    gen = torch.Generator(device="cuda").manual_seed(5)
    base, w, b = _rand(gen, 37 * 301 + 1), _rand(gen, 301), _rand(gen, 301)
    aligned = base[:-1].view(37, 301)
    odd = base[1:].view(37, 301)               # 4 bytes past a 16-byte boundary
    k = plait.compile(layernorm, like=(aligned, w, b))
    with pytest.raises(PlaitError, match=r"argument 'x' is at 0x[0-9a-f]+, not 16-byte"):
        k(odd, w, b)
    _close(plait.run(layernorm, odd, w, b), _ln_ref(odd, w, b), 3e-5)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_cuda1_run_on_cuda1():
    layernorm, matmul = _layernorm(), _matmul()
    gen = torch.Generator(device="cuda:1").manual_seed(6)
    x, w, b = (_rand(gen, *s, device="cuda:1") for s in ((37, 3001), (3001,), (3001,)))
    before = torch.cuda.current_device()
    y = plait.run(layernorm, x, w, b)
    assert y.device == x.device and torch.cuda.current_device() == before
    _close(y, _ln_ref(x, w, b), 3e-5)
    k = plait.compile(layernorm, like=(x, w, b))
    _close(k(x, w, b), _ln_ref(x, w, b), 3e-5)
    p = _rand(gen, 300, 136, dtype=torch.bfloat16, device="cuda:1")   # TMA-able rows
    q = _rand(gen, 136, 520, dtype=torch.bfloat16, device="cuda:1")
    z = plait.run(matmul, p, q)
    assert z.device == p.device
    _close(z, p.double() @ q.double(), 1.5e-2)
    x0 = x.to("cuda:0")                        # and cuda:0 still works after cuda:1
    _close(plait.run(layernorm, x0, w.to("cuda:0"), b.to("cuda:0")),
           _ln_ref(x0, w.to("cuda:0"), b.to("cuda:0")), 3e-5)
    with torch.cuda.device(1):                 # torch on cuda:1, tensors on cuda:0
        _close(plait.run(layernorm, x0, w.to("cuda:0"), b.to("cuda:0")),
               _ln_ref(x0, w.to("cuda:0"), b.to("cuda:0")), 3e-5)
        assert torch.cuda.current_device() == 1
    with pytest.raises(PlaitError, match="one GPU"):
        plait.run(layernorm, x0, w, b)
