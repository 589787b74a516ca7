"""Tier 2: examples/attention.py on the GPU against torch's SDPA (math backend, float32
from the same bf16/fp16 inputs), at odd shapes, cross attention (S != T) included.

Two checks per case: torch.testing.assert_close with what a bf16/fp16 flash kernel meets
on unit-variance inputs scaled 0.125, and no worse than three times the error of torch's
own kernel in the input dtype (FlashAttention's test criterion), which catches a dropped
key tile that the absolute tolerance alone would let through.
"""
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from attention import (attention, causal_attention, document_attention,  # noqa: E402
                       sliding_window_attention, softcap_attention, varlen_attention)

import plait  # noqa: E402

F = torch.nn.functional
ALGOS = {a.name: a for a in (attention, causal_attention, sliding_window_attention,
                             softcap_attention)}
SHAPES = [(1, 2, 1000, 1337, 96), (1, 2, 256, 256, 64), (1, 2, 256, 256, 128),
          (1, 2, 384, 1000, 64), (1, 2, 384, 1000, 128), (1, 2, 1000, 384, 128)]
TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}      # atol = rtol
# plait's max error over torch's, both against the float32 reference. Today's unfused
# kernels (scores stored in bf16) reach about 2.6 on the CPU executor at S61 T97 D64.
PEER_FACTOR = 3.0


def _keep(name, S, T, window, device):
    """The mask as torch's attn_mask (True: attend), or None."""
    if name not in ("causal_attention", "sliding_window_attention"):
        return None
    s = torch.arange(S, device=device)[:, None]
    t = torch.arange(T, device=device)[None, :]
    keep = t <= s
    return keep & (s - t < window) if name == "sliding_window_attention" else keep


def torch_attention(name, q, k, v, scalars, exact: bool):
    """The algorithm through torch: exact=True is the float32 math-backend reference,
    exact=False torch's own kernel in the input dtype (the peer a flash kernel is held to)."""
    scale = scalars.get("scale", 0.125)
    if exact:
        q, k, v = q.float(), k.float(), v.float()
    if name == "softcap_attention":    # SDPA takes no score modifier: written out
        cap = scalars.get("cap", 30.0)
        s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
        p = torch.softmax(cap * torch.tanh(s / cap), dim=-1)
        return torch.matmul(p.to(v.dtype), v)
    mask = _keep(name, q.shape[-2], k.shape[-2], scalars.get("window", 256), q.device)
    if exact:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def _inputs(B, H, S, T, D, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def r(n):
        return torch.randn(B, H, n, D, generator=gen, device="cuda").to(dtype)
    return r(S), r(T), r(T)


def _check(name, shape, dtype, scalars):
    q, k, v = _inputs(*shape, dtype, seed=31 * sum(shape) + len(name))
    out = plait.run(ALGOS[name], q, k, v, **scalars)
    torch.cuda.synchronize()
    assert out.dtype == dtype and out.shape == q.shape
    ref = torch_attention(name, q, k, v, scalars, exact=True)
    peer = torch_attention(name, q, k, v, scalars, exact=False)
    tol = TOL[dtype]
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)
    err = (out.float() - ref).abs().max().item()
    peer_err = (peer.float() - ref).abs().max().item()
    assert err <= PEER_FACTOR * peer_err + 1e-4, f"max error {err:.3g}, torch's {peer_err:.3g}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}S{}T{}D{}".format(*s))
@pytest.mark.parametrize("name", sorted(ALGOS))
def test_attention_matches_sdpa(name, shape, dtype):
    _check(name, shape, dtype, {})


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name,scalars", [
    ("attention", {"scale": 1 / math.sqrt(96)}),
    ("sliding_window_attention", {"window": 37}),       # a window inside one key tile's span
    ("sliding_window_attention", {"window": 1}),        # each query sees its own key only
    ("softcap_attention", {"cap": 2.0}),                # a cap that bites
], ids=lambda v: ",".join(f"{k}={x:g}" for k, x in v.items()) if isinstance(v, dict) else v)
def test_scalars_reach_the_kernel(name, scalars, dtype):
    _check(name, (1, 2, 1000, 1337, 96), dtype, scalars)


