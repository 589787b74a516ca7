"""torch.compile(backend="plait") at several sizes in one process (dynamic shapes), as the
CPU and GPU tests check it: plait regions run at every call, each size compiles once, and
values and gradients match eager torch in float64."""
import copy

import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402


def _delta(before: dict) -> dict:
    after = backend.stats()
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}


def step(compiled, ref, x, tol, dynamic_dims=()) -> dict:
    """One training step of `compiled` on x (its `dynamic_dims` marked dynamic) against
    `ref` (float64 eager); returns what the backend counted during it."""
    before = dict(backend.stats())
    params = list(compiled.parameters()) if hasattr(compiled, "parameters") else []
    for p in params:
        p.grad = None
    x = x.detach().requires_grad_()
    for d in dynamic_dims:
        torch._dynamo.mark_dynamic(x, d)
    y = compiled(x)
    dy = torch.randn(y.shape, dtype=torch.float64, device=x.device)
    (y * dy.to(y.dtype)).sum().backward()
    x_ref = x.detach().double().requires_grad_()
    for p in ref.parameters():
        p.grad = None
    y_ref = ref(x_ref)
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y.double(), y_ref, **tol)
    torch.testing.assert_close(x.grad.double(), x_ref.grad, **tol)
    for (name, p), p_ref in zip(compiled.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.double(), p_ref.grad, **tol, msg=name)
    return _delta(before)


def check_lengths(model, make_input, lengths, tol, **compile_kw):
    """The model compiled once, called at each length in `lengths` and then at each again:
    every call runs as many plait regions as the first (none falls back that ran at the
    first size), and the second round compiles nothing."""
    ref = copy.deepcopy(model).double()
    compiled = torch.compile(model, backend="plait", **compile_kw)
    first = [step(compiled, ref, make_input(n), tol) for n in lengths]
    calls = first[0].get("region_calls", 0)
    assert calls > 0, first[0]
    for n, d in zip(lengths, first):
        assert d.get("region_calls", 0) == calls, (n, d)        # plait at every size
        # each region that ran compiled at most once for this size (fewer where a region
        # of the same structure was compiled before, in this test or an earlier one)
        assert d.get("regions_compiled", 0) <= d.get("region_calls", 0), (n, d)
    again = [step(compiled, ref, make_input(n), tol) for n in lengths]
    for n, d in zip(lengths, again):
        assert d.get("region_calls", 0) == calls, (n, d)
        assert d.get("regions_compiled", 0) == 0, (n, d)         # a size compiles once
    return first, again
