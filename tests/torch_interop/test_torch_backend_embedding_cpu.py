"""Embedding lookups (int64 / int32 indices) inside plait regions as `take`, against float64
eager: the rows read, the ops after them in the same region, and the table's gradient
(embedding_dense_backward stays with torch)."""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import plait.runtime.torch_backend as backend  # noqa: E402

TOL = dict(rtol=2e-4, atol=2e-5)


pytestmark = pytest.mark.usefixtures("fresh_backend")


def _check(fn, idx, *shapes):
    torch.manual_seed(6)
    ws = [torch.randn(*s, requires_grad=True) for s in shapes]
    ws_ref = [w.detach().double().requires_grad_() for w in ws]
    y = torch.compile(fn, backend="plait", options={"cpu": True})(idx, *ws)
    y_ref = fn(idx, *ws_ref)
    dy = torch.randn(y.shape, dtype=torch.float64)
    (y * dy.float()).sum().backward()
    (y_ref * dy).sum().backward()
    torch.testing.assert_close(y.double(), y_ref, **TOL)
    for w, w_ref in zip(ws, ws_ref):
        torch.testing.assert_close(w.grad.double(), w_ref.grad, **TOL)
    s = backend.stats()
    assert s.get("fallback_calls", 0) == 0 and s.get("regions_refused", 0) == 0, s
    return s


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_token_and_position_embeddings(dtype):
    torch.manual_seed(7)
    idx = torch.randint(0, 97, (3, 37), dtype=dtype)
    idx[0, :5] = 96                                   # repeated rows, the last row
    pos = torch.arange(37)

    def f(i, tok, ps):
        return torch.tanh(F.embedding(i, tok) + F.embedding(pos, ps)) * 2.0
    s = _check(f, idx, (97, 48), (37, 48))
    assert s.get("regions", 0) >= 1


def test_embedding_with_padding_idx_feeds_a_matmul():
    idx = torch.randint(0, 29, (5, 9))
    idx[:, 0] = 3

    def f(i, tok, w):
        return F.embedding(i, tok, padding_idx=3) @ w
    _check(f, idx, (29, 13), (13, 11))
