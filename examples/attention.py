"""Attention written as plain math: queries along S, keys and values along T, heads H,
batch B, head dimension D. Every variant is the same softmax-weighted contraction; a
mask or a score modifier is elementwise math on the scores (`index` gives positions,
and -inf behaves as in IEEE arithmetic, so a masked key gets weight exactly 0).
Grouped-query attention names the heads as groups G of R query heads: k and v lack R,
so each group's k and v broadcast over its query heads (multi-query is G = 1). Masks
that read other tensors: document ids per token (packed causal documents, variable-length
sequences) and block masks (block-sparse)."""
from plait.dsl import Tensor, algorithm, blocked, index, logical_and, softmax, sum, tanh, where

NEG_INF = float("-inf")


@algorithm
def attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
              v: Tensor["B", "H", "T", "D"], scale: float = 0.125):
    """softmax(q·kᵀ·scale)·v over the keys T."""
    s = sum(q * k, over="D") * scale
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def causal_attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                     v: Tensor["B", "H", "T", "D"], scale: float = 0.125):
    """Query s sees keys t <= s (positions counted from 0 in both, as torch's
    is_causal=True for S == T)."""
    s = sum(q * k, over="D") * scale
    s = where(index("T") <= index("S"), s, NEG_INF)
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def sliding_window_attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                             v: Tensor["B", "H", "T", "D"], scale: float = 0.125,
                             window: int = 256):
    """Causal, and query s sees only the `window` most recent keys: s - window < t <= s
    (Mistral's sliding window; the key at s itself included)."""
    s = sum(q * k, over="D") * scale
    near = logical_and(index("T") <= index("S"), index("S") - index("T") < window)
    s = where(near, s, NEG_INF)
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def softcap_attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                      v: Tensor["B", "H", "T", "D"], scale: float = 0.125, cap: float = 30.0):
    """Gemma 2's soft-capped scores, cap·tanh(s/cap) on the scaled scores, unmasked."""
    s = sum(q * k, over="D") * scale
    s = cap * tanh(s / cap)
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def grouped_query_attention(q: Tensor["B", "G", "R", "S", "D"], k: Tensor["B", "G", "T", "D"],
                            v: Tensor["B", "G", "T", "D"], scale: float = 0.125):
    """The R query heads of group G share its k and v (torch's q [B, G*R, S, D] viewed
    as [B, G, R, S, D]; SDPA's enable_gqa=True)."""
    s = sum(q * k, over="D") * scale
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def causal_grouped_query_attention(q: Tensor["B", "G", "R", "S", "D"],
                                   k: Tensor["B", "G", "T", "D"],
                                   v: Tensor["B", "G", "T", "D"], scale: float = 0.125):
    """Grouped queries under the causal mask, as LLaMA's attention is."""
    s = sum(q * k, over="D") * scale
    s = where(index("T") <= index("S"), s, NEG_INF)
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def document_attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                       v: Tensor["B", "H", "T", "D"], doc_q: Tensor["B", "S"],
                       doc_k: Tensor["B", "T"], scale: float = 0.125):
    """Packed sequences: causal, and a query sees only the keys of its own document
    (int32 document ids per token; for self-attention doc_q and doc_k are one tensor)."""
    s = sum(q * k, over="D") * scale
    s = where(logical_and(index("T") <= index("S"), doc_q == doc_k), s, NEG_INF)
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def block_sparse_attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                           v: Tensor["B", "H", "T", "D"],
                           blocks: Tensor["B", "H", "SB", "TB", "int32"],
                           scale: float = 0.125):
    """A query block attends to a key block where `blocks` (int32, per 128 queries and
    128 keys, as FlexAttention's block masks) is not 0; a streamed kernel never visits
    the key tiles of a 0 block."""
    s = sum(q * k, over="D") * scale
    s = where(blocked(blocks, {"SB": "S", "TB": "T"}, 128) != 0, s, NEG_INF)
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def varlen_attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                     v: Tensor["B", "H", "T", "D"], seq_q: Tensor["B", "S", "int32"],
                     seq_k: Tensor["B", "T", "int32"], scale: float = 0.125):
    """Variable-length sequences packed along S and T (B = 1 usually): a query sees every
    key of its own sequence and no other. The int32 ids per token are what offsets
    (cu_seqlens) expand to: torch.repeat_interleave(torch.arange(n), lengths)."""
    s = sum(q * k, over="D") * scale
    s = where(seq_q == seq_k, s, NEG_INF)
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def decoding_attention(q: Tensor["B", "G", "R", "D"], k: Tensor["B", "G", "T", "D"],
                       v: Tensor["B", "G", "T", "D"], length: Tensor["B", "int32"],
                       scale: float = 0.125):
    """One new token per sequence against its key cache: the R query heads of group G are
    the rows, so each group's k and v are read once for all of them (torch's q
    [B, G*R, 1, D] viewed as [B, G, R, D]). A cache holds `length` valid keys of its T;
    the key tiles past it are never visited. The keys are split across blocks where the
    sequences and groups alone would not fill the GPU (PLAIT_STREAM_SPLIT=0: not)."""
    s = sum(q * k, over="D") * scale
    s = where(index("T") < length, s, NEG_INF)
    return sum(softmax(s, over="T") * v, over="T")
