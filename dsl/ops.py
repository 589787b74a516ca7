"""Every primitive op: its user-facing function, reference evaluation and gradient rule.

The rules of one op stand together so that adding an op means adding one
block here (and one lowering rule in `plait.lowering.nvptx.ops` /
`plait.lowering.cpu.emulate`). Reference evaluation works in float64 numpy.
Gradient rules build the gradient with the DSL itself: `vjp(node, g, out,
*inputs)` gets Tensors and returns one gradient per input (None where none
flows); autodiff sums gradients over broadcast axes afterwards.
"""
from __future__ import annotations

import math

import numpy as np

from .dtypes import DType
from .node import OpDef, register
from .tensor import Tensor, binary, broadcast, cast, compare, new_node, reduce, unary, where


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if np.size(x) else x


def _number(value, dtype: DType):
    """A scalar as the reference holds a value of `dtype`: float64, or the integer type."""
    return np.float64(value) if dtype.is_float else np.asarray(value, dtype.numpy)


# ---- sources ---------------------------------------------------------------
register(OpDef("input", "source", lambda n, ctx: ctx.inputs[n.attr("name")]))
register(OpDef("param", "source", lambda n, ctx: _number(ctx.inputs[n.attr("name")], n.dtype)))
register(OpDef("const", "source", lambda n, ctx: np.float64(n.attr("value"))
               if n.dtype.is_float else np.asarray(n.attr("value"), n.dtype.numpy)))
register(OpDef("iota", "source",
               lambda n, ctx: np.arange(ctx.sizes[n.attr("axis")], dtype=np.int32)))
register(OpDef("size", "source", lambda n, ctx: _number(ctx.sizes[n.attr("axis")], n.dtype)))

# ---- unary -------------------------------------------------------------------
_UNARY = {
    "neg": (np.negative, lambda n, g, y, x: (-g,)),
    "abs": (np.abs, lambda n, g, y, x: (where(x >= 0, g, -g),)),
    "exp": (np.exp, lambda n, g, y, x: (g * y,)),
    "exp2": (np.exp2, lambda n, g, y, x: (g * y * math.log(2.0),)),
    "log": (np.log, lambda n, g, y, x: (g / x,)),
    "log2": (np.log2, lambda n, g, y, x: (g / (x * math.log(2.0)),)),
    "sqrt": (np.sqrt, lambda n, g, y, x: (g * 0.5 / y,)),
    "rsqrt": (lambda a: 1.0 / np.sqrt(a), lambda n, g, y, x: (g * -0.5 * y * y * y,)),
    "tanh": (np.tanh, lambda n, g, y, x: (g * (1.0 - y * y),)),
    "sigmoid": (lambda a: 1.0 / (1.0 + np.exp(-a)), lambda n, g, y, x: (g * y * (1.0 - y),)),
    "erf": (_erf, lambda n, g, y, x: (g * (2.0 / math.sqrt(math.pi)) * exp(-(x * x)),)),
    "sin": (np.sin, lambda n, g, y, x: (g * cos(x),)),
    "cos": (np.cos, lambda n, g, y, x: (-(g * sin(x)),)),
    "logical_not": (np.logical_not, None),
}
for _name, (_fn, _vjp) in _UNARY.items():
    register(OpDef(_name, "elementwise", lambda n, ctx, a, _fn=_fn: _fn(a), _vjp))


def exp(x): return unary("exp", x)
def exp2(x): return unary("exp2", x)
def log(x): return unary("log", x)
def log2(x): return unary("log2", x)
def sqrt(x): return unary("sqrt", x)
def rsqrt(x): return unary("rsqrt", x)
def tanh(x): return unary("tanh", x)
def sigmoid(x): return unary("sigmoid", x)
def erf(x): return unary("erf", x)
def abs(x): return unary("abs", x)  # noqa: A001 - the DSL's abs
def sin(x): return unary("sin", x)
def cos(x): return unary("cos", x)
def logical_not(x): return unary("logical_not", x)


