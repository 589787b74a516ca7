"""Random typed programs: float, int32 and bool values over named axes, drawn by hypothesis.

A program is a *structure* of plain tuples (printable, shrinkable) that two interpreters
read: `build` (here) traces it into a plait `@algorithm`, and `torch_interp` runs it as
torch float64 ops, sharing no code with plait. It reaches what the pointwise chains of
grammar.py do not: comparisons, where, logical ops, counts of bools, int inputs and
`index()` as masks, masked (-inf) softmax / logsumexp, casts to bf16/fp16/fp8,
reductions over several axes, several outputs and permuted outputs.

Expressions, by type (f float, b bool, i int32):
  f: ("in", x) ("u", op, f) ("b", op, f, f) ("where", b, f, f) ("red", op, axes, f)
     ("norm", op, axis, f, b|None) ("lse", axes, f, b|None) ("count", op, axes, b)
     ("cast", dtype, f) ("ifloat", i)
  b: ("in", m) ("cmp", op, x, x|number) ("icmp", op, i, i) ("and"/"or", b, b) ("not", b)
  i: ("in", k) ("iota", axis) ("iconst", c) ("iadd", i, i) ("ired", op, axis, i)
     ("iop", op, i, i) (// % & | ^, zero divisors included) ("ishift", op, i, count)
Values stay bounded as in grammar.py (exp is exp(-v²/2), division is by |w| + 1), and a
float comparison reads inputs only, so that rounding never flips it.
"""
from __future__ import annotations

import itertools

from hypothesis import strategies as st

import plait.dsl as D
from grammar import make_algorithm
from known_bugs import EXCLUDED

AXES = ("B", "M", "N")
UNARY = ("neg", "exp", "tanh", "sigmoid", "square", "relu", "abs")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
REDUCE = ("sum", "mean", "max", "min")
CASTS = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
_names = itertools.count()


def axes_of(e, params) -> frozenset:
    """The named axes an expression ranges over (its structure alone decides)."""
    tag = e[0]
    if tag == "in":
        return frozenset(params[e[1]][0])
    if tag == "iota":
        return frozenset((e[1],))
    if tag in ("red", "count", "ired"):
        over = e[2] if isinstance(e[2], tuple) else (e[2],)
        return axes_of(e[3], params) - frozenset(over)
    if tag == "lse":
        mask = axes_of(e[3], params) if e[3] is not None else frozenset()
        return (axes_of(e[2], params) | mask) - frozenset(e[1])
    if tag == "iconst":
        return frozenset()
    if tag == "cmp":
        rhs = axes_of(("in", e[3]), params) if isinstance(e[3], str) else frozenset()
        return axes_of(("in", e[2]), params) | rhs
    parts = [p for p in e[1:] if isinstance(p, tuple) and p and isinstance(p[0], str)
             and p[0] in _TAGS]
    return frozenset().union(*(axes_of(p, params) for p in parts))


_TAGS = {"in", "u", "b", "where", "red", "norm", "lse", "count", "cast", "ifloat", "cmp",
         "icmp", "and", "or", "not", "iota", "iconst", "iadd", "ired", "iop", "ishift"}
