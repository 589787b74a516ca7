"""Algebraic clean-up of derived graphs: a small table of rewrite rules.

Each rule takes a node (whose inputs are already simplified) and returns an
equivalent node, or None when it does not apply. An equivalent node has the
same axes and dtype; the driver checks that. `simplify` applies the table
bottom-up, merges common subexpressions, and repeats until nothing changes.

Example (LayerNorm dx): `broadcast(dmu) + dxc` loses its broadcast (names
broadcast implicitly), `sum_N(r * t)` becomes `r * sum_N(t)`, `x + x` becomes
`x * 2.0`, and the identity `name` ops of the forward disappear.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from plait.dsl.dtypes import DType, promote
from plait.dsl.graph import AlgorithmGraph, eliminate_common_subexpressions, format_node, rebuild
from plait.dsl.node import OPS, Node, make_attrs, topo_order


# ---- helpers ---------------------------------------------------------------------
def _node(op: str, inputs, axes, dtype: DType, loc=None, **attrs) -> Node:
    return Node(op, tuple(inputs), tuple(axes), dtype, make_attrs(**attrs), loc)


def const(value, dtype: DType, axes=(), loc=None) -> Node:
    """A scalar constant of dtype, broadcast over `axes` when given."""
    value = float(value) if dtype.is_float else (bool(value) if dtype == DType.BOOL
                                                  else int(value))
    c = _node("const", (), (), dtype, loc, value=value)
    return _node("broadcast", (c,), axes, dtype, loc) if axes else c


def value_of(n: Node):
    """The value of a constant (seen through broadcasts), else None."""
    while n.op == "broadcast":
        n = n.inputs[0]
    return n.attr("value") if n.op == "const" else None


def is_value(n: Node, v) -> bool:
    x = value_of(n)
    return x is not None and not isinstance(x, bool) and x == v


def _finite(n: Node) -> bool:
    """Certainly finite, so that n * 0 == 0 (a NaN or inf operand would not give 0)."""
    x = value_of(n)
    if x is not None:
        return math.isfinite(x)
    if n.op == "cast" and not n.inputs[0].dtype.is_float:
        # an integer as a float: only fp16 (max 65504) can overflow to inf; fp8 saturates
        return n.dtype != DType.FP16
    return n.op == "size" or not n.dtype.is_float


def _same(a: Node, like: Node) -> Node | None:
    return a if a.axes == like.axes and a.dtype == like.dtype else None


def _exact(src: DType, via: DType) -> bool:
    """Does `via` hold every value of `src` exactly (so a round trip through it is a no-op)?"""
    return src.is_float and via.is_float and promote(src, via) == via


# ---- the rules ---------------------------------------------------------------------
def drop_names(n: Node):
    """name(x, label) -> x, stop_gradient(x) -> x: identities once differentiated.

    (The label matters to the forward's schedule, the stop to differentiation:
    simplify a forward graph you still mean to differentiate without this rule.)
    """
    return n.inputs[0] if n.op in ("name", "stop_gradient") else None


def merge_casts(n: Node):
    """cast(x, x.dtype) -> x; cast(cast(x, wider), T) -> cast(x, T)."""
    if n.op != "cast":
        return None
    x = n.inputs[0]
    if x.dtype == n.dtype:
        return x
    if x.op == "cast" and _exact(x.inputs[0].dtype, x.dtype):
        inner = x.inputs[0]
        return inner if inner.dtype == n.dtype else _node("cast", (inner,), n.axes, n.dtype,
                                                          n.loc)
    return None


_FOLD_CTX = SimpleNamespace(round=False, sizes={}, inputs={})


def fold_constants(n: Node):
    """An elementwise op on scalar constants is a constant (computed in float64)."""
    if OPS[n.op].kind != "elementwise" or not n.inputs or n.axes:
        return None
    if n.dtype.kind == "int":  # integer semantics (division, overflow) are the GPU's to keep
        return None
    if any(i.op != "const" for i in n.inputs):
        return None
    args = [np.float64(i.attr("value")) if i.dtype.is_float
            else np.asarray(i.attr("value"), i.dtype.numpy) for i in n.inputs]
    with np.errstate(all="ignore"):
        value = np.asarray(OPS[n.op].evaluate(n, _FOLD_CTX, *args)).item()
    return const(value, n.dtype, loc=n.loc)


def hoist_broadcasts(n: Node):
    """op(broadcast(a), b) -> op(a, b), broadcast again only if a alone had the axis.

    Broadcasting by name is implicit in elementwise ops, so an explicit
    broadcast feeding one is dropped, or moved past the op when no other
    operand has the axis (then the op runs over fewer elements).
    """
    if OPS[n.op].kind != "elementwise":
        return None
    if not any(i.op == "broadcast" for i in n.inputs):
        return None
    sources = tuple(i.inputs[0] if i.op == "broadcast" else i for i in n.inputs)
    present = {a for s in sources for a in s.axes}
    axes = tuple(a for a in n.axes if a in present)
    inner = _node(n.op, sources, axes, n.dtype, n.loc, **dict(n.attrs))
    return inner if axes == n.axes else _node("broadcast", (inner,), n.axes, n.dtype, n.loc)


def collapse_broadcasts(n: Node):
    """broadcast(broadcast(x)) -> broadcast(x); broadcast to x's own axes -> x."""
    if n.op != "broadcast":
        return None
    x = n.inputs[0]
    if x.axes == n.axes:
        return _same(x, n)
    if x.op == "broadcast":
        return _node("broadcast", x.inputs, n.axes, n.dtype, n.loc)
    return None