# ---- binary ------------------------------------------------------------------
def _max_vjp(n, g, y, a, b):
    # On a tie each side gets half, as torch.maximum's gradient gives (and as a max
    # reduction shares among its ties); the side that lost gets nothing.
    tie, half = a == b, g * 0.5
    return where(tie, half, where(a < b, 0.0, g)), where(tie, half, where(a > b, 0.0, g))


def _min_vjp(n, g, y, a, b):
    tie, half = a == b, g * 0.5
    return where(tie, half, where(a > b, 0.0, g)), where(tie, half, where(a < b, 0.0, g))


_BINARY = {
    "add": (np.add, lambda n, g, y, a, b: (g, g)),
    "sub": (np.subtract, lambda n, g, y, a, b: (g, -g)),
    "mul": (np.multiply, lambda n, g, y, a, b: (g * b, g * a)),
    "div": (np.divide, lambda n, g, y, a, b: (g / b, -(g * y / b))),
    "maximum": (np.maximum, _max_vjp),
    "minimum": (np.minimum, _min_vjp),
    "logical_and": (np.logical_and, None),
    "logical_or": (np.logical_or, None),
}
for _name, (_fn, _vjp) in _BINARY.items():
    register(OpDef(_name, "elementwise", lambda n, ctx, a, b, _fn=_fn: _fn(a, b), _vjp))

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}
for _name, _fn in _COMPARE.items():
    # Comparisons are piecewise constant: no gradient flows through them, and
    # that is right, not a refusal (their users, like where, carry it).
    register(OpDef(_name, "elementwise", lambda n, ctx, a, b, _fn=_fn: _fn(a, b),
                   lambda n, g, y, a, b: (None, None)))


def maximum(a, b): return binary("maximum", a, b)
def minimum(a, b): return binary("minimum", a, b)
def logical_and(a, b): return binary("logical_and", a, b)
def logical_or(a, b): return binary("logical_or", a, b)


register(OpDef("where", "elementwise", lambda n, ctx, c, a, b: np.where(c, a, b),
               lambda n, g, y, c, a, b: (None, where(c, g, 0.0), where(c, 0.0, g))))


# `name` is the identity under a label: schedules and autodiff's save= refer to
# the intermediate by it (the forward can write it out, the backward read it).
register(OpDef("name", "elementwise", lambda n, ctx, a: a, lambda n, g, y, x: (g,)))


def name(x, label: str) -> Tensor:
    """x itself, labelled `label` (e.g. `rstd = name(rsqrt(var + eps), "rstd")`)."""
    from .errors import PlaitError, user_location
    if not isinstance(x, Tensor):
        raise PlaitError(f"name(x, {label!r}): x must be a plait tensor, not "
                         f"{type(x).__name__}", user_location())
    if not isinstance(label, str) or not label.isidentifier():
        raise PlaitError(f"name(x, {label!r}): the name must be an identifier", user_location())
    return new_node("name", (x,), x.axes, x.dtype, name=label)


# `permute` is the identity with its axes in a chosen order: where it is an output, the
# array's dimensions follow that order (a gradient is stored like its input, [N, K] for
# an nn.Linear weight, although the algorithm's canonical order would give [K, N]).
register(OpDef("permute", "elementwise", lambda n, ctx, a: a, lambda n, g, y, x: (g,)))


def permute(x, *axes: str) -> Tensor:
    """x with its axes in the order given, e.g. `permute(dw, "N", "K")`: same values,
    stored N-major where it is an output. The axes must be exactly x's."""
    from .errors import PlaitError, user_location
    if not isinstance(x, Tensor):
        raise PlaitError(f"permute(x, ...): x must be a plait tensor, not {type(x).__name__}",
                         user_location())
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    if sorted(axes) != sorted(x.axes) or len(set(axes)) != len(axes):
        raise PlaitError(f"permute(x, {', '.join(map(repr, axes))}): the axes must be x's "
                         f"own, each once: [{', '.join(x.axes)}]", user_location())
    if tuple(axes) == x.axes:
        return x
    return new_node("permute", (x,), tuple(axes), x.dtype)


