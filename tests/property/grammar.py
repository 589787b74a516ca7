"""A small grammar of random plait algorithms, drawn by hypothesis.

An algorithm is a *structure* (plain tuples, so hypothesis can shrink and print it)
turned into a real `@algorithm` by `build`: a closure interprets the structure, and
its signature (Tensor["M", "N"] annotations) is set through `__signature__`.

Three families:
  * pointwise chains with optional reduce-and-broadcast-back steps and a final reduction;
  * contractions sum(a * b, over="K") with random operand storage orders, a batch axis
    and an elementwise epilogue;
  * random schedules for the first family (valid ones and deliberately broken ones).
Values are kept bounded (exp is exp(-v²/2), division is by |v| + 1) so that every
failure is the compiler's, not the float format's.
"""
from __future__ import annotations

import builtins
import inspect
import itertools

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import plait.dsl as D
from plait.dsl import Tensor, algorithm

DTYPES = (D.DType.FP32, D.DType.BF16, D.DType.FP16)
_count = itertools.count()

# Ops the chain applies to the running value v; binary ones also read an input tensor.
UNARY = ("neg", "exp", "tanh", "sigmoid", "square", "relu")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "where")
REDUCE = ("sum", "max", "min", "mean")
# Ops whose derivative exists almost everywhere (finite differences agree away from kinks).
SMOOTH_UNARY = ("neg", "exp", "tanh", "sigmoid", "square")
SMOOTH_BINARY = ("add", "sub", "mul", "div", "where")


def _unary(op, v):
    return {"neg": lambda: -v,
            "exp": lambda: D.exp(-0.5 * (v * v)),
            "tanh": lambda: D.tanh(v),
            "sigmoid": lambda: D.sigmoid(v),
            # v * tanh(v) <= |v|: a square would overflow fp16 after a few steps (x^16)
            "square": lambda: v * D.tanh(v),
            "relu": lambda: D.maximum(v, 0.0)}[op]()


def _binary(op, v, w):
    return {"add": lambda: v + w,
            "sub": lambda: v - w,
            "mul": lambda: v * w,
            "div": lambda: v / (D.abs(w) + 1.0),
            "maximum": lambda: D.maximum(v, w),
            "minimum": lambda: D.minimum(v, w),
            # the condition reads an input directly, so rounding never flips it
            "where": lambda: D.where(w > 0.0, v, w)}[op]()


def _reduce(op, v, over):
    over = over[0] if len(over) == 1 else over
    return {"sum": D.sum, "max": D.max, "min": D.min, "mean": D.mean}[op](v, over=over)


def make_algorithm(params, body, name=None):
    """An @algorithm named `name` over `params` [(name, axes)] whose body is body(env)."""
    def fn(*args):
        return body(dict(zip([p for p, _ in params], args)))
    fn.__name__ = fn.__qualname__ = name or f"prop{next(_count)}"
    fn.__signature__ = inspect.Signature(
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           annotation=Tensor[tuple(axes)]) for p, axes in params])
    fn.__annotations__ = {p: Tensor[tuple(axes)] for p, axes in params}
    return algorithm(fn)


# ---- pointwise chains with reductions ----------------------------------------------------

@st.composite
def chains(draw, smooth=False, allow_reduce=True):
    """(params, steps, final): params [(name, axes)], steps over x, optional final reduction."""
    orders = [("M", "N"), ("N", "M"), ("N",), ("M",)]
    n_extra = draw(st.integers(0, 2))
    params = [("x", draw(st.sampled_from([("M", "N"), ("N", "M")])))]
    params += [(f"y{i}", draw(st.sampled_from(orders))) for i in range(n_extra)]
    names = [p for p, _ in params]
    unary, binary = (SMOOTH_UNARY, SMOOTH_BINARY) if smooth else (UNARY, BINARY)
    step = st.one_of(
        st.tuples(st.just("u"), st.sampled_from(unary)),
        st.tuples(st.just("b"), st.sampled_from(binary), st.sampled_from(names)),
        # v - reduce(v): a reduction broadcast back (softmax/layernorm shape: several kernels)
        st.tuples(st.just("r"), st.sampled_from(("sum", "mean") if smooth else REDUCE),
                  st.sampled_from((("N",), ("M",)))))
    steps = tuple(draw(st.lists(step, min_size=1, max_size=4)))
    final = None
    if allow_reduce and draw(st.booleans()):
        final = (draw(st.sampled_from(("sum", "mean") if smooth else REDUCE)),
                 draw(st.sampled_from((("N",), ("M",), ("M", "N")))))
    return tuple(params), steps, final


