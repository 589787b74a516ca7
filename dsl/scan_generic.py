"""`scan`: an inclusive scan of a tuple state with an associative combine.

    h_a, h = scan(combine, (1.0, 0.0), (a, b), over="L")

    def combine(left, right):            # (a1, b1) o (a2, b2)
        a1, b1 = left
        a2, b2 = right
        return a1 * a2, a2 * b1 + b2      # h_t = a_t * h_{t-1} + b_t: the b part is h

`combine(left, right)` is written with plait ops on tensors and traced once, on scalar
placeholders of the state's dtypes; it must return the state (a tuple of as many tensors,
of the same dtypes, or one tensor for a one-part state), read nothing but its two
arguments and constants, and be associative: the kernels fold it in a tree (lanes, warps,
chunks), the reference in a sequential Python loop, and the two agree only then.
`init` is the combine's identity, one number per part: combine(init, s) == s; it starts
every prefix and fills the positions outside the tensor. (To start a recurrence from a
state h0, fold it into the first element.) `xs` are the per-position elements, a tensor
or a tuple of them (broadcast to their axes' union); the result is a tuple of the state's
parts over those axes (or one tensor), `y_t = x_0 o x_1 o ... o x_t`; with reverse=True,
`y_t = x_t o ... o x_last`.

Each part is one node `scan` (attribute `part`) with the same inputs, combine and init, so
lowering computes the state once (tileir/scan.py) and each part reads its own. No
gradient is derived through a `scan` (autodiff refuses it by name).
"""
from __future__ import annotations

import numpy as np

from .dtypes import DType
from .errors import PlaitError, user_location
from .node import OPS, Node, OpDef, register, topo_order
from .tensor import Tensor, _over, canonical_axes, constant, new_node


def _placeholder_eval(n, ctx):
    raise PlaitError("a scan's combine argument was evaluated outside its scan", n.loc)


register(OpDef("scan_arg", "source", _placeholder_eval))


def evaluate_combine(node: Node, left: tuple, right: tuple) -> tuple:
    """The combine of scan `node` on float64 (or integer) arrays, node by node."""
    values = {}
    for p, v in zip(node.attr("args"), left + right):
        values[p.uid] = v
    for n in topo_order(list(node.attr("combine"))):
        if n.uid not in values:
            args = [values[i.uid] for i in n.inputs]
            values[n.uid] = np.asarray(OPS[n.op].evaluate(n, None, *args))
            if not n.dtype.is_float:
                values[n.uid] = values[n.uid].astype(n.dtype.numpy)
    return tuple(values[r.uid] for r in node.attr("combine"))


def _scan_eval(n, ctx, *xs):
    """The sequential Python loop: s = init; s = combine(s, x_t) along the axis."""
    axis = n.axes.index(n.attr("axis"))
    shape = tuple(ctx.sizes[a] for a in n.axes)
    xs = [np.moveaxis(np.broadcast_to(_aligned(x, i.axes, n.axes), shape), axis, 0)
          for x, i in zip(xs, n.inputs)]
    types = [p.dtype for p in n.attr("args")[:len(xs)]]
    state = tuple(np.full(shape[:axis] + shape[axis + 1:], v, np.float64 if t.is_float
                          else t.numpy) for v, t in zip(n.attr("init"), types))
    out = np.empty((shape[axis],) + state[0].shape, state[n.attr("part")].dtype)
    steps = range(shape[axis])
    with np.errstate(all="ignore"):
        for t in (reversed(steps) if n.attr("reverse") else steps):
            element = tuple(np.asarray(x[t]) for x in xs)
            state = evaluate_combine(n, element, state) if n.attr("reverse") else \
                evaluate_combine(n, state, element)
            out[t] = state[n.attr("part")]
    return np.moveaxis(out, 0, axis)


def _aligned(x, src, dst):
    x = np.asarray(x)
    if not src:
        return x
    moved = np.transpose(x, [src.index(a) for a in dst if a in src])
    return np.expand_dims(moved, tuple(i for i, a in enumerate(dst) if a not in src))


register(OpDef("scan", "scan", _scan_eval, None))


def _trace_combine(combine, types: list[DType]):
    parts = len(types)
    args = tuple(Node("scan_arg", (), (), t, (("index", i),), user_location())
                 for i, t in enumerate(types + types))
    left = tuple(Tensor(a) for a in args[:parts])
    right = tuple(Tensor(a) for a in args[parts:])
    result = combine(left if parts > 1 else left[0], right if parts > 1 else right[0])
    result = result if isinstance(result, tuple) else (result,)
    if len(result) != parts or not all(isinstance(r, Tensor) for r in result):
        raise PlaitError(f"scan: combine must return the state, {parts} tensor(s), not "
                         f"{result!r}", user_location())
    for i, (r, t) in enumerate(zip(result, types)):
        if r.dtype != t:
            raise PlaitError(f"scan: combine returns part {i} as {r.dtype}, but the state's "
                             f"part {i} is {t}: cast it", user_location())
    for n in topo_order([r.node for r in result]):
        kind = OPS[n.op].kind
        if n.op in ("scan_arg", "const") or kind == "elementwise" and n.inputs:
            continue
        what = n.attr("name") or n.op
        raise PlaitError(f"scan: combine may use its two arguments, constants and "
                         f"elementwise ops only, not {what!r}", n.loc or user_location())
    return args, tuple(r.node for r in result)


def scan(combine, init, xs, over=None, reverse: bool = False):
    """The inclusive scan of the tuple state `xs` along `over` with the associative
    `combine` and its identity `init` (see the module doc)."""
    single = not isinstance(xs, (tuple, list))
    xs = (xs,) if single else tuple(xs)
    init = (init,) if not isinstance(init, (tuple, list)) else tuple(init)
    if not xs or not all(isinstance(x, Tensor) for x in xs):
        raise PlaitError("scan(combine, init, xs, ...): xs must be a plait tensor or a tuple "
                         "of them", user_location())
    if len(init) != len(xs) or not all(isinstance(v, (bool, int, float)) for v in init):
        raise PlaitError(f"scan: init must be one number per part of the state ({len(xs)}), "
                         f"not {init!r}", user_location())
    if not isinstance(over, str) or not isinstance(reverse, bool):
        raise PlaitError("scan needs over=AXIS, one axis name, and reverse=True or False",
                         user_location())
    axes = canonical_axes(tuple(a for x in xs for a in x.axes))
    if over not in axes:
        _over(xs[0], over, "scan")
    types = [x.dtype if x.dtype.is_float or x.dtype in (DType.INT32, DType.INT64)
             else DType.INT32 for x in xs]
    xs = tuple(x if x.dtype == t else new_node("cast", (x,), x.axes, t)
               for x, t in zip(xs, types))
    for v, t in zip(init, types):
        constant(v, t)                    # an init that does not fit its part is refused
    args, result = _trace_combine(combine, types)
    init = tuple(float(v) if t.is_float else int(v) for v, t in zip(init, types))
    parts = tuple(new_node("scan", xs, axes, t, axis=over, combine=result, args=args,
                           init=init, part=i, **({"reverse": True} if reverse else {}))
                  for i, t in enumerate(types))
    return parts[0] if single else parts
