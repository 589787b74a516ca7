"""Rotary position embeddings written as Hugging Face writes them: the halves (x1, x2) of
the head dimension D become (-x2, x1) (`rotate_half`), and the embedding is
x * cos + rotate_half(x) * sin, with cos and sin over the positions S and D."""
from plait.dsl import Tensor, algorithm, cast, cos, index, rotate_half, sin, size, where


@algorithm
def rotary(x: Tensor["B", "H", "S", "D"], cos: Tensor["S", "D"], sin: Tensor["S", "D"]):
    """Rotary embedding with precomputed tables (HF's apply_rotary_pos_emb)."""
    return x * cos + rotate_half(x, over="D") * sin


@algorithm
def rotary_llama(x: Tensor["B", "H", "S", "D"], base: float = 10000.0):
    """The tables computed in the kernel, as HF's LLaMA does: position s and frequency
    index j = d mod D/2 give the angle s * base^(-2j/D); cos and sin in fp32, cast to x's
    dtype."""
    d = cast(index("D"), "fp32")
    half = size("D") * 0.5
    j = where(d >= half, d - half, d)
    theta = cast(index("S"), "fp32") * base ** (-2.0 * j / size("D"))
    c, s = cast(cos(theta), x.dtype), cast(sin(theta), x.dtype)
    return x * c + rotate_half(x, over="D") * s


@algorithm
def rotary_interleaved(x: Tensor["B", "H", "S", "D"], cos: Tensor["S", "D"],
                       sin: Tensor["S", "D"]):
    """GPT-J / Meta LLaMA style: each pair (2i, 2i+1) rotates (cos and sin repeat per
    pair in the tables)."""
    return x * cos + rotate_half(x, over="D", interleaved=True) * sin
