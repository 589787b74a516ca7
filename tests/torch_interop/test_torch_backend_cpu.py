"""torch.compile(backend="plait") on CPU tensors (the CPU executor) against eager torch in
float64: forward values and the gradients of inputs and parameters. These tests opt in to
the CPU executor (PLAIT_TORCH_CPU=1); without it the backend leaves CPU tensors to torch
(test_torch_backend_cpu_policy.py)."""
import copy

import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402

from backend_models import MLP, Residual, RMSNorm, Softmax, SwiGLU  # noqa: E402

TOL = dict(rtol=2e-4, atol=2e-5)     # fp32 (plait) against float64 (eager)


@pytest.fixture(autouse=True)
def _fresh(fresh_backend, monkeypatch):
    monkeypatch.setenv(backend.CPU_ENV, "1")


def _check(model, *shapes, fully_plait=True):
    """Run model compiled with plait and, in float64, eagerly; compare output and grads."""
    torch.manual_seed(0)
    xs = [torch.randn(*s) for s in shapes]
    ref = copy.deepcopy(model).double()
    xs_ref = [x.double().requires_grad_() for x in xs]
    xs = [x.requires_grad_() for x in xs]
    y = torch.compile(model, backend="plait")(*xs)
    y_ref = ref(*xs_ref)
    dy = torch.randn(y.shape, dtype=torch.float64)
    (y * dy.float()).sum().backward()
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y.double(), y_ref, **TOL)
    for x, x_ref in zip(xs, xs_ref):
        torch.testing.assert_close(x.grad.double(), x_ref.grad, **TOL)
    for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad.double(), p_ref.grad, **TOL, msg=name)
    s = backend.stats()
    # a forward and a backward region ran (compiled here, or by an earlier test: the
    # process keeps regions by structure)
    assert s.get("region_calls", 0) >= 2, s
    if fully_plait:
        assert s.get("fallback_calls", 0) == 0, s
    return s


def test_mlp_linear_gelu_linear():
    _check(MLP(13, 37, 11), (7, 13))


def test_mlp_on_3d_input():
    _check(MLP(9, 21, 5), (3, 5, 9))


def test_rmsnorm():
    _check(RMSNorm(29), (3, 7, 29))


def test_swiglu():
    _check(SwiGLU(19, 45), (11, 19))


def test_softmax():
    _check(Softmax(), (5, 33))


def test_residual_norm_and_mlp():
    _check(Residual(23, 41), (2, 9, 23))


def test_where_and_relu():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(17, 17)

        def forward(self, x):
            return torch.where(x > 0.2, torch.relu(self.lin(x)), 0.3 * x)
    _check(M(), (6, 17))


def test_unsupported_op_falls_back_around_it():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(torch.cumsum(torch.exp(x) * 0.5, dim=-1)) * 2.0 - x
    s = _check(M(), (4, 15))
    assert s.get("regions", 0) >= 2, s       # the parts on both sides of cumsum


def test_region_plait_cannot_name_runs_as_torch():
    class M(torch.nn.Module):           # x + x.t(): two dims of one tensor as one axis
        def forward(self, x):
            return torch.sigmoid(x + x.t()) * x
    torch.manual_seed(0)
    x = torch.randn(13, 13)
    y = torch.compile(M(), backend="plait")(x)
    torch.testing.assert_close(y, M()(x))
    assert backend.stats().get("regions_refused", 0) >= 1


def test_float64_stays_with_torch():
    torch.manual_seed(0)
    m = MLP(5, 7, 3).double()
    x = torch.randn(4, 5, dtype=torch.float64)
    torch.testing.assert_close(torch.compile(m, backend="plait")(x), m(x))
    assert backend.stats().get("regions", 0) == 0


def test_bf16_within_bf16_tolerance():
    torch.manual_seed(0)
    m = SwiGLU(24, 40).to(torch.bfloat16)
    x = torch.randn(5, 24, dtype=torch.bfloat16)
    y = torch.compile(m, backend="plait")(x)
    y_ref = copy.deepcopy(m).double()(x.double())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), y_ref, rtol=2e-2, atol=2e-2)
    assert backend.stats().get("region_calls", 0) >= 1


def test_backend_name_is_registered():
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("plait") is backend.plait_backend


def test_llama_block():
    from backend_models import Block
    s = _check(Block(16, 2, 24), (2, 5, 16), fully_plait=True)
    assert s.get("regions", 0) >= 4, s
