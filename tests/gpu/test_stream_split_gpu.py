"""Tier 2: streamed attention split along its keys (by default) on the GPU,
decoding shapes (a few query rows over long keys), against torch's float32 math-backend
SDPA from the same inputs, on mma.sync and (sm_90) on wgmma; a dropped or doubled key
range fails the peer-relative bound."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from attention import attention, causal_attention, grouped_query_attention  # noqa: E402

import plait  # noqa: E402
from plait.lowering.graph.stream_split import SWITCH  # noqa: E402
from plait.lowering.target import STREAM_WGMMA_SWITCH  # noqa: E402

F = torch.nn.functional
SHAPES = [(1, 2, 1, 4099, 64), (2, 4, 5, 20000, 128), (1, 1, 16, 3001, 128)]


def _sdpa(q, k, v, causal, exact):
    if exact:
        q, k, v = q.float(), k.float(), v.float()
    mask = None
    if causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if exact:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)


@pytest.mark.parametrize("instruction", ["mma_sync", "wgmma"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_split_attention_matches_sdpa(monkeypatch, shape, causal, instruction):
    if instruction == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU")
    monkeypatch.setenv(SWITCH, "1")
    monkeypatch.setenv(STREAM_WGMMA_SWITCH, "1" if instruction == "wgmma" else "0")
    B, H, S, T, D = shape
    gen = torch.Generator(device="cuda").manual_seed(S + T + D)
    q, k, v = (torch.randn(B, H, n, D, generator=gen, device="cuda").bfloat16()
               for n in (S, T, T))
    algo = causal_attention if causal else attention
    handle = plait.compile(algo, like=(q, k, v))
    out = handle(q, k, v)
    torch.cuda.synchronize()
    assert any(kernel.name.endswith(".finish") for kernel in handle.program.kernels)
    ref, peer = _sdpa(q, k, v, causal, True), _sdpa(q, k, v, causal, False)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    err = (out.float() - ref).abs().max().item()
    peer_err = (peer.float() - ref).abs().max().item()
    assert err <= 3.0 * peer_err + 1e-4, f"max error {err:.3g}, torch's {peer_err:.3g}"


def test_split_grouped_decoding(monkeypatch):
    monkeypatch.setenv(SWITCH, "1")
    gen = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(4, 8, 4, 1, 128, generator=gen, device="cuda").bfloat16()
    k, v = (torch.randn(4, 8, 9000, 128, generator=gen, device="cuda").bfloat16()
            for _ in range(2))
    out = plait.run(grouped_query_attention, q, k, v)
    b, g, r = q.shape[:3]
    ref = _sdpa(q.reshape(b, g * r, 1, 128), k.repeat_interleave(r, 1),
                v.repeat_interleave(r, 1), False, True).reshape(out.shape)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
