"""Random programs that lower to tensor-core kernels, which the chain grammar of
programs.py never reaches (its extents are too small for a GEMM, and it has no attention):

  * a contraction sum(a * b, over="K") (a batch axis sometimes, operands in random storage
    order) under a random epilogue;
  * attention sum(softmax(mod(sum(q * k, over="D") * 0.125), over="T") * v, over="T") under a
    random score modifier, its heads H or grouped (G groups of R query heads sharing k, v).

The epilogue or modifier is a small tree over the contraction's value: grammar.py's bounded
unary and binary ops, whose second operand is another tensor over some of the output's
axes in random order and in any storage dtype (fp32, bf16, fp16, int32, int64), a constant
or a position (`index`); and masks: `where` of a bool tensor or of a comparison of
positions or of equal ids (packed documents), filling -inf (attention) or 0. A structure is plain tuples (hypothesis prints
and shrinks it); `build` makes the @algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import plait.dsl as D
from grammar import BINARY, SMOOTH_BINARY, SMOOTH_UNARY, UNARY, _binary, _unary, make_algorithm

VALUE_DTYPES = ("fp32", "bf16", "fp16", "int32", "int64")
GEMM_AXES = ("M", "N")


@dataclass(frozen=True)
class TcCase:
    kind: str                 # "gemm" or "attention"
    operands: tuple           # the contraction's: (name, axes) for a, b / q, k, v
    extra: tuple              # the tree's tensors: (name, axes, dtype)
    tree: tuple
    sizes: dict
    dtype: str                # of the contraction's operands: bf16, fp16 or (a GEMM's) fp8
    seed: int
    schedule: dict | None = None   # contraction tiles or a streamed tile (may be refused)

    def dtypes(self) -> dict:
        return {**{n: self.dtype for n, _ in self.operands},
                **{n: dt for n, _, dt in self.extra}}


@st.composite
def _tensor(draw, extra: list, axes: tuple, dtypes: tuple):
    """A new tensor over a non-empty subset of `axes`, in random order and dtype."""
    chosen = draw(st.lists(st.sampled_from(axes), min_size=1, max_size=len(axes), unique=True))
    name = f"t{len(extra)}"
    extra.append((name, tuple(chosen), draw(st.sampled_from(dtypes))))
    return ("t", name)


@st.composite
def _tree(draw, extra: list, axes: tuple, fill: float, depth: int, smooth: bool):
    """A tree over the contraction's value; `smooth`: only ops differentiable wherever a
    random input lands (a gradient case: no ties of relu, maximum or minimum)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return ("acc",)
    inner = draw(_tree(extra, axes, fill, depth - 1, smooth))
    form = draw(st.sampled_from(("unary", "binary", "binary", "mask")))
    unary, binary = (SMOOTH_UNARY, SMOOTH_BINARY) if smooth else (UNARY, BINARY)
    if form == "unary":
        return ("un", draw(st.sampled_from(unary)), inner)
    if form == "binary":
        leaf = draw(st.one_of(_tensor(extra, axes, VALUE_DTYPES),
                              st.tuples(st.just("c"), st.sampled_from((0.5, -1.25, 3.0))),
                              st.tuples(st.just("idx"), st.sampled_from(axes))))
        # where(leaf > 0, ...) needs a tensor leaf: a constant's comparison is a Python bool
        ops = binary if leaf[0] != "c" else tuple(o for o in binary if o != "where")
        return ("bin", draw(st.sampled_from(ops)), inner, leaf)
    form = draw(st.sampled_from(("cmp", "same", "bool") if "S" in axes else ("same", "bool")))
    if form == "cmp":                                 # a causal or windowed comparison
        cond = ("cmp", draw(st.sampled_from(("causal", "window"))))
    elif form == "same":                              # equal ids (packed documents)
        cond = ("same", _ids(draw, extra, axes, "S" if "S" in axes else "M"),
                _ids(draw, extra, axes, "T" if "T" in axes else "N"))
    else:
        cond = draw(_tensor(extra, axes, ("bool",)))
    return ("mask", cond, inner, fill)


def _ids(draw, extra: list, axes: tuple, along: str) -> str:
    """A new int32 tensor of ids 0 or 1 along `along` (and the batch, maybe)."""
    over = (along,) + (("B",) if "B" in axes and draw(st.booleans()) else ())
    name = f"id{len(extra)}"
    extra.append((name, tuple(draw(st.permutations(over))), "int32"))
    return name


def _leaf(leaf, env):
    kind = leaf[0]
    if kind == "t":
        return env[leaf[1]]
    if kind == "c":
        return leaf[1]
    return D.index(leaf[1])


def _cond(cond, env):
    if cond[0] == "t":
        return env[cond[1]]
    if cond[0] == "same":
        return env[cond[1]] == env[cond[2]]
    s, t = D.index("S"), D.index("T")
    return t <= s if cond[1] == "causal" else D.logical_and(t <= s, s - t < 7)


def trace(tree, acc, env):
    kind = tree[0]
    if kind == "acc":
        return acc
    if kind == "un":
        return _unary(tree[1], trace(tree[2], acc, env))
    if kind == "bin":
        return _binary(tree[1], trace(tree[2], acc, env), _leaf(tree[3], env))
    _, cond, inner, fill = tree
    return D.where(_cond(cond, env), trace(inner, acc, env), fill)


