"""F.scaled_dot_product_attention under torch.compile(backend="plait") on the CPU executor:
rewritten to softmax(q k^T * scale + bias) v before AOTAutograd (fx_attention), so plait
takes forward and backward. Against eager SDPA in float64: causal, bool and additive
masks, grouped-query heads, T != S, an explicit scale; sizes no tile divides."""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import plait.runtime.torch_backend as backend  # noqa: E402
from plait.runtime.fx_attention import attention_as_math, sdpa_math  # noqa: E402

TOL = dict(rtol=2e-4, atol=2e-5)


pytestmark = pytest.mark.usefixtures("fresh_backend")


def _check(fn, shapes, extra=()):
    torch.manual_seed(5)
    xs = [torch.randn(*s, requires_grad=True) for s in shapes]
    xs_ref = [x.detach().double().requires_grad_() for x in xs]
    y = torch.compile(fn, backend="plait", options={"cpu": True})(*xs, *extra)
    y_ref = fn(*xs_ref, *(e.double() if e.is_floating_point() else e for e in extra))
    dy = torch.randn(y.shape, dtype=torch.float64)
    (y * dy.float()).sum().backward()
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y.double(), y_ref, **TOL)
    for x, x_ref in zip(xs, xs_ref):
        torch.testing.assert_close(x.grad.double(), x_ref.grad, **TOL)
    s = backend.stats()
    assert s.get("fallback_calls", 0) == 0 and s.get("regions_refused", 0) == 0, s
    # forward and backward each one region: the attention did not cut them
    assert s.get("regions", 0) == 2, s
    return s


def test_causal_self_attention_from_one_projection():
    """q, k and v cut from one tensor: q's and k's positions are the same torch dim, two
    axes in plait (fx_axes renames k's)."""
    def f(x):
        q, k, v = (x * 1.0).split(5, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 1.5
    _check(f, [(2, 3, 9, 15)])


def test_cross_attention_with_bool_mask():
    mask = torch.rand(11, 6) > 0.3
    mask[:, 0] = True                           # no row fully masked (NaN in torch too)

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q * 1.0, k, v, attn_mask=m)
    _check(f, [(2, 11, 7), (2, 6, 7), (2, 6, 5)], (mask,))


def test_additive_mask_and_scale():
    bias = torch.randn(3, 1, 8, 8)

    def f(q, k, v, b):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=b, scale=0.3) + q
    _check(f, [(3, 2, 8, 4)] * 3, (bias,))


def test_grouped_query_heads():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) * q
    _check(f, [(2, 6, 7, 5), (2, 2, 7, 5), (2, 2, 7, 5)])


def test_dropout_is_left_to_torch():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    gm = torch.fx.symbolic_trace(f)
    targets = [n.target for n in attention_as_math(gm).graph.nodes if n.op == "call_function"]
    assert sdpa_math not in targets and F.scaled_dot_product_attention in targets


def test_grouped_query_heads_with_per_head_mask():
    mask = torch.rand(2, 6, 5, 9) > 0.4
    mask[..., 0] = True

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
    _check(f, [(2, 6, 5, 4), (2, 3, 9, 4), (2, 3, 9, 7)], (mask,))