def reduce_broadcast(n: Node):
    """sum_a(broadcast(x)) with x lacking a -> x * size(a); over an axis x has: reduce x first."""
    if OPS[n.op].kind != "reduce" or n.inputs[0].op != "broadcast":
        return None
    x, axis = n.inputs[0].inputs[0], n.attr("axis")
    if axis in x.axes:
        inner = _node(n.op, (x,), tuple(a for a in x.axes if a != axis), n.dtype, n.loc,
                      axis=axis)
    elif n.op == "sum":
        if not n.dtype.is_float:
            return None
        inner = _node("mul", (x, _node("size", (), (), x.dtype, n.loc, axis=axis)),
                      x.axes, n.dtype, n.loc)
    else:  # max / min of copies is the value itself
        inner = x
    return inner if inner.axes == n.axes else _node("broadcast", (inner,), n.axes, n.dtype,
                                                    n.loc)


def factor_reductions(n: Node):
    """sum_a(u * v) -> sum_a(u) * v when v lacks a (also u / v, and -u)."""
    if n.op != "sum":
        return None
    p, axis = n.inputs[0], n.attr("axis")
    if p.op == "neg":
        inner = _node("sum", p.inputs, n.axes, n.dtype, n.loc, axis=axis)
        return _node("neg", (inner,), n.axes, n.dtype, n.loc)
    if p.op not in ("mul", "div"):
        return None
    u, v = p.inputs
    if p.op == "mul" and axis not in u.axes and axis in v.axes:
        u, v = v, u
    if axis in v.axes or axis not in u.axes or u.dtype != n.dtype:
        return None
    reduced = _node("sum", (u,), tuple(a for a in u.axes if a != axis), n.dtype, n.loc,
                    axis=axis)
    return _node(p.op, (reduced, v), n.axes, n.dtype, n.loc)


def _has_outer_factor(n: Node, axis: str) -> bool:
    """Is n a product (or quotient, or negation of one) with a factor lacking `axis`,
    which factor_reductions can pull out of a sum over it?"""
    while n.op == "neg":
        n = n.inputs[0]
    if n.op == "mul":
        return any(axis not in i.axes for i in n.inputs) or \
            any(_has_outer_factor(i, axis) for i in n.inputs)
    if n.op == "div":
        return axis not in n.inputs[1].axes or _has_outer_factor(n.inputs[0], axis)
    return False


def distribute_reductions(n: Node):
    """sum_a(u + v) -> sum_a(u) + sum_a(v) (and -) when u or v has a factor lacking a.

    The factors then leave the sums (factor_reductions), and the sums left depend on
    fewer values: LayerNorm's dx needs sum(dy*w) and sum(dy*w*xhat) side by side, one
    round of reductions instead of one after the other.
    """
    if n.op != "sum":
        return None
    p, axis = n.inputs[0], n.attr("axis")
    if p.op not in ("add", "sub") or p.dtype != n.dtype:
        return None
    u, v = p.inputs
    if axis not in u.axes or axis not in v.axes or u.dtype != n.dtype or v.dtype != n.dtype:
        return None
    if not (_has_outer_factor(u, axis) or _has_outer_factor(v, axis)):
        return None
    parts = [_node("sum", (t,), tuple(a for a in t.axes if a != axis), n.dtype, n.loc,
                   axis=axis) for t in (u, v)]
    if any(part.axes != n.axes for part in parts):
        return None
    return _node(p.op, parts, n.axes, n.dtype, n.loc)


