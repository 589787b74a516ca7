"""A GPT-2-style model under torch.compile(backend="plait", options={"cpu": True}) against
eager torch in float64: the loss (cross-entropy over int64 targets), the block's output
and every parameter's gradient. The region counts are upper bounds that record today's
coverage: each op plait learns to take joins regions, and the bound comes down with it."""
import copy

import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402

from backend_models import GPT2, GPT2Block  # noqa: E402

TOL = dict(rtol=2e-4, atol=2e-5)     # fp32 (plait) against float64 (eager)
B, T, C, H, V = 2, 7, 48, 4, 97

# regions written as plait (forward + backward graphs); no region may fall back to torch
GPT2_MAX_REGIONS = 2
BLOCK_MAX_REGIONS = 2


pytestmark = pytest.mark.usefixtures("fresh_backend")


def _compiled(model):
    return torch.compile(model, backend="plait", options={"cpu": True})


def _compare_grads(model, ref):
    for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad.double(), p_ref.grad, **TOL, msg=name)


def _coverage(max_regions):
    s = backend.stats()
    assert s.get("region_calls", 0) >= 2, s
    assert s.get("fallback_calls", 0) == 0 and s.get("regions_refused", 0) == 0, s
    assert s.get("regions", 0) <= max_regions, s
    return s


def test_gpt2_loss_and_parameter_grads():
    torch.manual_seed(1)
    model = GPT2(V, T, C, H)
    ref = copy.deepcopy(model).double()
    idx, targets = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
    loss = _compiled(model)(idx, targets)
    loss_ref = ref(idx, targets)
    loss.backward()
    loss_ref.backward()
    torch.testing.assert_close(loss.double(), loss_ref, **TOL)
    _compare_grads(model, ref)
    _coverage(GPT2_MAX_REGIONS)


def test_gpt2_block_output_and_grads():
    torch.manual_seed(2)
    model = GPT2Block(C, H)
    ref = copy.deepcopy(model).double()
    x = torch.randn(B, T, C, requires_grad=True)
    x_ref = x.detach().double().requires_grad_()
    y, y_ref = _compiled(model)(x), ref(x_ref)
    dy = torch.randn(y.shape, dtype=torch.float64)
    (y * dy.float()).sum().backward()
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y.double(), y_ref, **TOL)
    torch.testing.assert_close(x.grad.double(), x_ref.grad, **TOL)
    _compare_grads(model, ref)
    _coverage(BLOCK_MAX_REGIONS)