# `stop_gradient` is the identity whose gradient is zero: for values a result
# does not depend on, such as the max subtracted inside softmax for stability.
register(OpDef("stop_gradient", "elementwise", lambda n, ctx, a: a, lambda n, g, y, x: (None,)))


def stop_gradient(x) -> Tensor:
    """x itself, but autodiff sends no gradient through it."""
    if not isinstance(x, Tensor):
        return x  # a Python number carries no gradient anyway
    return new_node("stop_gradient", (x,), x.axes, x.dtype)


# ---- data movement along an axis ---------------------------------------------
# rotate_half is the rotary-embedding rotation R: over an axis of even size n, element
# i < n/2 is -x[i + n/2] and element i >= n/2 is x[i - n/2] (Hugging Face's
# cat(-x2, x1)); interleaved, each pair (2i, 2i+1) becomes (-x[2i+1], x[2i]) (GPT-J,
# Meta's LLaMA). R is orthogonal with R^T = -R, so its vjp is -R(g). Its kind is
# "movement", not elementwise: a result element reads another position of its operand,
# so no pass may treat it as a per-element op (fuse it, hoist broadcasts through it).
def _rotate_eval(n, ctx, a):
    from .errors import PlaitError
    axes, axis = n.inputs[0].axes, n.attr("axis")
    k = axes.index(axis)
    a = np.moveaxis(np.broadcast_to(a, tuple(ctx.sizes[x] for x in axes)), k, -1)
    size = a.shape[-1]
    if size % 2:
        raise PlaitError(f"rotate_half over {axis!r}: the axis has odd size {size}; "
                         "rotate_half needs an even one", n.loc)
    if n.attr("interleaved"):
        pairs = a.reshape(a.shape[:-1] + (size // 2, 2))
        out = np.stack((-pairs[..., 1], pairs[..., 0]), axis=-1).reshape(a.shape)
    else:
        out = np.concatenate((-a[..., size // 2:], a[..., :size // 2]), axis=-1)
    return np.moveaxis(out, -1, k)


def _rotate_vjp(n, g, y, x):
    return (-rotate_half(g, over=n.attr("axis"), interleaved=bool(n.attr("interleaved"))),)


register(OpDef("rotate_half", "movement", _rotate_eval, _rotate_vjp))


def rotate_half(x, over=None, interleaved: bool = False) -> Tensor:
    """The rotary-embedding rotation over axis `over` (of even size n): the halves
    (x1, x2) of the axis become (-x2, x1), so `q * cos + rotate_half(q, over="D") * sin`
    is Hugging Face's rotary embedding. `interleaved=True` rotates each pair (2i, 2i+1)
    to (-x[2i+1], x[2i]) instead. Integer and bool tensors are rotated as fp32."""
    from .errors import PlaitError, user_location
    from .tensor import _over
    if not isinstance(x, Tensor):
        raise PlaitError(f"rotate_half(x, ...): x must be a plait tensor, not "
                         f"{type(x).__name__}", user_location())
    if not isinstance(over, str):
        raise PlaitError("rotate_half needs over=AXIS, one axis name (axes are named, "
                         f"never positional), not {over!r}", user_location())
    if not isinstance(interleaved, bool):
        raise PlaitError(f"rotate_half: interleaved must be True or False, not "
                         f"{interleaved!r}", user_location())
    _over(x, over, "rotate_half")
    if not x.dtype.is_float:
        x = cast(x, DType.FP32)
    attrs = {"interleaved": True} if interleaved else {}
    return new_node("rotate_half", (x,), x.axes, x.dtype, axis=over, **attrs)


# `blocked` reads a coarse tensor at fine positions: over fine axis S, element s is
# x[SB = s // size] (FlexAttention's block mask, [S/128, T/128], seen over [S, T]). It is
# "movement": an element reads its operand at another index. A block mask needs no
# gradient, so autodiff refuses one through it by name.
def _blocked_eval(n, ctx, a):
    from .errors import PlaitError
    axes = list(n.inputs[0].axes)
    size = n.attr("size")
    for coarse, fine in n.attr("blocks"):
        k = axes.index(coarse)
        if ctx.sizes[coarse] * size < ctx.sizes[fine]:
            raise PlaitError(blocked_cover_message(coarse, fine, size, ctx.sizes), n.loc)
        a = np.repeat(np.broadcast_to(a, tuple(ctx.sizes[x] for x in axes)), size,
                      axis=k).take(range(ctx.sizes[fine]), axis=k)
        axes[k] = fine
    order = [axes.index(x) for x in n.axes]
    return np.transpose(a, order)


def blocked_cover_message(coarse: str, fine: str, size: int, sizes: dict) -> str:
    return (f"blocked: axis {coarse} has {sizes[coarse]} blocks of {size}, which cover "
            f"{sizes[coarse] * size} positions of {fine}, not its {sizes[fine]}")


register(OpDef("blocked", "movement", _blocked_eval, None))


def blocked(x, axes: dict, size: int) -> Tensor:
    """x read at fine positions: each coarse axis of `axes` ({coarse: fine}) becomes its
    fine axis, where position i reads block i // size. With `blocks` an int32 or bool
    Tensor["SB", "TB"] that says which (query block, key block) pairs attend,
    `blocked(blocks, {"SB": "S", "TB": "T"}, 128) != 0` is the [S, T] mask, and a
    streamed kernel skips the key tiles whose blocks are all 0 (block-sparse attention).
    The coarse axes must cover the fine ones: sizes[SB] * size >= sizes[S]."""
    from .errors import PlaitError, user_location
    from .tensor import canonical_axes
    if not isinstance(x, Tensor):
        raise PlaitError(f"blocked(x, ...): x must be a plait tensor, not {type(x).__name__}",
                         user_location())
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise PlaitError(f"blocked: size must be a positive int, not {size!r}", user_location())
    if not isinstance(axes, dict) or not axes:
        raise PlaitError("blocked: axes must be a dict {coarse axis: fine axis}, e.g. "
                         '{"SB": "S"}', user_location())
    for coarse, fine in axes.items():
        if coarse not in x.axes:
            raise PlaitError(f"blocked: {coarse!r} is not an axis of x [{', '.join(x.axes)}]",
                             user_location())
        if not isinstance(fine, str) or fine in x.axes:
            raise PlaitError(f"blocked: the fine axis for {coarse!r} must be an axis name x "
                             f"does not have, not {fine!r}", user_location())
    if len(set(axes.values())) != len(axes):
        raise PlaitError("blocked: two coarse axes map to one fine axis", user_location())
    if x.dtype.is_float:
        raise PlaitError("blocked reads block masks: x must be an int or bool tensor "
                         f"(it is {x.dtype.name})", user_location())
    fine_axes = canonical_axes([axes.get(a, a) for a in x.axes])
    return new_node("blocked", (x,), fine_axes, x.dtype,
                    blocks=tuple(sorted(axes.items())), size=size)


def _cast_eval(n, ctx, a):
    """Exact math keeps a float cast's value, except where the cast's definition changes
    it: fp8 saturates to its largest finite value (+-inf too; dsl/dtypes.round_to)."""
    from .dtypes import DType, round_to
    if ctx.round or not n.dtype.is_float:
        return round_to(a, n.dtype)
    if n.dtype in (DType.FP8_E4M3, DType.FP8_E5M2):
        import ml_dtypes
        limit = float(ml_dtypes.finfo(n.dtype.numpy).max)
        return np.where(np.isnan(a), a, np.clip(a, -limit, limit))
    return a


register(OpDef("cast", "elementwise", _cast_eval,
               lambda n, g, y, x: (cast(g, x.dtype) if x.dtype.is_float else None,)))


# ---- reductions and broadcast -----------------------------------------------
def _reduce_eval(fn):
    def evaluate(n, ctx, a):
        axis = n.inputs[0].axes.index(n.attr("axis"))
        if fn is np.sum and not n.dtype.is_float:   # wraps as the kernels' int32 adds do
            return fn(a, axis=axis, dtype=n.dtype.numpy)
        if fn in (np.max, np.min) and np.shape(a)[axis] == 0:
            # an empty axis gives the identity (torch refuses here; numpy too)
            return fn(a, axis=axis, initial=_extreme_identity(fn, n.dtype))
        return fn(a, axis=axis)
    return evaluate


def _extreme_identity(fn, dtype):
    """max of nothing: -inf for floats, the dtype's least for ints, False for bool."""
    lowest = fn is np.max
    if dtype.is_float:
        return -np.inf if lowest else np.inf
    if dtype.numpy == np.bool_:
        return not lowest
    info = np.iinfo(dtype.numpy)
    return info.min if lowest else info.max


def _sum_vjp(n, g, y, x):
    return (broadcast(g, x.axes),)


def _extreme_vjp(n, g, y, x):
    hit = cast(x == broadcast(y, x.axes), g.dtype)
    # Ties share the gradient evenly, so the rule is symmetric in its inputs. max over
    # several axes is a max per axis: each tied value of this level weighs the number of
    # elements tied below it, so the share is even over all the tied elements, as
    # torch.amax over several dims gives it (the levels below divide by their counts).
    below = _tied_below(n.op, x.node, g.dtype)
    weight = hit if below is None else hit * below
    return (weight / reduce("sum", weight, over=n.attr("axis")) * g,)


def _tied_below(op: str, node, dtype):
    """How many elements of the innermost operand equal each value of `node` when node is
    an `op` reduction of an `op` reduction ... (None when node is not an `op` reduction)."""
    if node.op != op:
        return None
    inner = Tensor(node.inputs[0])
    hit = cast(inner == broadcast(Tensor(node), inner.axes), dtype)
    below = _tied_below(op, node.inputs[0], dtype)
    return reduce("sum", hit if below is None else hit * below, over=node.attr("axis"))


register(OpDef("sum", "reduce", _reduce_eval(np.sum), _sum_vjp, "add", "zero"))
register(OpDef("max", "reduce", _reduce_eval(np.max), _extreme_vjp, "maximum", "lowest"))
register(OpDef("min", "reduce", _reduce_eval(np.min), _extreme_vjp, "minimum", "highest"))


def _broadcast_eval(n, ctx, a):
    src = n.inputs[0].axes
    expanded = np.expand_dims(a, tuple(i for i, ax in enumerate(n.axes) if ax not in src))
    return np.broadcast_to(expanded, tuple(ctx.sizes[ax] for ax in n.axes))


def _broadcast_vjp(n, g, y, x):
    extra = tuple(a for a in n.axes if a not in x.axes)
    return (reduce("sum", g, over=extra),)


register(OpDef("broadcast", "broadcast", _broadcast_eval, _broadcast_vjp))


def sum(x, over=None):  # noqa: A001 - the DSL's sum
    """Sum over the named axis (or tuple of axes)."""
    return reduce("sum", x, over)


def max(x, over=None):  # noqa: A001
    return reduce("max", x, over)


def min(x, over=None):  # noqa: A001
    return reduce("min", x, over)


__all__ = ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs",
           "sin", "cos", "maximum", "minimum", "where", "cast", "sum", "max", "min",
           "compare", "new_node", "Tensor", "DType", "broadcast", "logical_and", "logical_or",
           "logical_not", "name", "permute", "rotate_half", "stop_gradient"]
