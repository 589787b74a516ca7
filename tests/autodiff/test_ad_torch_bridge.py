"""to_torch: argument checks (no torch needed) and autograd through plait.run (torch only)."""
from dataclasses import dataclass, field

import numpy as np
import pytest

from ad_cases import layernorm, two_outputs
from plait.autodiff.torch_bridge import bind_arguments
from plait.dsl import PlaitError, Tensor, algorithm, cast


@dataclass
class FakeDevice:
    type: str
    index: int = 0

    def __str__(self):
        return f"{self.type}:{self.index}"


@dataclass
class FakeTensor:
    """Quacks like a torch tensor for the checks: dtype, device, requires_grad, ndim."""
    ndim: int
    dtype: str = "float32"
    device: FakeDevice = field(default_factory=lambda: FakeDevice("cuda"))
    requires_grad: bool = False

    def item(self):
        return 0.5


def _bind(*args, wrt=("x", "w", "b"), algo=layernorm, **kwargs):
    return bind_arguments(algo, list(wrt), args, kwargs, lambda v: isinstance(v, FakeTensor))


def test_good_arguments_bind_in_order_with_defaults():
    x, w, b = FakeTensor(2, requires_grad=True), FakeTensor(1), FakeTensor(1, "bfloat16")
    assert _bind(x, w, b) == [x, w, b, 1e-5]
    assert _bind(x, w, b=b, eps=0.1) == [x, w, b, 0.1]


def test_non_tensor_is_refused_by_name():
    with pytest.raises(PlaitError, match=r"'w' is declared Tensor\['N'\].*not list"):
        _bind(FakeTensor(2), [1.0, 2.0], FakeTensor(1))


def test_wrong_rank_is_refused():
    with pytest.raises(PlaitError, match=r"'x'.*2 axes\) but has 1"):
        _bind(FakeTensor(1), FakeTensor(1), FakeTensor(1))


def test_unknown_dtype_is_refused():
    with pytest.raises(PlaitError, match=r"'x' is float64"):
        _bind(FakeTensor(2, "float64"), FakeTensor(1), FakeTensor(1))


def test_requires_grad_outside_wrt_is_refused():
    with pytest.raises(PlaitError, match=r"'b' requires grad.*only x, w; add it to wrt="):
        _bind(FakeTensor(2), FakeTensor(1), FakeTensor(1, requires_grad=True), wrt=("x", "w"))


def test_requires_grad_on_an_integer_tensor_is_refused():
    @algorithm
    def idx(x: Tensor["M"], i: Tensor["M", "int32"]):
        return x * cast(i, "fp32")

    with pytest.raises(PlaitError, match=r"'i' requires grad but is int32"):
        _bind(FakeTensor(1), FakeTensor(1, "int32", requires_grad=True), algo=idx, wrt=("x",))


def test_mixed_or_unsupported_devices_are_refused():
    with pytest.raises(PlaitError, match=r"one device \(x on cuda:0, w on cpu:0"):
        _bind(FakeTensor(2), FakeTensor(1, device=FakeDevice("cpu")), FakeTensor(1))
    meta = FakeDevice("meta")
    with pytest.raises(PlaitError, match=r"x is on meta:0"):
        _bind(FakeTensor(2, device=meta), FakeTensor(1, device=meta), FakeTensor(1, device=meta))


def test_scalars_must_be_numbers():
    x, w, b = FakeTensor(2), FakeTensor(1), FakeTensor(1)
    with pytest.raises(PlaitError, match=r"'eps' is a scalar; pass a Python number, not str"):
        _bind(x, w, b, "0.1")
    with pytest.raises(PlaitError, match=r"'eps' is a scalar.*not differentiated"):
        _bind(x, w, b, FakeTensor(0, requires_grad=True))
    assert _bind(x, w, b, FakeTensor(0))[3] == 0.5  # a 0-d tensor without grad is its value


def test_missing_and_extra_arguments_are_refused():
    with pytest.raises(PlaitError, match=r"missing argument 'b'"):
        _bind(FakeTensor(2), FakeTensor(1))
    with pytest.raises(PlaitError, match=r"no argument 'bias'"):
        _bind(FakeTensor(2), FakeTensor(1), bias=FakeTensor(1))


# ---- with torch: autograd through a stand-in for plait.run (the reference evaluator)
def _reference_run(torch):
    from plait.dsl import evaluate

    def run(algo, *args, schedule=None, device="auto", **scalars):
        names = [p.name for p in algo.params]
        values = {n: (a.detach().cpu().double().numpy() if isinstance(a, torch.Tensor) else a)
                  for n, a in zip(names, args)}
        out = evaluate(algo.graph(), {**values, **scalars})
        like = next(a for a in args if isinstance(a, torch.Tensor))
        return {k: torch.as_tensor(np.array(v), dtype=like.dtype, device=like.device)
                for k, v in out.items()}
    return run


def test_torch_autograd_matches_torch_layernorm(monkeypatch):
    torch = pytest.importorskip("torch")
    import plait
    from plait.autodiff import to_torch
    monkeypatch.setattr(plait, "run", _reference_run(torch))
    x = torch.randn(7, 13, dtype=torch.float32, requires_grad=True)
    w = torch.randn(13, requires_grad=True)
    b = torch.randn(13, requires_grad=True)
    f = to_torch(layernorm)
    y = f(x, w, b)
    dy = torch.randn(7, 13)
    y.backward(dy)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    torch.nn.functional.layer_norm(x2, (13,), w2, b2, eps=1e-5).backward(dy)
    for got, want in ((y, None), (x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_torch_multiple_outputs_and_partial_wrt(monkeypatch):
    torch = pytest.importorskip("torch")
    import plait
    from plait.autodiff import to_torch
    monkeypatch.setattr(plait, "run", _reference_run(torch))
    x = torch.randn(7, 13, requires_grad=True)
    w = torch.randn(13)
    h, s = to_torch(two_outputs, wrt=["x"])(x, w)
    (h.sum() + 2 * s.sum()).backward()
    ref = torch.tanh(x.detach() * w)
    torch.testing.assert_close(x.grad, 3 * (1 - ref ** 2) * w)
    with pytest.raises(PlaitError, match="'w' requires grad"):
        to_torch(two_outputs, wrt=["x"])(x, w.requires_grad_())
