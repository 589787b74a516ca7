"""Integer programs shared by the CPU tests and their GPU twins: each algorithm with a
drawing of fresh random inputs and its expected outputs from Python's own integers
(`int_reference`), never from plait."""
import numpy as np

from int_reference import apply, draw, invert, shift_counts
from plait.dsl import Tensor, algorithm, index, permute, size, sum, where

SHAPES = [(5, 37), (257, 3), (1, 1), (3, 1030)]
NAMES = {"fdiv": "//", "mod": "%", "shl": "<<", "shr": ">>", "band": "&", "bor": "|",
         "bxor": "^"}


@algorithm
def int_ops(a: Tensor["M", "N"], b: Tensor["N", "M"], s: Tensor["N"]):
    return {"fdiv": a // b, "mod": a % b, "shl": a << s, "shr": a >> s, "band": a & b,
            "bor": a | b, "bxor": a ^ b, "bnot": ~a, "mod_nm": permute(b % a, "N", "M")}


def int_ops_inputs(rng, M, N, da, db, ds):
    return {"a": draw(rng, da, (M, N)), "b": draw(rng, db, (N, M), low=-7, high=8),
            "s": shift_counts(rng, ds, N)}


def int_ops_want(a, b, s):
    bt = b.T
    want = {name: apply(op, a, s if name in ("shl", "shr") else bt)
            for name, op in NAMES.items()}
    want["bnot"] = invert(a)
    want["mod_nm"] = apply("%", bt, a).T
    return want


@algorithm
def bool_ops(p: Tensor["M", "N"], q: Tensor["N", "M"], x: Tensor["M"]):
    r = x > 0.0
    return {"band": p & q, "bor": p | r, "bxor": p ^ q, "bnot": ~q,
            "mixed": (p & r) | ~permute(q, "M", "N"), "count": sum(p ^ q, over="N")}


def bool_ops_inputs(rng, M, N):
    return {"p": rng.random((M, N)) < 0.5, "q": rng.random((N, M)) < 0.5,
            "x": rng.standard_normal(M).astype(np.float32)}


def bool_ops_want(p, q, x):
    r = (x > 0)[:, None]
    return {"band": apply("&", p, q.T), "bor": apply("|", p, r), "bxor": apply("^", p, q.T),
            "bnot": invert(q), "mixed": apply("|", apply("&", p, r), invert(q.T)),
            "count": (p != q.T).sum(1, dtype=np.int32)}


@algorithm
def index_math(x: Tensor["M", "N"], k: int = 3):
    i, j = index("M"), index("N")
    return {"checker": where((i + j) % 2 == 0, x, 0.0),
            "block": where(i // 4 == j // 4, 1, 0),
            "bits": (j >> 1) & 1 | (i << 2) ^ k,
            "rdiv": 17 // (j - 3) + -7 % (i + 1),
            "neg": (-j) // k + size("N") * 2,
            "count": sum(where(j % k == 0, 1, 0), over="N")}


def index_math_want(x, k):
    M, N = x.shape
    i, j = np.arange(M, dtype=np.int32)[:, None], np.arange(N, dtype=np.int32)[None, :]
    c = lambda v: np.int32(v)           # noqa: E731  Python ints as the kernels' int32
    checker = np.where((i + j) % 2 == 0, x, 0)
    block = (apply("//", i, c(4)) == apply("//", j, c(4))).astype(np.int32)
    bits = apply("|", apply("&", apply(">>", j, c(1)), c(1)), apply("^", apply("<<", i, c(2)),
                                                                    c(k)))
    rdiv = apply("//", c(17), j - 3) + apply("%", c(-7), i + 1)
    neg = apply("//", -j[0], c(k)) + c(2 * N)                    # over N only
    count = np.int32((apply("%", j, c(k)) == 0).sum())           # a scalar
    return {"checker": checker, "block": block, "bits": bits, "rdiv": rdiv, "neg": neg,
            "count": count}


def check(got, want):
    for name, w in want.items():
        g, w = np.asarray(got[name]), np.asarray(w)
        assert g.shape == w.shape, name
        assert g.dtype == w.dtype or w.dtype.kind == "f", name
        np.testing.assert_array_equal(g, w, err_msg=name)


@algorithm
def by_param(a: Tensor["M", "N"], k: int = 3):
    """An int scalar argument meeting an int64 tensor is widened to int64."""
    return {"q": a // k, "r": a % k, "s": a >> k}


def by_param_want(a, k):
    k = a.dtype.type(k)
    return {"q": apply("//", a, k), "r": apply("%", a, k), "s": apply(">>", a, k)}
