"""rand and dropout: a Philox4x32-10 written here with Python's own integers (sharing no
code with plait), its known-answer vectors, and the algorithms and expected values the
CPU tests and their GPU twins share.

The expected values follow plait's documented definition (dsl/counter_rng.py), written out
from scratch: element at linear index i (row-major over `over` in that order) uses
word 0 of Philox4x32-10 at counter ((i + offset) mod 2**32, 0, 0, 0), key (seed, 0);
u = (word0 >> 8) * 2**-24; dropout keeps u >= p and scales by 1 / (1 - p).
"""
import math

import ml_dtypes
import numpy as np

from plait.dsl import Tensor, algorithm, dropout, mean, permute, rand, rsqrt, softmax, sum, where

MASK32 = 0xFFFFFFFF

# Random123 (D. E. Shaw Research), tests/kat_vectors, "philox4x32 10" lines (release
# v1.14.0; Salmon et al., SC11): counter words, key words, expected output words.
KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff),
     (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


def philox_py(counter, key):
    """Philox4x32-10 on Python ints, as the paper states it."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
    return c0, c1, c2, c3


def uniform_want(shape, seed: int, offset: int = 0) -> np.ndarray:
    """float64 u over an array of `shape`, its linear index row-major in that shape."""
    out = [philox_py(((i + offset) & MASK32, 0, 0, 0), (seed & MASK32, 0))[0] >> 8
           for i in range(math.prod(shape))]
    return np.array(out, np.float64).reshape(shape) * 2.0 ** -24


def keep_want(shape, p: float, seed: int, offset: int = 0) -> np.ndarray:
    return uniform_want(shape, seed, offset) >= p


def dropout_want(x, p: float, seed: int, offset: int = 0) -> np.ndarray:
    """float64 x * mask / (1 - p) over x's (canonical, row-major) positions."""
    return np.where(keep_want(x.shape, p, seed, offset), np.asarray(x, np.float64) / (1 - p),
                    0.0)


SHAPES = [(37, 129), (300, 7), (1, 1), (5, 1030)]


@algorithm
def uniforms(x: Tensor["M", "N"], seed: int = 0, offset: int = 0):
    """rand over both orders of two axes, over one axis, and stored N-major."""
    return {"mn": rand(seed, over=("M", "N"), offset=offset),
            "nm": rand(seed, over=("N", "M"), offset=offset),
            "m": rand(seed, over="M", offset=offset),
            "mn_stored_nm": permute(rand(seed, over=("M", "N"), offset=offset),
                                    "N", "M")}


def uniforms_want(M, N, seed, offset):
    mn = uniform_want((M, N), seed, offset)
    return {"mn": mn, "nm": uniform_want((N, M), seed, offset).T,
            "m": uniform_want((M,), seed, offset), "mn_stored_nm": mn.T}


P = 0.3


@algorithm
def drops(x: Tensor["M", "N"], xt: Tensor["N", "M"], seed: int = 0):
    """dropout of an [M, N] tensor and of one stored [N, M] (its draw is over the canonical
    positions [M, N], whatever the storage), with two offsets."""
    return {"dx": dropout(x, P, seed), "dxt": dropout(xt, P, seed, offset=12345),
            "big_offset": dropout(x, 0.5, seed, offset=2 ** 32 - 5)}


def drops_want(x, xt, seed):
    return {"dx": dropout_want(x, P, seed), "dxt": dropout_want(xt.T, P, seed, 12345),
            "big_offset": dropout_want(x, 0.5, seed, 2 ** 32 - 5)}


@algorithm
def dropout_residual_layernorm(x: Tensor["M", "N"], r: Tensor["M", "N"], w: Tensor["N"],
                               b: Tensor["N"], seed: int = 0, eps: float = 1e-5):
    """The transformer block's tail: dropout, residual add, LayerNorm, in one kernel."""
    h = dropout(x, 0.1, seed) + r
    mu = mean(h, over="N")
    hc = h - mu
    var = mean(hc * hc, over="N")
    return hc * rsqrt(var + eps) * w + b


def dropout_residual_layernorm_want(x, r, w, b, seed, eps=1e-5):
    h = dropout_want(x, 0.1, seed) + r.astype(np.float64)
    hc = h - h.mean(1, keepdims=True)
    return hc / np.sqrt((hc * hc).mean(1, keepdims=True) + eps) * w + b


def assert_dropout_close(got, want, x, rtol):
    """Zeros exactly where want drops (the mask is exact), values to rtol elsewhere.

    A scaled value that lands among got's subnormals keeps only its absolute spacing,
    so one subnormal step is allowed besides rtol (a normal value still needs rtol)."""
    step = float(ml_dtypes.finfo(np.asarray(got).dtype).smallest_subnormal)
    got = np.asarray(got, np.float64)
    dropped = want == 0
    assert not np.any(np.asarray(x)[dropped] == 0), "x must have no zeros"
    np.testing.assert_array_equal(got == 0, dropped)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=step)


@algorithm
def attention_dropout(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                      v: Tensor["B", "H", "T", "E"], seed: int = 0, scale: float = 0.125):
    s = sum(q * k, over="D") * scale
    return sum(dropout(softmax(s, over="T"), 0.2, seed, offset=3) * v, over="T")


@algorithm
def score_dropout(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                  v: Tensor["B", "H", "T", "E"], seed: int = 0, scale: float = 0.125):
    s = sum(q * k, over="D") * scale
    s = where(rand(seed, over=("B", "H", "S", "T")) >= 0.1, s, float("-inf"))
    return sum(softmax(s, over="T") * v, over="T")
