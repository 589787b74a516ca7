"""Tier 2: streamed attention on wgmma (PLAIT_STREAM_WGMMA=1) on an sm_90 GPU against
torch's float32 math-backend SDPA from the same bf16/fp16 inputs, at odd shapes, masked,
grouped, and through the derived backward; and no worse than three times the error of
torch's own kernel in the input dtype (a dropped or misplaced tile fails that)."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from attention import (attention, causal_attention, causal_grouped_query_attention,  # noqa: E402
                       grouped_query_attention, sliding_window_attention)

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402
from plait.lowering.target import STREAM_WGMMA_SWITCH  # noqa: E402

F = torch.nn.functional
TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}
PEER_FACTOR = 3.0
SHAPES = [(1, 2, 1000, 1337, 64), (2, 2, 256, 256, 128), (1, 2, 384, 1000, 128),
          (1, 3, 1000, 384, 64), (1, 1, 77, 130, 128)]


@pytest.fixture(autouse=True)
def wgmma(monkeypatch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU")
    monkeypatch.setenv(STREAM_WGMMA_SWITCH, "1")


def _mask(name, S, T, device):
    s = torch.arange(S, device=device)[:, None]
    t = torch.arange(T, device=device)[None, :]
    if name in ("causal_attention", "causal_grouped_query_attention"):
        return t <= s
    if name == "sliding_window_attention":
        return (t <= s) & (s - t < 256)
    return None


def _torch(name, q, k, v, exact):
    """torch's attention over [B, H, S, D] (grouped: k, v repeated per query head)."""
    if exact:
        q, k, v = q.float(), k.float(), v.float()
    if q.dim() == 5:                      # [B, G, R, S, D]
        b, g, r = q.shape[:3]
        out = _torch(name.replace("grouped_query_", ""), q.reshape(b, g * r, *q.shape[3:]),
                     k.repeat_interleave(r, 1), v.repeat_interleave(r, 1), exact)
        return out.reshape(q.shape[:-1] + (v.shape[-1],))
    mask = _mask(name, q.shape[-2], k.shape[-2], q.device)
    if exact:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)


def _close(out, ref, peer, dtype):
    torch.testing.assert_close(out.float(), ref, atol=TOL[dtype], rtol=TOL[dtype])
    err = (out.float() - ref).abs().max().item()
    peer_err = (peer.float() - ref).abs().max().item()
    assert err <= PEER_FACTOR * peer_err + 1e-4, f"max error {err:.3g}, torch's {peer_err:.3g}"


def _on_wgmma(handle) -> bool:
    return any("wgmma.mma_async" in k.ptx for k in handle.program.kernels)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("algo", [attention, causal_attention, sliding_window_attention],
                         ids=lambda a: a.name)
def test_forward_on_wgmma_matches_sdpa(algo, shape, dtype):
    B, H, S, T, D = shape
    gen = torch.Generator(device="cuda").manual_seed(S * 7 + T + D)
    q, k, v = (torch.randn(B, H, n, D, generator=gen, device="cuda").to(dtype)
               for n in (S, T, T))
    handle = plait.compile(algo, like=(q, k, v))
    out = handle(q, k, v)
    torch.cuda.synchronize()
    assert _on_wgmma(handle)
    _close(out, _torch(algo.name, q, k, v, True), _torch(algo.name, q, k, v, False), dtype)


@pytest.mark.parametrize("algo", [grouped_query_attention, causal_grouped_query_attention],
                         ids=lambda a: a.name)
def test_grouped_queries_on_wgmma(algo):
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(1, 2, 3, 300, 128, generator=gen, device="cuda").bfloat16()
    k, v = (torch.randn(1, 2, 333, 128, generator=gen, device="cuda").bfloat16()
            for _ in range(2))
    handle = plait.compile(algo, like=(q, k, v))
    out = handle(q, k, v)
    assert _on_wgmma(handle)
    _close(out, _torch(algo.name, q, k, v, True), _torch(algo.name, q, k, v, False),
           torch.bfloat16)


@pytest.mark.parametrize("D", [64, 128])
def test_derived_backward_on_wgmma_matches_torch(D):
    gen = torch.Generator(device="cuda").manual_seed(D)
    q, k, v = (torch.randn(1, 2, n, D, generator=gen, device="cuda").bfloat16()
               for n in (300, 333, 333))
    dout = torch.randn(1, 2, 300, D, generator=gen, device="cuda").bfloat16()
    leaves = [x.float().requires_grad_() for x in (q, k, v)]
    ref = _torch("causal_attention", *leaves, True)
    want = torch.autograd.grad(ref, leaves, dout.float())
    bwd = grad(causal_attention, wrt=["q", "k", "v"], save=("out",))
    got = plait.run(bwd, q, k, v, scale=0.125, dout=dout, out=ref.detach().bfloat16())
    torch.cuda.synchronize()
    for name, exp in zip("qkv", want):
        have = got[f"d{name}"].float()
        assert not have.isnan().any(), name
        top = exp.abs().max().item()
        torch.testing.assert_close(have, exp, atol=3e-2 * top, rtol=3e-2,
                                   msg=lambda m, n=name: f"d{n}: {m}")
