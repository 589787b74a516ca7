"""torch.compile(backend="plait") on CUDA tensors in bf16, forward and backward, against a
float64 eager reference: plait's error must stay within twice eager bf16's (or 1e-2)."""
import copy

import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402
from plait.runtime import driver  # noqa: E402

from backend_models import MLP, Block, Residual, RMSNorm, Softmax, SwiGLU  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("fresh_backend"),
              pytest.mark.skipif(not driver.gpu_available(), reason="no CUDA GPU")]


def _rel(a, ref) -> float:
    return ((a.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _run(model, xs, dy, compile_):
    xs = [x.clone().requires_grad_() for x in xs]
    m = torch.compile(model, backend="plait") if compile_ else model
    y = m(*xs)
    (y * dy.to(y.dtype)).sum().backward()
    return [y] + [x.grad for x in xs] + [p.grad for p in model.parameters()]


def _check(model, *shapes):
    torch.manual_seed(0)
    model = model.cuda().to(torch.bfloat16)
    xs = [torch.randn(*s, device="cuda", dtype=torch.bfloat16) for s in shapes]
    with torch.no_grad():
        dy = torch.randn(model(*xs).shape, device="cuda", dtype=torch.float64)
    ref = _run(copy.deepcopy(model).double(), [x.double() for x in xs], dy, False)
    eager = _run(copy.deepcopy(model), xs, dy, False)
    got = _run(model, xs, dy, True)
    for i, (g, e, r) in enumerate(zip(got, eager, ref)):
        assert _rel(g, r) <= max(2 * _rel(e, r), 1e-2), (i, _rel(g, r), _rel(e, r))
    s = backend.stats()
    assert s.get("region_calls", 0) >= 2 and s.get("fallback_calls", 0) == 0, s
    return s


def test_mlp_gpu():
    _check(MLP(96, 250, 64), (37, 96))


def test_rmsnorm_gpu():
    _check(RMSNorm(520), (3, 37, 520))


def test_swiglu_gpu():
    _check(SwiGLU(128, 344), (75, 128))


def test_softmax_gpu():
    _check(Softmax(), (33, 1001))


def test_residual_gpu():
    _check(Residual(128, 320), (2, 45, 128))


def test_llama_block_gpu():
    s = _check(Block(256, 4, 688), (2, 129, 256))
    assert s.get("regions", 0) >= 4, s
