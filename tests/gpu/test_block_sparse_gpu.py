"""Tier 2: block-sparse attention (an int32 mask of 128 x 128 blocks, read through
`blocked`) on the GPU, forward and the derived backward over the forward's saved
log-sum-exp, against float64 attention with the mask expanded, at odd shapes with query
blocks that see nothing and key blocks nobody sees."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from attention import block_sparse_attention  # noqa: E402

import plait  # noqa: E402
from plait.autodiff import forward_with_saved, grad  # noqa: E402

SAVE = ("out", "lse")
TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _case(B, H, S, T, D, dtype, density, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, S, D, generator=gen, device="cuda").to(dtype)
    k, v = (torch.randn(B, H, T, D, generator=gen, device="cuda").to(dtype) for _ in "kv")
    nq, nk = -(-S // 128), -(-T // 128)
    blocks = (torch.rand(B, H, nq, nk, generator=gen, device="cuda") < density).int()
    blocks[0, 0, nq // 2] = 0                 # a query block that sees no key
    blocks[-1, -1, :, nk - 1] = 0             # a key block no query sees
    blocks[-1, -1, 0, 0] = 1
    return q, k, v, blocks


def _reference(q, k, v, blocks, dout):
    """float64 out, dq, dk, dv; a row with no kept key gives 0 and passes no gradient."""
    S, T = q.shape[-2], k.shape[-2]
    keep = blocks.repeat_interleave(128, -2).repeat_interleave(128, -1)[..., :S, :T] != 0
    seen = keep.any(-1, keepdim=True)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    s = torch.matmul(leaves[0], leaves[1].transpose(-1, -2)) * 0.125
    s = s.masked_fill(~keep, float("-inf")).masked_fill(~seen, 0.0)
    out = torch.matmul(torch.softmax(s, -1), leaves[2]) * seen
    return (out.detach(), *torch.autograd.grad(out, leaves, dout.double()))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("B,H,S,T,D,density", [(1, 2, 1000, 1337, 96, 0.3),
                                               (2, 2, 777, 777, 64, 0.5),
                                               (1, 3, 512, 1500, 128, 0.1)])
def test_block_sparse_forward_and_backward_match_float64(B, H, S, T, D, density, dtype):
    q, k, v, blocks = _case(B, H, S, T, D, dtype, density, seed=S + T)
    dout = torch.randn_like(q)
    want = _reference(q, k, v, blocks, dout)
    saved = plait.run(forward_with_saved(block_sparse_attention, SAVE), q, k, v, blocks)
    bwd = grad(block_sparse_attention, wrt=["q", "k", "v"], save=SAVE)
    got = plait.run(bwd, q, k, v, blocks, dout=dout, **saved)
    have = (saved["out"], got["dq"], got["dk"], got["dv"])
    for name, h, w in zip(("out", "dq", "dk", "dv"), have, want):
        h = h.double()
        assert not h.isnan().any(), name
        top = max(1.0, w.abs().max().item())
        assert (h - w).abs().max().item() < TOL[dtype] * top, name
    lo = 128 * (-(-S // 128) // 2)
    assert (saved["out"][0, 0, lo:lo + 128] == 0).all()
    assert torch.isinf(saved["lse"][0, 0, lo:min(lo + 128, S)]).all()
    last = 128 * (-(-T // 128) - 1)
    assert (got["dk"][-1, -1, last:] == 0).all() and (got["dv"][-1, -1, last:] == 0).all()


def test_an_empty_block_mask_gives_zeros():
    q, k, v, blocks = _case(1, 2, 300, 400, 64, torch.bfloat16, 0.5, seed=3)
    out = plait.run(block_sparse_attention, q, k, v, torch.zeros_like(blocks))
    assert (out == 0).all()


def test_fp32_runs_unstreamed_with_the_block_mask():
    """fp32 q, k, v run as three plain kernels (the scores in memory): the softmax kernel
    reads the block mask element by element."""
    q, k, v, blocks = _case(1, 2, 500, 700, 64, torch.float32, 0.5, seed=4)
    blocks[..., 0] = 1                        # every row sees a key: no NaN rows
    out = plait.run(block_sparse_attention, q, k, v, blocks)
    want = _reference(q, k, v, blocks, torch.zeros_like(q))[0]
    assert (out.double() - want).abs().max().item() < 1e-4
