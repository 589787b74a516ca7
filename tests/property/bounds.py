"""How far a result may rightly be from the float64 reference: a forward error bound.

The bound is a first-order error analysis run over the algorithm graph itself, with the
reference's own values for the magnitudes: each node adds at most one rounding of its
value to its dtype plus fp32 arithmetic ahead of it (`own`), and passes its operands'
errors on, scaled by the op's sensitivity (|d out / d in| bounded with the operands'
actual extremes: a product passes e_a times max|b|, a sum over n passes n times e_a).
A sum's own rounding is measured on the terms it adds (n times max|term|), so a result
that cancels to ~0 is compared on the scale of its terms, not of its own noise. Floats
are bounded elementwise by one number per node (max over the array), which only widens
the bound; ints and bools must be exact. One bound serves every dtype, schedule and
gradient graph alike, and a wrong answer (an OR for a count, a NaN, a transposed
result) is off by far more than any rounding.
"""
from __future__ import annotations

import math

import numpy as np

from plait.dsl import evaluate
from plait.dsl.dtypes import DType
from plait.dsl.graph import AlgorithmGraph
from plait.dsl.reference import bind_sizes

# Unit roundoff of each float format (half an ulp at 1): one rounding errs by at most this.
UNIT = {DType.FP32: 2.0**-24, DType.BF16: 2.0**-8, DType.FP16: 2.0**-11,
        DType.FP8_E4M3: 2.0**-4, DType.FP8_E5M2: 2.0**-3}
# Below the smallest normal a rounding errs absolutely: by half the smallest subnormal (an
# fp8 e4m3 of 1e-4 is 0, not 1e-4 within 2^-4 of itself).
UNDERFLOW = {DType.FP32: 2.0**-150, DType.BF16: 2.0**-134, DType.FP16: 2.0**-25,
             DType.FP8_E4M3: 2.0**-10, DType.FP8_E5M2: 2.0**-17}
# fp32 arithmetic ahead of the rounding: exp as exp2(x * log2 e) loses |x| ulps, the CPU
# spec of tanh/erf errs by ~1e-7 absolute, and a reduction's fp32 partial sums chain up to
# a few hundred additions: 2^-18 (64 fp32 ulps) of the value covers each.
FP32_WORK = 2.0**-18
# Two float64 evaluations (the reference and torch) differ by libm's last-bit choices and
# summation order: <= n u sum|x| for n terms, so 2^-40 (~8000 float64 ulps) covers sums of
# up to 8000 terms in any order.
FLOAT64_WORK = 2.0**-40

_PASS = {"neg", "abs", "permute", "name", "stop_gradient", "broadcast", "rotate_half",
         "blocked", "max", "min", "maximum", "minimum"}
_LIPSCHITZ = {"tanh": 1.0, "sigmoid": 0.25, "erf": 2 / math.sqrt(math.pi), "sin": 1.0,
              "cos": 1.0}


def executor_rounding(dtype: DType) -> float:
    """The own error of a node of `dtype` run by the CPU executor, relative to its size."""
    return UNIT[dtype] + FP32_WORK if dtype.is_float else 0.0


def float64_rounding(dtype: DType) -> float:
    return FLOAT64_WORK if dtype.is_float else 0.0


def node_values(graph: AlgorithmGraph, inputs: dict) -> dict[int, np.ndarray]:
    """The reference value of every node (by uid), inputs included."""
    nodes = [n for n in graph.nodes if n.op not in ("input", "param")]
    every = AlgorithmGraph(graph.name, graph.params, graph.axis_order,
                           {f"v{i}": n for i, n in enumerate(nodes)})
    with np.errstate(all="ignore"):
        values = evaluate(every, inputs)
    out = {n.uid: values[f"v{i}"] for i, n in enumerate(nodes)}
    for n in graph.nodes:
        if n.op == "input":
            out[n.uid] = np.asarray(inputs[n.attr("name")], np.float64)
        elif n.op == "param":
            out[n.uid] = np.asarray(inputs.get(n.attr("name"), n.attr("default")), np.float64)
    return out