INT_OPS = ("floor_divide", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor")


# ---- strategies -----------------------------------------------------------------------

@st.composite
def params_st(draw, axes):
    """{name: (axes in storage order, kind)}: a float input over every axis in a random
    order, further floats, bools and int32 inputs over random subsets in random orders."""
    def order(subset):
        return tuple(draw(st.permutations(sorted(subset))))

    def subset():
        return draw(st.sets(st.sampled_from(axes), min_size=1))
    params = {"x0": (order(axes), "f")}
    for i in range(1, draw(st.integers(1, 3))):
        params[f"x{i}"] = (order(subset()), "f")
    if draw(st.booleans()):
        params["m0"] = (order(subset()), "b")
    if draw(st.booleans()):
        params["k0"] = (order(subset()), "i")
    return params


def _names_of(params, kind):
    return sorted(n for n, (_, k) in params.items() if k == kind)


@st.composite
def bools(draw, params, axes, depth):
    floats, masks, ints = (_names_of(params, k) for k in "fbi")
    choices = ["cmp", "icmp"] + (["in"] if masks else []) + (["logic", "not"] if depth else [])
    tag = draw(st.sampled_from(choices))
    if tag == "in":
        return ("in", draw(st.sampled_from(masks)))
    if tag == "cmp":
        rhs = draw(st.sampled_from(floats) | st.sampled_from((0.0, 0.5, -0.5)))
        return ("cmp", draw(st.sampled_from(("gt", "lt", "ge", "le"))),
                draw(st.sampled_from(floats)), rhs)
    if tag == "icmp":
        return ("icmp", draw(st.sampled_from(("lt", "le", "gt", "ge", "eq", "ne"))),
                draw(integers(params, axes, depth - 1 if depth else 0)),
                draw(integers(params, axes, depth - 1 if depth else 0)))
    if tag == "not":
        return ("not", draw(bools(params, axes, depth - 1)))
    return (draw(st.sampled_from(("and", "or"))), draw(bools(params, axes, depth - 1)),
            draw(bools(params, axes, depth - 1)))


@st.composite
def integers(draw, params, axes, depth):
    ints = _names_of(params, "i")
    choices = ["iota", "iconst"] + (["in"] if ints else []) + (
        ["iadd", "ired", "iop", "ishift"] if depth > 0 else [])
    tag = draw(st.sampled_from(choices))
    if tag == "iconst":
        return ("iconst", draw(st.sampled_from((0, 1, 3))))
    if tag == "in":
        return ("in", draw(st.sampled_from(ints)))
    if tag == "iota":
        return ("iota", draw(st.sampled_from(axes)))
    if tag == "iadd":
        return ("iadd", draw(integers(params, axes, depth - 1)),
                draw(integers(params, axes, depth - 1)))
    if tag == "iop":
        return ("iop", draw(st.sampled_from(INT_OPS)), draw(integers(params, axes, depth - 1)),
                draw(integers(params, axes, depth - 1)))
    if tag == "ishift":            # small counts: values stay far from int32's range
        return ("ishift", draw(st.sampled_from(("left_shift", "right_shift"))),
                draw(integers(params, axes, depth - 1)), draw(st.integers(0, 3)))
    inner = draw(integers(params, axes, depth - 1))
    over = axes_of(inner, params)
    if not over:
        return inner
    return ("ired", draw(st.sampled_from(("sum", "max", "min"))),
            draw(st.sampled_from(sorted(over))), inner)


@st.composite
def floats(draw, params, axes, depth):
    """A float expression at most `depth` ops deep."""
    if depth <= 0:
        return ("in", draw(st.sampled_from(_names_of(params, "f"))))
    tags = ["in", "u", "b", "b", "where", "red", "norm", "lse", "cast", "ifloat"]
    tags += [] if "bool_sum" in EXCLUDED else ["count"]
    tag = draw(st.sampled_from(tags))
    sub = floats(params, axes, depth - 1)
    if tag == "in":
        return ("in", draw(st.sampled_from(_names_of(params, "f"))))
    if tag == "u":
        return ("u", draw(st.sampled_from(UNARY)), draw(sub))
    if tag == "b":
        return ("b", draw(st.sampled_from(BINARY)), draw(sub), draw(sub))
    if tag == "where":
        return ("where", draw(bools(params, axes, 1)), draw(sub), draw(sub))
    if tag == "cast":
        return ("cast", draw(st.sampled_from(CASTS)), draw(sub))
    if tag == "ifloat":
        return ("ifloat", draw(integers(params, axes, 1)))
    if tag == "count":
        b = draw(bools(params, axes, 1))
        if not axes_of(b, params):    # a comparison of constants: nothing to count over
            return ("ifloat", draw(integers(params, axes, 1)))
        return ("count", draw(st.sampled_from(("sum", "mean"))),
                draw(over_axes(axes_of(b, params))), b)
    inner = draw(sub)
    present = axes_of(inner, params)
    if not present:
        return inner
    if tag == "red":
        return ("red", draw(st.sampled_from(REDUCE)), draw(over_axes(present)), inner)
    mask = draw(st.none() | bools(params, axes, 1))
    if tag == "norm":
        axis = draw(st.sampled_from(sorted(present)))
        return ("norm", draw(st.sampled_from(("softmax", "log_softmax"))), axis, inner, mask)
    over = draw(over_axes(present))
    if mask is not None and "lse_empty_rows" in EXCLUDED:
        mask = keep_first(mask, over)
    return ("lse", over, inner, mask)


def keep_first(mask, over):
    """mask, but true at position 0 of the reduced axes: no row of a logsumexp is empty."""
    first = ("icmp", "eq", ("iota", over[0]), ("iconst", 0))
    for a in over[1:]:
        first = ("and", first, ("icmp", "eq", ("iota", a), ("iconst", 0)))
    return ("or", mask, first)


def over_axes(present):
    """One reduced axis, or two or three at once (a reduction over several axes)."""
    return st.lists(st.sampled_from(sorted(present)), min_size=1, max_size=len(present),
                    unique=True).map(lambda a: tuple(sorted(a)))


@st.composite
def programs(draw, grad=False, depth=None):
    """(params, outputs): outputs are (expression, permuted axis order or None). For a
    gradient, every output is a float (only floats have cotangents), and programs are
    shallower: a gradient program is several times its forward's size, and ptxas takes
    tens of seconds on the largest."""
    depth = depth or (2 if grad else 3)
    axes = tuple(sorted(draw(st.sets(st.sampled_from(AXES), min_size=2))))
    params = draw(params_st(axes))
    outs = []
    for _ in range(draw(st.integers(1, 2 if grad else 3))):
        e = draw(floats(params, axes, depth)) if grad or draw(
            st.integers(0, 5)) else draw(st.one_of(bools(params, axes, 1),
                                                   integers(params, axes, 1)))
        if not reads_data(e):
            e = ("in", "x0")     # an output of constants alone is refused (see test_prop_issue31)
        present = sorted(axes_of(e, params))
        perm = None
        if len(present) > 1 and not (grad and "grad_permute" in EXCLUDED) and draw(
                st.booleans()):
            perm = tuple(draw(st.permutations(present)))
        outs.append((e, perm))
    return tuple(sorted(params.items())), tuple(outs)


def reads_data(e) -> bool:
    """Whether e reads an input or an index (else it is made of constants alone)."""
    if e[0] in ("in", "iota"):
        return True
    return any(reads_data(p) for p in e[1:] if isinstance(p, tuple) and p
               and isinstance(p[0], str) and p[0] in _TAGS)


# ---- building the plait algorithm ------------------------------------------------------

_UNARY_FN = {"neg": lambda v: -v, "exp": lambda v: D.exp(-0.5 * (v * v)),
             "tanh": D.tanh, "sigmoid": D.sigmoid, "square": lambda v: v * D.tanh(v),
             "relu": lambda v: D.maximum(v, 0.0), "abs": D.abs}
_BINARY_FN = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
              "mul": lambda a, b: a * b, "div": lambda a, b: a / (D.abs(b) + 1.0),
              "maximum": D.maximum, "minimum": D.minimum}