def build(case: TcCase):
    def body(env):
        if case.kind == "gemm":
            acc = D.sum(env["a"] * env["b"], over="K")
            if case.dtype.startswith("fp8"):      # as examples/matmul_fp8.py writes it out
                acc = D.cast(acc, "bf16")
            return trace(case.tree, acc, env)
        s = trace(case.tree, D.sum(env["q"] * env["k"], over="D") * 0.125, env)
        return D.sum(D.softmax(s, over="T") * env["v"], over="T")
    declared = {n: (dt,) for n, _, dt in case.extra if dt in ("bool", "int32", "int64")}
    params = [(n, axes) for n, axes in case.operands] + \
        [(n, axes + declared.get(n, ())) for n, axes, _ in case.extra]
    return make_algorithm(params, body, f"tc_{case.kind}")


@st.composite
def tc_cases(draw, grad=False):
    # tools/fuzz.py takes hypothesis's second example of a seed, whose first choice always
    # differs from the simplest one: a kind drawn first would never be the first kind.
    kind = ("gemm", "attention")[draw(st.integers(0, 255)) % 2]
    extra: list = []
    odd = st.sampled_from((1, 7, 33, 67, 130, 151)) | st.integers(1, 160)
    dtype = draw(st.sampled_from(("bf16", "fp16") if grad or kind == "attention" else
                                 ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")))
    if kind == "gemm":
        fp8 = dtype.startswith("fp8")       # fp8 tensor cores read K-major operands only
        a = draw(st.sampled_from((("M", "K"),) if fp8 else (("M", "K"), ("K", "M"))))
        b = draw(st.sampled_from((("N", "K"),) if fp8 else (("N", "K"), ("K", "N"))))
        axes = GEMM_AXES
        if draw(st.booleans()):
            a, b, axes = ("B",) + a, ("B",) + b, ("B",) + GEMM_AXES
        operands = (("a", a), ("b", b))
        sizes = {"M": draw(odd), "N": draw(odd), "K": draw(odd), "B": draw(st.integers(1, 3))}
        tree = draw(_tree(extra, axes, 0.0, 3, grad))
    else:
        heads = ("H",) if draw(st.integers(0, 2)) else ("G", "R")    # grouped queries
        kv = heads[:1]
        operands = (("q", ("B",) + heads + ("S", "D")), ("k", ("B",) + kv + ("T", "D")),
                    ("v", ("B",) + kv + ("T", "D")))
        sizes = {"B": draw(st.integers(1, 2)), "H": draw(st.integers(1, 3)), "S": draw(odd),
                 "T": draw(odd), "D": draw(st.sampled_from((16, 32, 64, 24))),
                 "G": draw(st.integers(1, 2)), "R": draw(st.integers(1, 3))}
        tree = draw(_tree(extra, ("B",) + heads + ("S", "T"), float("-inf"), 3, grad))
    used = {a for _, axes in operands for a in axes} | {a for _, axes, _ in extra for a in axes}
    sizes = {a: n for a, n in sizes.items() if a in used}
    schedule = draw(st.none() | (_gemm_schedules() if kind == "gemm" else _stream_schedules()))
    return TcCase(kind, operands, tuple(extra), tree, sizes, dtype,
                  draw(st.integers(0, 2**16)), schedule)


@st.composite
def _gemm_schedules(draw):
    """Contraction tiles, stages, a split of K, an instruction: any the schema takes (the
    lowering may refuse one for a target: the case then runs the default)."""
    out = {"tile": {"M": draw(st.sampled_from((32, 64, 128))),
                    "N": draw(st.sampled_from((32, 64, 128, 256))),
                    "K": draw(st.sampled_from((32, 64)))}}
    for key, values in (("stages", (1, 2, 3, 4)), ("split_k", (1, 2, 3, 5)),
                        ("instruction", ("wgmma", "mma_sync")), ("persistent", (True, False)),
                        ("raster", (1, 8))):
        if draw(st.booleans()):
            out[key] = draw(st.sampled_from(values))
    return {"contraction": out}


def _stream_schedules():
    return st.sampled_from((16, 32, 64, 128)).map(lambda keys: {"stream": {"T": keys}})


def make_inputs(case: TcCase) -> dict:
    """Normal floats in the case's dtypes, bools true 7 times in 10, integers in [-3, 3],
    ids (`id` tensors) 0 or 1."""
    rng = np.random.default_rng(case.seed)
    out = {}
    for name, dt in case.dtypes().items():
        axes = dict(case.operands).get(name) or next(a for n, a, _ in case.extra if n == name)
        shape = tuple(case.sizes[a] for a in axes)
        if dt == "bool":
            out[name] = rng.random(shape) < 0.7
        elif name.startswith("id"):
            out[name] = rng.integers(0, 2, shape).astype(dt)
        elif dt in ("int32", "int64"):
            out[name] = rng.integers(-3, 4, shape).astype(dt)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32).astype(
                D.dtype_of(dt).numpy)
    return out