def chain_body(steps, final):
    def body(env):
        v = env["x"]
        for s in steps:
            if s[0] == "u":
                v = _unary(s[1], v)
            elif s[0] == "b":
                v = _binary(s[1], v, env[s[2]])
            else:
                v = v - _reduce(s[1], v, s[2])
        return _reduce(final[0], v, final[1]) if final else v
    return body


def build_chain(structure):
    params, steps, final = structure
    return make_algorithm(params, chain_body(steps, final))


# ---- contractions ------------------------------------------------------------------------

@st.composite
def contractions(draw):
    """(params, pre, epilogue): sum(pre(a) * b, over=K), operands in random storage order."""
    a = draw(st.sampled_from([("M", "K"), ("K", "M")]))
    b = draw(st.sampled_from([("K", "N"), ("N", "K")]))
    if draw(st.booleans()):
        a, b = ("B",) + a, ("B",) + b
    params = [("a", a), ("b", b)]
    epilogue = draw(st.sampled_from((None, "bias", "tanh", "scale")))
    if epilogue == "bias":
        params.append(("c", ("N",)))
    return tuple(params), epilogue


def build_contraction(structure):
    params, epilogue = structure

    def body(env):
        c = D.sum(env["a"] * env["b"], over="K")
        if epilogue == "bias":
            c = c + env["c"]
        elif epilogue == "tanh":
            c = D.tanh(c)
        elif epilogue == "scale":
            c = c * 0.5
        return c
    return make_algorithm(params, body)


# ---- shapes, inputs, schedules -------------------------------------------------------------

def axes_of(params):
    return sorted({a for _, axes in params for a in axes})


def sizes_for(params):
    """Odd extents 1..70 (rarely multiples of any tile), batch kept small."""
    return st.fixed_dictionaries(
        {a: st.integers(1, 5) if a == "B" else st.integers(1, 70) for a in axes_of(params)})


def make_inputs(algo, sizes, dtype, seed):
    """Standard normal inputs rounded to `dtype` (one DType, or one per input name)."""
    rng = np.random.default_rng(seed)
    dt = dtype if isinstance(dtype, dict) else {p.name: dtype for p in algo.tensor_params}
    return {p.name: rng.standard_normal(tuple(sizes[a] for a in p.axes))
            .astype(np.float32).astype(dt[p.name].numpy) for p in algo.tensor_params}


def reduced_count(structure, sizes) -> int:
    """How many terms the reductions of a chain add up (1 without any): a sum of n O(1)
    terms carries O(n eps) absolute error even where its value cancels to ~0."""
    _, steps, final = structure
    axes = {a for s in steps if s[0] == "r" for a in s[2]} | set(final[1] if final else ())
    n = 1
    for a in axes:
        n *= sizes[a]
    return n


def chain_error(out, ref, structure, sizes) -> float:
    """max |out - ref| over max(‖ref‖∞, reduced_count): runtime/tolerance.py's relative
    error, with a floor so that outputs that cancel to ~0 (sum of x - mean(x)) compare
    on the scale of the terms they add, not on their own rounding noise."""
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    if np.isnan(out).any() and not np.isnan(ref).any():
        return float("inf")
    scale = builtins.max(float(np.abs(ref).max(initial=0.0)), reduced_count(structure, sizes))
    return float(np.abs(out - ref).max(initial=0.0)) / scale