def _extreme(value, fn, empty):
    v = np.abs(np.asarray(value, np.float64))
    v = v[np.isfinite(v)]
    return float(fn(v)) if v.size else empty


def error_bounds(graph: AlgorithmGraph, inputs: dict, rounding) -> dict[str, float]:
    """{output name: max |result - reference| a correct evaluation may show}, where
    `rounding(dtype)` is a node's own relative error."""
    _, err = node_errors(graph, inputs, rounding)
    return {k: err[n.uid] for k, n in graph.outputs.items()}


def infinity_times_rounded_zero(graph: AlgorithmGraph, inputs: dict, rounding) -> bool:
    """Does a product take an infinity and a value within its rounding error of 0? The
    exact math gives an infinity there, a rounding that reaches 0 (x flushed to 0 by a
    cast to fp8) NaN: both right, so no answer to compare (forward seed 4300123:
    -inf * fp8(x) with x below fp8's smallest subnormal)."""
    values, err = node_errors(graph, inputs, rounding)
    sizes = bind_sizes(graph, {p.name: np.shape(inputs[p.name]) for p in graph.params
                               if p.is_tensor})
    for n in graph.nodes:
        if n.op != "mul" or not n.dtype.is_float:
            continue
        shape = tuple(sizes[a] for a in n.axes)
        a, b = (np.broadcast_to(_align(values[i.uid], i.axes, n.axes), shape)
                for i in n.inputs)
        ea, eb = (err[i.uid] for i in n.inputs)
        with np.errstate(invalid="ignore"):
            if ((np.isinf(a) & (np.abs(b) <= eb) & (eb > 0)) |
                    (np.isinf(b) & (np.abs(a) <= ea) & (ea > 0))).any():
                return True
    return False


def node_errors(graph: AlgorithmGraph, inputs: dict, rounding):
    """(reference value, max |result - reference| a correct evaluation may show) of
    every node, by uid; `rounding(dtype)` is a node's own relative error."""
    values = node_values(graph, inputs)
    sizes = bind_sizes(graph, {p.name: np.shape(inputs[p.name]) for p in graph.params
                               if p.is_tensor})
    big = {u: _extreme(v, np.max, 0.0) for u, v in values.items()}
    small = {u: _extreme(v, np.min, 0.0) for u, v in values.items()}
    err: dict[int, float] = {}
    for n in graph.nodes:
        ins = [i.uid for i in n.inputs]
        e = [err[i] for i in ins]
        scale = big[n.uid]
        if n.op in ("input", "param", "const", "iota", "size") or not n.dtype.is_float:
            err[n.uid] = 0.0
            continue
        if n.op in _PASS:
            passed = builtins_max(e)
        elif n.op in ("add", "sub"):
            passed = e[0] + e[1]
        elif n.op == "mul":     # (a + ea)(b + eb) - ab: ea*eb stays where a and b are 0
            passed = big[ins[1]] * e[0] + big[ins[0]] * e[1] + e[0] * e[1]
        elif n.op == "div":
            low = small[ins[1]]
            passed = math.inf if low == 0 and any(e) else (
                e[0] / low + big[ins[0]] * e[1] / low**2 if any(e) else 0.0)
        elif n.op == "where":
            passed = builtins_max(e[1:]) + _flips(n, values, err, sizes)
        elif n.op in ("exp", "exp2"):
            passed = big[n.uid] * e[0] * (math.log(2) if n.op == "exp2" else 1.0)
        elif n.op in ("log", "log2", "sqrt"):
            low = small[ins[0]] if n.op != "sqrt" else 2 * small[n.uid]
            passed = (e[0] / low if low else math.inf) if e[0] else 0.0
        elif n.op == "rsqrt":
            passed = 0.5 * big[n.uid] ** 3 * e[0]
        elif n.op in _LIPSCHITZ:
            passed = _LIPSCHITZ[n.op] * e[0]
        elif n.op == "cast":
            passed = e[0] + _cast_flips(n, values, err, sizes)
        elif n.op == "sum":
            count = sizes[n.attr("axis")]
            passed, scale = count * e[0], count * big[ins[0]]
        else:
            raise KeyError(f"no error rule for op {n.op!r}")
        err[n.uid] = passed + rounding(n.dtype) * scale + \
            (UNDERFLOW.get(n.dtype, 0.0) if rounding is executor_rounding else 0.0)
    return values, err