def centered_sums_vanish(n: Node):
    """sum_a(c * (u - sum_a(u) / size(a))) -> 0, c any factors lacking a: a value less its
    mean sums to zero, and so does any multiple of it constant along a.

    Exact for finite values (where u or c is not finite, the gradient holding this sum is
    not finite either). It removes the term distribute_reductions leaves in LayerNorm's dx.
    """
    if n.op != "sum":
        return None
    axis = n.attr("axis")
    t = n.inputs[0]
    while t.op in ("mul", "div", "neg"):
        if t.op == "neg":
            t = t.inputs[0]
            continue
        inner = [i for i in t.inputs if axis in i.axes]
        if len(inner) != 1 or (t.op == "div" and inner[0] is not t.inputs[0]):
            return None
        t = inner[0]
    if t.op != "sub":
        return None
    u, m = t.inputs
    while m.op == "broadcast":
        m = m.inputs[0]
    if m.op != "div" or m.inputs[1].op != "size" or m.inputs[1].attr("axis") != axis:
        return None
    total = m.inputs[0]
    if total.op == "sum" and total.attr("axis") == axis and total.inputs[0] is u:
        return const(0.0, n.dtype, n.axes, n.loc)
    return None


def _power_of_two(n: Node) -> float | None:  # noqa: D401
    """The value of a scalar constant ±2^k (multiplying by it rounds nothing), else None."""
    x = value_of(n)
    if x is None or isinstance(x, bool) or not n.dtype.is_float or n.axes or x == 0 \
            or not math.isfinite(x):
        return None
    mantissa, _ = math.frexp(abs(x))
    return float(x) if mantissa == 0.5 else None


def _without_scale(x: Node, depth: int = 8):
    """(x with one ±2^k factor of its product chain taken out, that factor) or None."""
    if depth == 0 or x.op not in ("mul", "div"):
        return None
    left, right = x.inputs
    if x.op == "mul":
        for c, rest in ((right, left), (left, right)):
            if _power_of_two(c) is not None and rest.axes == x.axes and rest.dtype == x.dtype:
                return rest, _power_of_two(c)
    found = _without_scale(left, depth - 1)
    if found is None and x.op == "mul":
        found = _without_scale(right, depth - 1)
        if found is not None:
            return _node("mul", (left, found[0]), x.axes, x.dtype, x.loc), found[1]
    if found is None:
        return None
    return _node(x.op, (found[0], right), x.axes, x.dtype, x.loc), found[1]


def fold_scales(n: Node):
    """(... * c1 ...) * c2 -> (...) * (c1 * c2) for c1, c2 = ±2^k, exact: a gradient's
    -0.5 ... * 2.0 cancel (x * -1 then becomes -x)."""
    if n.op != "mul":
        return None
    x, c2 = n.inputs
    if _power_of_two(c2) is None:
        x, c2 = c2, x
    if _power_of_two(c2) is None or _power_of_two(x) is not None:
        return None
    found = _without_scale(x)
    if found is None:
        return None
    rest, c1 = found
    scale = c1 * _power_of_two(c2)
    if rest.axes != n.axes:
        return None
    return rest if scale == 1.0 else _node("mul", (rest, const(scale, n.dtype)), n.axes,
                                           n.dtype, n.loc)


def identities(n: Node):
    """x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 -> x; where(c, a, a) -> a; --x -> x."""
    if n.op in ("add", "sub", "mul", "div"):
        a, b = n.inputs
        unit = 0 if n.op in ("add", "sub") else 1
        if is_value(b, unit):
            return _same(a, n)
        if n.op in ("add", "mul") and is_value(a, unit):
            return _same(b, n)
    if n.op == "where" and n.inputs[1] is n.inputs[2]:
        return _same(n.inputs[1], n)
    if n.op == "neg" and n.inputs[0].op == "neg":
        return _same(n.inputs[0].inputs[0], n)
    return None


