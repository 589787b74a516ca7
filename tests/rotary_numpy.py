"""Rotary embeddings in float64 numpy, written from the definitions (the tests' reference,
independent of plait's own evaluator)."""
import numpy as np


def rotate(x, axis=-1, interleaved=False):
    """R x: out[i] = -x[i + n/2] (i < n/2), x[i - n/2] (i >= n/2); interleaved, out[2i] =
    -x[2i + 1] and out[2i + 1] = x[2i]."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    n = x.shape[-1]
    out = np.empty_like(x)
    for i in range(n):
        if interleaved:
            out[..., i] = -x[..., i + 1] if i % 2 == 0 else x[..., i - 1]
        else:
            out[..., i] = -x[..., i + n // 2] if i < n // 2 else x[..., i - n // 2]
    return np.moveaxis(out, -1, axis)


def rotate_transposed(y, interleaved=False):
    """Rᵀ y along the last axis, from Rᵀ's definition (not from -R)."""
    y = np.asarray(y, np.float64)
    out = np.empty_like(y)
    n = y.shape[-1]
    if interleaved:            # R maps (a, b) -> (-b, a) per pair, so Rᵀ: (p, q) -> (q, -p)
        out[..., 0::2], out[..., 1::2] = y[..., 1::2], -y[..., 0::2]
    else:                      # R: (x1, x2) -> (-x2, x1), so Rᵀ: (y1, y2) -> (y2, -y1)
        out[..., :n // 2], out[..., n // 2:] = y[..., n // 2:], -y[..., :n // 2]
    return out


def llama_tables(s, d, base):
    """HF's LlamaRotaryEmbedding: inv_freq over the even dims, emb = cat(freqs, freqs)."""
    inv_freq = 1.0 / base ** (np.arange(0, d, 2) / d)
    freqs = np.outer(np.arange(s), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def forward(x, cos, sin, interleaved=False):
    x, cos, sin = (np.asarray(a, np.float64) for a in (x, cos, sin))
    return x * cos + rotate(x, -1, interleaved) * sin


def backward(x, cos, sin, dout, interleaved=False):
    """{dx, dcos, dsin} of sum(dout * forward) for x [B, H, S, D], tables [S, D]."""
    x, cos, sin, dout = (np.asarray(a, np.float64) for a in (x, cos, sin, dout))
    return {"dx": dout * cos + rotate_transposed(dout * sin, interleaved),
            "dcos": (dout * x).sum(axis=(0, 1)),
            "dsin": (dout * rotate(x, -1, interleaved)).sum(axis=(0, 1))}
