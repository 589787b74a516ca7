"""scaled_dot_product_attention as the math plait writes attention in, before AOTAutograd.

    gm = attention_as_math(gm)     # Dynamo's graph, each SDPA call without dropout rewritten

Dynamo hands the backend F.scaled_dot_product_attention as one call; AOTAutograd would
pick a fused torch kernel for it (`_scaled_dot_product_flash_attention_for_cpu`, cuDNN,
...) whose forward and backward plait cannot read. Rewritten as
`softmax(q @ k^T * scale + bias) @ v` first, AOTAutograd traces plain ops (bmm, amax,
exp, sum, div) and derives their backward, which fx_partition takes into regions: plait's
attention is that sum/softmax over the key axis, and streaming it (online softmax) is
the lowering's business. Masks become an additive bias computed by torch once per call
(0 where a key is kept, -inf where it is not): `is_causal`, a bool `attn_mask`, an
additive one. `enable_gqa` splits the query heads into (key head, group) and broadcasts k and v
over the group.
dropout_p > 0 needs torch's random stream: such a call is left as it is.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _bias(mask, t: int, s: int, is_causal: bool, like):
    """The additive bias of a call's masks, or None without any."""
    bias = None
    if is_causal:
        keep = torch.ones(t, s, dtype=torch.bool, device=like.device).tril()
        bias = torch.zeros(t, s, dtype=like.dtype, device=like.device).masked_fill(
            ~keep, float("-inf"))
    if mask is not None:
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=like.dtype, device=like.device).masked_fill(
                ~mask, float("-inf"))
        bias = mask if bias is None else bias + mask
    return bias


def _grouped(q, k, v, scale, bias):
    """Grouped-query attention without repeating k and v: q's heads split into (key
    head, group) and k, v broadcast over the group by a size-1 dim (an expand would add
    an axis no input has), the contractions written as sums of products."""
    *lead, hq, t, d = q.shape
    hk = k.shape[-3]
    q = q.reshape(*lead, hk, hq // hk, t, d)
    k, v = k.unsqueeze(-3), v.unsqueeze(-3)                      # [..., Hk, 1, S, D]
    scores = (q.unsqueeze(-2) * k.unsqueeze(-4)).sum(-1) * scale  # [..., Hk, G, T, S]
    if bias is not None and bias.dim() >= 3:      # a head dim: Hq as (Hk, G), or 1
        bias = bias.reshape(*bias.shape[:-3], hk, hq // hk, *bias.shape[-2:]) \
            if bias.shape[-3] == hq else bias.unsqueeze(-3)
    if bias is not None:
        scores = scores + bias
    p = torch.softmax(scores, dim=-1)
    out = (p.unsqueeze(-1) * v.unsqueeze(-4)).sum(-2)           # [..., Hk, G, T, D]
    return out.reshape(*lead, hq, t, v.shape[-1])


def sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    """F.scaled_dot_product_attention without dropout, in plain ops."""
    t, s = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    bias = _bias(attn_mask, t, s, is_causal, q)
    if enable_gqa and q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        return _grouped(q, k, v, scale, bias)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    return torch.matmul(torch.softmax(scores, dim=-1), v)


_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)


def _dropout(node) -> float:
    p = node.kwargs.get("dropout_p", node.args[4] if len(node.args) > 4 else 0.0)
    return p if isinstance(p, (int, float)) else 1.0       # a traced p: leave to torch


def attention_as_math(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """gm with every SDPA call of dropout_p 0 calling sdpa_math instead (in place)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SDPA and _dropout(node) == 0:
            node.target = sdpa_math
            changed = True
    if changed:
        gm.recompile()
    return gm