def zeros(n: Node):
    """x * 0 -> 0 (x certainly finite); 0 - x -> -x; where(c, 0, 0) -> 0; x * -1 -> -x."""
    if n.op == "mul":
        for z, x in (n.inputs, n.inputs[::-1]):
            if is_value(z, 0) and _finite(x):
                return const(0.0, n.dtype, n.axes, n.loc)
            if is_value(z, -1) and _same(x, n):
                return _node("neg", (x,), n.axes, n.dtype, n.loc)
    if n.op == "sub" and is_value(n.inputs[0], 0) and _same(n.inputs[1], n):
        return _node("neg", (n.inputs[1],), n.axes, n.dtype, n.loc)
    if n.op == "where":
        c, a, b = n.inputs
        va, vb = value_of(a), value_of(b)
        if va is not None and va == vb and a.dtype == b.dtype:
            return const(va, n.dtype, n.axes, n.loc)
    return None


def negations(n: Node):
    """a + -b -> a - b; -a + b -> b - a; a - -b -> a + b; -a * b, a / -b ... -> -(a * b)."""
    if n.op not in ("add", "sub", "mul", "div") or any(i.dtype != n.dtype for i in n.inputs):
        return None
    a, b = n.inputs
    if n.op == "add" and b.op == "neg":
        return _node("sub", (a, b.inputs[0]), n.axes, n.dtype, n.loc)
    if n.op == "add" and a.op == "neg":
        return _node("sub", (b, a.inputs[0]), n.axes, n.dtype, n.loc)
    if n.op == "sub" and b.op == "neg":
        return _node("add", (a, b.inputs[0]), n.axes, n.dtype, n.loc)
    if n.op in ("mul", "div") and (a.op == "neg") != (b.op == "neg"):
        # Pull the sign out, where an add or sub above can absorb it.
        inner = (a.inputs[0] if a.op == "neg" else a, b.inputs[0] if b.op == "neg" else b)
        return _node("neg", (_node(n.op, inner, n.axes, n.dtype, n.loc),), n.axes, n.dtype,
                     n.loc)
    if n.op in ("mul", "div") and a.op == "neg" and b.op == "neg":
        return _node(n.op, (a.inputs[0], b.inputs[0]), n.axes, n.dtype, n.loc)
    return None


def doubling(n: Node):
    """x + x -> x * 2; (a + x) + x -> a + x * 2 (gradient shares often arrive twice)."""
    if n.op != "add" or not n.dtype.is_float or any(i.dtype != n.dtype for i in n.inputs):
        return None
    a, x = n.inputs
    if a is x:
        return _node("mul", (x, const(2.0, n.dtype, loc=n.loc)), n.axes, n.dtype, n.loc)
    if a.op == "add" and a.inputs[1] is x and a.inputs[0].dtype == n.dtype:
        twice = _node("mul", (x, const(2.0, n.dtype, loc=n.loc)), x.axes, n.dtype, n.loc)
        return _node("add", (a.inputs[0], twice), n.axes, n.dtype, n.loc)
    return None


def common_divisor(n: Node):
    """a / s + b / s -> (a + b) / s (and for -): one division instead of two."""
    if n.op not in ("add", "sub") or any(i.op != "div" for i in n.inputs):
        return None
    (a, s), (b, t) = (i.inputs for i in n.inputs)
    if s is not t or any(i.dtype != n.dtype for i in (a, b, s)):
        return None
    top = tuple(x for x in n.axes if x in a.axes or x in b.axes)
    return _node("div", (_node(n.op, (a, b), top, n.dtype, n.loc), s), n.axes, n.dtype, n.loc)


def divide_late(n: Node):
    """(c / s) * e -> c * (e / s) when c spans the result (same cost either way).

    The point is the spelling: `e / s` is often a forward value (softmax's
    output), which the backward then shares or reads when it is saved.
    """
    if n.op != "mul":
        return None
    # Only with the quotient on the left: the result has it on the right, so
    # the rule cannot undo itself.
    d, e = n.inputs
    if d.op == "div" and d.inputs[0].axes == n.axes and e.op not in ("const", "div") \
            and all(i.dtype == n.dtype for i in (*d.inputs, e)):
        c, s = d.inputs
        ratio_axes = tuple(x for x in n.axes if x in e.axes or x in s.axes)
        ratio = _node("div", (e, s), ratio_axes, n.dtype, n.loc)
        return _node("mul", (c, ratio), n.axes, n.dtype, n.loc)
    return None


