"""split / chunk / slicing / cat inside plait regions (slice, pad, concat): compiled with
the CPU executor against float64 eager, forward and gradients (a split's gradient is a
cat, a slice's is slice_backward: a pad with zeros), at sizes no tile divides."""
import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402

TOL = dict(rtol=2e-4, atol=2e-5)


pytestmark = pytest.mark.usefixtures("fresh_backend")


def _check(fn, *shapes):
    torch.manual_seed(4)
    xs = [torch.randn(*s, requires_grad=True) for s in shapes]
    xs_ref = [x.detach().double().requires_grad_() for x in xs]
    y = torch.compile(fn, backend="plait", options={"cpu": True})(*xs)
    y_ref = fn(*xs_ref)
    dy = torch.randn(y.shape, dtype=torch.float64)
    (y * dy.float()).sum().backward()
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y.double(), y_ref, **TOL)
    for x, x_ref in zip(xs, xs_ref):
        torch.testing.assert_close(x.grad.double(), x_ref.grad, **TOL)
    return backend.stats()


def _fully_plait(s, regions=2):
    assert s.get("fallback_calls", 0) == 0 and s.get("regions_refused", 0) == 0, s
    assert s.get("regions", 0) == regions, s


def test_split_qkv_and_recombine():
    def f(x):
        q, k, v = x.split(13, dim=-1)
        return torch.cat([torch.tanh(q) * k, v * 2.0 - k], -1) + x[..., 5:31]
    _fully_plait(_check(f, (3, 37, 39)))


def test_chunk_rows_and_slice_middle():
    def f(x, w):
        a, b = x.chunk(2, dim=0)                        # 7 rows: chunks of 4 and 3
        return torch.sigmoid(a[1:, 2:9]) * b[:, 1:8] + w[3:10]
    _fully_plait(_check(f, (7, 11), (12,)))


def test_uneven_split_with_sizes():
    def f(x):
        a, b, c = torch.split(x, [5, 17, 9], dim=1)
        return torch.cat([c * c, a.exp(), b * 0.5], 1) - x
    _fully_plait(_check(f, (4, 31, 3)))


def test_step_slice_stays_with_torch():
    def f(x):
        return torch.exp(x[:, ::2]) * 3.0
    s = _check(f, (5, 12))
    assert s.get("fallback_calls", 0) == 0, s          # the slice is torch's; exp, mul plait's


def test_cat_of_a_broadcast_runs_as_torch_would():
    """An expand to an axis no region input has, inside a cat, cannot be sized: the
    region is refused and torch runs it (values still right)."""
    def f(x):
        return torch.cat([x * 2.0, x.sum(-1, keepdim=True).expand(-1, 4)], -1)
    _check(f, (6, 9))