_COMPARISONS = {"lt", "le", "gt", "ge", "eq", "ne"}


def _flips(n, values, err, sizes) -> float:
    """What where(l <op> r, a, b) may rightly differ by where l and r carry rounding error:
    |a - b| wherever |l - r| is within that error, as the condition may go either way
    there (maximum's gradient picks a side by a >= b, abs's by x >= 0)."""
    near = _near(n.inputs[0], n.axes, values, err, sizes)
    if near is None:
        return 0.0
    shape = near.shape

    def full(node):
        return np.broadcast_to(_align(values[node.uid], node.axes, n.axes), shape)
    with np.errstate(invalid="ignore"):
        spread = np.abs(full(n.inputs[1]) - full(n.inputs[2]))
    spread = np.where(near & np.isfinite(spread), spread, 0.0)
    return float(spread.max(initial=0.0))


def _cast_flips(n, values, err, sizes) -> float:
    """A comparison cast to a float (a tie count: min's gradient sums eq(x, min(x))) may
    rightly be 0 or 1 wherever its operands are within their rounding error: two values
    that differ exactly can round to one narrow value and tie in the kernel."""
    cond = n.inputs[0]
    near = _near(cond, n.axes, values, err, sizes, strict=cond.op in ("eq", "ne"))
    return 1.0 if near is not None and near.any() else 0.0


def _near(cond, axes, values, err, sizes, strict=False):
    """Where comparison `cond` (viewed over `axes`) may go either way: its operands within
    their rounding errors of each other; None when it is no comparison or exact. `strict`
    leaves out operands exactly equal: rounding keeps an equality (x == min(x) at the
    minimum), only values apart can meet."""
    if cond.op not in _COMPARISONS:
        return None
    slack = err[cond.inputs[0].uid] + err[cond.inputs[1].uid]
    if slack == 0:
        return None
    shape = tuple(sizes[a] for a in axes)

    def full(node):
        return np.broadcast_to(_align(values[node.uid], node.axes, axes), shape)
    with np.errstate(invalid="ignore"):
        gap = np.abs(full(cond.inputs[0]) - full(cond.inputs[1]))
        return (gap <= slack) & (gap > 0) if strict else gap <= slack


def _align(value, src, dst):
    """value (dims in src order) viewed over dst, size-1 dims where src lacks an axis."""
    value = np.asarray(value, np.float64)
    if not src:
        return value.reshape((1,) * len(dst))
    value = np.transpose(value, [src.index(a) for a in dst if a in src])
    return value.reshape([value.shape[[a for a in dst if a in src].index(a)] if a in src
                          else 1 for a in dst])


def builtins_max(values) -> float:
    return max(values, default=0.0)


def mismatch(out, ref, bound: float) -> str | None:
    """None where out agrees with ref within bound (NaN where ref is NaN, the same infinities,
    finite values within bound), else a line saying where and by how much it does not."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        return f"shape {out.shape}, reference {ref.shape}"
    out = out.astype(np.float64)
    ref = ref.astype(np.float64)
    nan = np.isnan(ref)
    bad = nan != np.isnan(out)
    inf = np.isinf(ref) | np.isinf(out)
    bad |= inf & ~nan & (out != ref)
    finite = ~nan & ~inf
    with np.errstate(invalid="ignore"):
        diff = np.where(finite, np.abs(out - ref), 0.0)
    bad |= diff > bound
    if not bad.any():
        return None
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements off, first at {at}: {out[at]!r} vs "
            f"{ref[at]!r} (max |diff| {float(diff.max()):.3g}, bound {bound:.3g})")