def _is_softmax(p: Node, axis: str) -> bool:
    """p = exp(x - max(x, over=axis)) / sum(exp(x - max(x, over=axis)), over=axis)."""
    if p.op != "div":
        return False
    e, z = p.inputs
    if e.op != "exp" or z.op != "sum" or z.attr("axis") != axis or z.inputs[0] is not e:
        return False
    d = e.inputs[0]
    return d.op == "sub" and d.inputs[1].op == "max" and d.inputs[1].attr("axis") == axis \
        and d.inputs[1].inputs[0] is d.inputs[0]


def softmax_expectation(n: Node):
    """sum_X(sum_Y(a * b) * p) -> sum_Y(a * sum_X(p * b)) when p is a softmax over X, a
    lacks X and p lacks Y.

    The same products, summed in the other order; what it buys is the inner sum: it is
    the forward's own output when that is p-weighted b (attention's backward row term
    sum_T(dP * P) with dP = sum_E(dout * v) becomes sum_E(dout * out)), read back when
    saved and otherwise one streamed pass, where the other order needs every score.
    """
    if n.op != "sum":
        return None
    x_axis, prod = n.attr("axis"), n.inputs[0]
    if prod.op != "mul":
        return None
    for u, p in (prod.inputs, prod.inputs[::-1]):
        if u.op != "sum" or u.inputs[0].op != "mul" or not _is_softmax(p, x_axis):
            continue
        y_axis = u.attr("axis")
        if y_axis in p.axes:
            continue
        for a, b in (u.inputs[0].inputs, u.inputs[0].inputs[::-1]):
            if x_axis in a.axes or x_axis not in b.axes:
                continue
            full = u.inputs[0].axes       # a's and b's axes in canonical order: p's too
            if not set(p.axes) <= set(full):
                return None
            weighted = _node("mul", (p, b), [ax for ax in full if ax in p.axes or ax in b.axes],
                             promote(p.dtype, b.dtype), n.loc)
            expect = _node("sum", (weighted,), [ax for ax in weighted.axes if ax != x_axis],
                           weighted.dtype, n.loc, axis=x_axis)
            outer = _node("mul", (a, expect),
                          [ax for ax in full if ax in a.axes or ax in expect.axes],
                          promote(a.dtype, expect.dtype), n.loc)
            if set(outer.axes) != set(n.axes) | {y_axis} or outer.dtype != n.dtype:
                return None
            return _node("sum", (outer,), n.axes, n.dtype, n.loc, axis=y_axis)
    return None


RULES = (drop_names, merge_casts, fold_constants, collapse_broadcasts, hoist_broadcasts,
         reduce_broadcast, centered_sums_vanish, factor_reductions, distribute_reductions,
         softmax_expectation, fold_scales, identities, zeros,
         negations, doubling, common_divisor, divide_late)


# ---- the driver --------------------------------------------------------------------
def _rewrite(node: Node, inputs: tuple[Node, ...], rules) -> Node:
    if inputs != node.inputs:
        node = Node(node.op, inputs, node.axes, node.dtype, node.attrs, node.loc)
    for _ in range(100):  # each rule shrinks or normalises; the cap is a safety net
        for rule in rules:
            new = rule(node)
            if new is not None and new is not node:
                if new.axes != node.axes or new.dtype != node.dtype:
                    raise AssertionError(f"simplify rule {rule.__name__} changed "
                                         f"{node} into {new}")
                node = new
                break
        else:
            return node
    return node


def _signature(outputs: dict[str, Node]) -> tuple:
    names: dict[int, str] = {}
    lines = []
    for i, n in enumerate(topo_order(list(outputs.values()))):
        names[n.uid] = f"%{i}"
        lines.append(format_node(n, names))
    return tuple(lines) + tuple(names[n.uid] for n in outputs.values())


def simplify_outputs(outputs: dict[str, Node], rules=RULES) -> dict[str, Node]:
    """Apply `rules` bottom-up and merge common subexpressions until nothing changes."""
    outputs = eliminate_common_subexpressions(outputs)
    before = _signature(outputs)
    for _ in range(20):
        outputs = rebuild(outputs, lambda n, new: _rewrite(n, new, rules))
        outputs = eliminate_common_subexpressions(outputs)
        after = _signature(outputs)
        if after == before:
            break
        before = after
    return outputs


def simplify(graph: AlgorithmGraph, rules=RULES) -> AlgorithmGraph:
    """The same algorithm with the rewrite table applied (see the module docstring)."""
    return AlgorithmGraph(graph.name, graph.params, graph.axis_order,
                          simplify_outputs(graph.outputs, rules))