_CMP = {"gt": lambda a, b: a > b, "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b,
        "le": lambda a, b: a <= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
_REDUCE_FN = {"sum": D.sum, "mean": D.mean, "max": D.max, "min": D.min}


def _one(over):
    return over[0] if len(over) == 1 else over


def trace(e, env):
    """The plait value of expression e, with env {input name: traced Tensor}."""
    tag = e[0]
    if tag == "in":
        return env[e[1]]
    if tag == "u":
        return _UNARY_FN[e[1]](trace(e[2], env))
    if tag == "b":
        return _BINARY_FN[e[1]](trace(e[2], env), trace(e[3], env))
    if tag == "where":
        return D.where(trace(e[1], env), trace(e[2], env), trace(e[3], env))
    if tag == "red":
        return _REDUCE_FN[e[1]](trace(e[3], env), over=_one(e[2]))
    if tag == "norm":
        v = _masked(trace(e[3], env), e[4], env)
        return (D.softmax if e[1] == "softmax" else D.log_softmax)(v, over=e[2])
    if tag == "lse":
        return D.logsumexp(_masked(trace(e[2], env), e[3], env), over=_one(e[1]))
    if tag == "count":
        b = trace(e[3], env)
        if e[1] == "mean":
            return D.mean(b, over=_one(e[2]))
        return D.cast(D.sum(b, over=_one(e[2])), "fp32")
    if tag == "cast":
        return D.cast(trace(e[2], env), e[1])
    if tag == "ifloat":
        return D.cast(trace(e[1], env), "fp32") * 0.125
    if tag == "cmp":
        rhs = env[e[3]] if isinstance(e[3], str) else e[3]
        return _CMP[e[1]](env[e[2]], rhs)
    if tag == "icmp":
        return _CMP[e[1]](trace(e[2], env), trace(e[3], env))
    if tag == "and":
        return D.logical_and(trace(e[1], env), trace(e[2], env))
    if tag == "or":
        return D.logical_or(trace(e[1], env), trace(e[2], env))
    if tag == "not":
        return D.logical_not(trace(e[1], env))
    if tag == "iota":
        return D.index(e[1])
    if tag == "iconst":
        return D.cast(e[1], "int32")
    if tag == "iadd":
        return trace(e[1], env) + trace(e[2], env)
    if tag == "ired":
        return _REDUCE_FN[e[1]](trace(e[3], env), over=e[2])
    if tag in ("iop", "ishift"):
        rhs = e[3] if tag == "ishift" else trace(e[3], env)
        return getattr(D, e[1])(trace(e[2], env), rhs)
    raise ValueError(f"unknown expression {tag!r}")


def _masked(v, mask, env):
    return v if mask is None else D.where(trace(mask, env), v, float("-inf"))


def build(structure, name=None):
    """The @algorithm of a program structure; outputs out0, out1, ..."""
    params, outs = structure

    def body(env):
        values = []
        for e, perm in outs:
            v = trace(e, env)
            values.append(D.permute(v, *perm) if perm else v)
        return tuple(values) if len(values) > 1 else values[0]
    # bools and ints are declared as such, so that grad() (which traces the default
    # dtypes) sees them too
    declared = {"f": (), "b": ("bool",), "i": ("int32",)}
    return make_algorithm([(n, axes + declared[kind]) for n, (axes, kind) in params], body,
                          name or f"prog{next(_names)}")


def input_dtypes(structure, float_dtype):
    """Each input's dtype: float inputs as drawn (one DType or one per name), bools, int32."""
    out = {}
    for n, (_, kind) in structure[0]:
        if kind == "f":
            out[n] = D.dtype_of(float_dtype[n] if isinstance(float_dtype, dict) else float_dtype)
        else:
            out[n] = D.DType.BOOL if kind == "b" else D.DType.INT32
    return out