def _document_ids(B, S, documents, seed):
    """[B, S] int32, sorted: `documents` documents of random lengths per row."""
    gen = torch.Generator().manual_seed(seed)
    rows = [torch.randperm(S - 1, generator=gen)[:documents - 1].sort().values + 1
            for _ in range(B)]
    return torch.stack([torch.bucketize(torch.arange(S), cuts, right=True) for cuts in rows]
                       ).to(device="cuda", dtype=torch.int32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("B,S,D,documents", [(2, 1000, 96, 5), (1, 777, 128, 1), (1, 1337, 64, 40)])
def test_document_attention_matches_sdpa_with_the_mask(B, S, D, documents, dtype):
    """Packed sequences: causal within each document, against SDPA given the [B, 1, S, S]
    boolean mask (one document: plain causal attention)."""
    q, k, v = _inputs(B, 2, S, S, D, dtype, seed=S + documents)
    ids = _document_ids(B, S, documents, seed=documents)
    out = plait.run(document_attention, q, k, v, ids, ids)
    pos = torch.arange(S, device="cuda")
    keep = (pos[None, :] <= pos[:, None]) & (ids[:, None, :, None] == ids[:, None, None, :])
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=keep,
                                             scale=0.125)
    peer = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.125)
    torch.testing.assert_close(out.float(), ref, atol=TOL[dtype], rtol=TOL[dtype])
    err, peer_err = ((x.float() - ref).abs().max().item() for x in (out, peer))
    assert err <= PEER_FACTOR * peer_err + 1e-4, f"max error {err:.3g}, torch's {peer_err:.3g}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("lengths_q,lengths_k,D", [([700, 1, 333, 951], [640, 90, 0, 1200], 64),
                                                   ([1000, 337], [1000, 337], 128)])
def test_varlen_attention_matches_sdpa_per_sequence(lengths_q, lengths_k, D, dtype):
    """Sequences packed along S and T (ids per token, from the lengths as cu_seqlens give
    them), against SDPA over each sequence alone; a sequence without keys gives 0."""
    q, k, v = _inputs(1, 2, sum(lengths_q), sum(lengths_k), D, dtype, seed=sum(lengths_k))
    ids = [torch.repeat_interleave(torch.arange(len(n)), torch.tensor(n)).to(
        device="cuda", dtype=torch.int32)[None] for n in (lengths_q, lengths_k)]
    out = plait.run(varlen_attention, q, k, v, *ids)
    at_q, at_k = (torch.tensor([0] + n).cumsum(0).tolist() for n in (lengths_q, lengths_k))
    for i in range(len(lengths_q)):
        got = out[:, :, at_q[i]:at_q[i + 1]].float()
        if lengths_k[i] == 0:
            assert (got == 0).all()
            continue
        part = [t[:, :, a:b].float() for t, a, b in ((q, at_q[i], at_q[i + 1]),
                                                      (k, at_k[i], at_k[i + 1]),
                                                      (v, at_k[i], at_k[i + 1]))]
        ref = F.scaled_dot_product_attention(*part, scale=0.125)
        torch.testing.assert_close(got, ref, atol=TOL[dtype], rtol=TOL[dtype])


def test_first_causal_query_sees_one_key():
    q, k, v = _inputs(1, 2, 300, 700, 64, torch.bfloat16, seed=1)
    out = plait.run(causal_attention, q, k, v)
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0], atol=1e-2, rtol=1e-2)


def test_scores_are_never_materialised():
    """B1 H4 S = T = 8192 D128 bf16: a score temporary would be 512 MiB; the inputs and
    output are 32 MiB."""
    q, k, v = _inputs(1, 4, 8192, 8192, 128, torch.bfloat16, seed=2)
    handle = plait.compile(attention, like=(q, k, v))
    handle(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = handle(q, k, v)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    assert peak <= 4 * out.numel() * out.element_size(), f"peak {peak / 2**20:.0f} MiB"
