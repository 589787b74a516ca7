"""Reshapes that merge or split dims stay inside plait regions (merge_axes / split_axis)
instead of cutting them: compiled with the CPU executor against float64 eager, forward
and gradients, at sizes that are no multiple of a tile."""
import copy

import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402
from plait.runtime.fx_axes import view_groups  # noqa: E402

TOL = dict(rtol=2e-4, atol=2e-5)


pytestmark = pytest.mark.usefixtures("fresh_backend")


def _check(model, *shapes, regions=1):
    torch.manual_seed(3)
    xs = [torch.randn(*s, requires_grad=True) for s in shapes]
    ref = copy.deepcopy(model).double()
    xs_ref = [x.detach().double().requires_grad_() for x in xs]
    y = torch.compile(model, backend="plait", options={"cpu": True})(*xs)
    y_ref = ref(*xs_ref)
    dy = torch.randn(y.shape, dtype=torch.float64)
    (y * dy.float()).sum().backward()
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y.double(), y_ref, **TOL)
    for x, x_ref in zip(xs, xs_ref):
        torch.testing.assert_close(x.grad.double(), x_ref.grad, **TOL)
    for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.double(), p_ref.grad, **TOL, msg=name)
    s = backend.stats()
    assert s.get("fallback_calls", 0) == 0 and s.get("regions_refused", 0) == 0, s
    # one region per graph (forward, backward): the reshapes did not cut them
    assert s.get("regions", 0) == 2 * regions, s


class MergeRows(torch.nn.Module):
    """[B, T, C] -> [B*T, C] for a matmul, then back to [B, T, N]."""
    def __init__(self, c, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(c, n) * 0.3)

    def forward(self, x):
        b, t, c = x.shape
        return torch.tanh(x.reshape(b * t, c) @ self.w).view(b, t, -1) * 1.5 + x.sum(-1, True)


class SplitHeads(torch.nn.Module):
    """[B, T, C] -> [B, T, H, D] -> transpose -> per-head softmax -> back to [B, T, C]."""
    def __init__(self, heads):
        super().__init__()
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        h = x.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        p = torch.softmax(h * 0.7, dim=-2)             # over T, within each head
        return p.transpose(1, 2).reshape(b, t, c) * x


class MergeThree(torch.nn.Module):
    """A permuted input merged over three dims and split again into other groups."""
    def forward(self, x):
        a, b, c = x.shape
        y = torch.sigmoid(x.permute(2, 0, 1)).reshape(c, a * b)
        return (y * y.sum(0, keepdim=True)).reshape(c, a, b).permute(1, 2, 0) - x


def test_view_groups():
    assert view_groups((2, 7, 48), (14, 48)) == [((0, 1), (0,)), ((2,), (1,))]
    assert view_groups((2, 7, 48), (2, 7, 4, 12)) == [((0,), (0,)), ((1,), (1,)),
                                                      ((2,), (2, 3))]
    assert view_groups((1, 6, 1, 5), (30,)) == [((1, 3), (0,))]
    assert view_groups((6, 4), (4, 6)) is None            # neither a merge nor a split
    assert view_groups((6, 4), (2, 12)) is None


def test_merge_for_matmul_and_split_back():
    _check(MergeRows(13, 9), (3, 37, 13))


def test_split_heads_transpose_and_merge_back():
    _check(SplitHeads(3), (2, 11, 21))


def test_merge_three_dims_of_permuted_input():
    _check(MergeThree(), (5, 3, 7))


def test_regrouping_reshape_stays_with_torch():
    class Regroup(torch.nn.Module):
        def forward(self, x):
            return torch.exp(x).view(4, 6) * 2.0
    x = torch.randn(6, 4)
    y = torch.compile(Regroup(), backend="plait", options={"cpu": True})(x)
    torch.testing.assert_close(y, Regroup()(x))
    assert backend.stats().get("fallback_calls", 0) == 0