def representable(graph, inputs) -> bool:
    """Whether every value the graph computes, evaluated exactly (float64), stays within
    half the largest finite number of its node's dtype.

    A chain of reductions broadcast back grows by the reduced extent per step (sum over
    70 of x - sum(x) is ~70x), so an fp16 program can have an exact answer past 65504:
    the kernel's inf is then the right fp16 result and there is nothing to compare
    against. Such a program is not a valid test case; one that stays in range is kept,
    whatever the kernel computes. Half: the kernel's own roundings near the largest
    finite may rightly tip a value over it."""
    from plait.dsl import evaluate
    from plait.dsl.graph import AlgorithmGraph
    nodes = [n for n in graph.nodes if n.dtype.is_float and n.op not in ("input", "param")]
    every = AlgorithmGraph(graph.name, graph.params, graph.axis_order,
                           {f"v{i}": n for i, n in enumerate(nodes)})
    values = evaluate(every, inputs)
    return all(np.abs(values[f"v{i}"]).max(initial=0.0)
               <= float(ml_dtypes.finfo(n.dtype.numpy).max) / 2 for i, n in enumerate(nodes))


def chain_tolerance(dtype) -> float:
    """runtime/tolerance.py's bound, widened 4x: that table is set for the shipped one- or
    two-op kernels, and a random chain of up to five ops compounds the roundings of
    intermediates kept in the storage dtype (exp amplifies them)."""
    from plait.runtime.tolerance import tolerance
    return 4 * tolerance(dtype.values() if isinstance(dtype, dict) else [dtype])


POW2 = (32, 64, 128, 256, 512, 1024)


@st.composite
def valid_schedules(draw, axes):
    """A well-formed schedule over the given axes (the lowering may still refuse it cleanly)."""
    inner = draw(st.sampled_from(axes))
    others = [a for a in axes if a != inner]
    d = {"block": {inner: {"threads": draw(st.sampled_from(POW2)),
                           "vector": draw(st.sampled_from((1, 2, 4, 8)))}}}
    if others and draw(st.booleans()):
        d["grid"] = {others[0]: draw(st.sampled_from((1, 2, 3, 7, 64)))}
    return d


BAD_VALUES = (0, -1, 3, 33, 2048, 10**9, "x", None, 1.5, [], {})


@st.composite
def invalid_schedules(draw, axes):
    """A schedule broken in one drawn place: bad number, bad type, unknown axis or key."""
    d = draw(valid_schedules(axes))
    inner = next(iter(d["block"]))
    kind = draw(st.sampled_from(("threads", "vector", "grid", "axis", "key", "reduction",
                                 "occupancy", "block_type", "prefetch")))
    bad = draw(st.sampled_from(BAD_VALUES))
    if kind == "threads":
        d["block"][inner]["threads"] = draw(st.sampled_from((0, -32, 3, 48, 2048, "x", None)))
    elif kind == "vector":
        d["block"][inner]["vector"] = draw(st.sampled_from((0, -1, 3, 16, 1024, "x")))
    elif kind == "grid":
        d["grid"] = {inner: draw(st.sampled_from((0, -1, "x", 1.5, None)))}
    elif kind == "axis":
        d["block"]["Q"] = {"threads": 32}
    elif kind == "key":
        d["blokc"] = bad
    elif kind == "reduction":
        d["reduction"] = draw(st.sampled_from(("tree", 1, None)))
    elif kind == "occupancy":
        d["occupancy"] = draw(st.sampled_from((0, -1, "x", 10**6)))
    elif kind == "block_type":
        d["block"] = bad if bad not in ({},) else "x"
    else:
        d["prefetch"] = draw(st.sampled_from((-1, "x", 10**6)))
        d["grid"] = {a: 1 for a in axes if a != inner} or d.get("grid", {})
    return d
