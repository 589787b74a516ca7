"""Reshapes and ranges on named axes: split_axis, merge_axes, slice, pad, concat.

    split_axis(x, "C", ("H", "D"), D=64)    x[B, C]  ->  [B, H, D]     c = h * D + d
    merge_axes(x, ("B", "T"), "N")          x[B, T, C] -> [N, C]       b = n // T, t = n % T
    slice(x, T=(0, 128), into="S")          x[T] -> [S]                t = s + 0
    pad(x, T=(2, 3), into="P", value=0.0)   x[T] -> [P]                t = p - 2, else value
    concat([a, b], over=("Ta", "Tb"), into="T")   a where t < Ta, else b at t - Ta

Every one is an index remapping: an element of the result reads its operand at integer
expressions of its own indices, so lowering reads the operand's buffer at those indices
(no copy kernel). Three op nodes carry them: `split_axis`, `merge_axes` and `shift`
(out[j] = x[j + start] along one axis, `fill` where j + start is outside the operand:
slice, pad and each half of concat are shifts; concat picks between its shifted operands
with `where`). Their gradients are each other: split and merge are inverse reshapes, and
a shift's is the shift back by -start, filled with zeros (slice -> pad, pad -> slice).

Sizes: an axis name has ONE size in an algorithm (broadcasting is by name), so a range
of T with another size is a new axis (`into=`), never T again; the new axes' sizes are
relations on the node (dsl/axis_sizes.py) that binding derives and checks. A shift's
start may add or subtract sizes of axes (`plus`, `minus`): the second half of a concat
starts at size(Ta), known only when the inputs are.
"""
from __future__ import annotations

import numpy as np

from .dtypes import DType
from .errors import PlaitError, user_location
from .node import OpDef, register
from .tensor import Tensor, canonical_axes, current_axis_order, declare_axes, index, new_node, size, where


def _full(n, ctx, array):
    return np.broadcast_to(np.asarray(array), tuple(ctx.sizes[a] for a in n.inputs[0].axes))


def _ordered(array, axes: list, target: tuple) -> np.ndarray:
    return np.transpose(array, [axes.index(a) for a in target])


# ---- reference: numpy reshape on the operand with the affected axes moved last
def _split_eval(n, ctx, a):
    axes = list(n.inputs[0].axes)
    k, parts = axes.index(n.attr("axis")), n.attr("into")
    a = np.moveaxis(_full(n, ctx, a), k, -1)
    a = a.reshape(a.shape[:-1] + tuple(ctx.sizes[p] for p in parts))
    rest = axes[:k] + axes[k + 1:]
    return _ordered(a, rest + list(parts), n.axes)


def _merge_eval(n, ctx, a):
    axes, parts = list(n.inputs[0].axes), n.attr("parts")
    rest = [x for x in axes if x not in parts]
    a = _ordered(_full(n, ctx, a), axes, tuple(rest) + parts)
    a = a.reshape(a.shape[:len(rest)] + (-1,))
    return _ordered(a, rest + [n.attr("into")], n.axes)


def shift_start(n, sizes) -> int:
    """Where element 0 of a shift's result reads its operand (sizes resolved)."""
    return n.attr("start") + sum(sizes[a] for a in n.attr("plus") or ()) \
        - sum(sizes[a] for a in n.attr("minus") or ())


def _shift_eval(n, ctx, a):
    axes = list(n.inputs[0].axes)
    axis, into = n.attr("axis"), n.attr("into")
    k = axes.index(axis)
    src = np.arange(ctx.sizes[into]) + shift_start(n, ctx.sizes)
    inside = (src >= 0) & (src < ctx.sizes[axis])
    a = np.moveaxis(_full(n, ctx, a), k, -1)
    dtype = np.float64 if n.dtype.is_float else n.dtype.numpy
    out = np.where(inside, np.take(a, np.where(inside, src, 0), axis=-1),
                   np.asarray(n.attr("fill"), dtype))
    return _ordered(out.astype(dtype), axes[:k] + axes[k + 1:] + [into], n.axes)


# ---- gradients: the inverse remapping
def _split_vjp(n, g, y, x):
    return (merge_axes(g, n.attr("into"), n.attr("axis")),)


def _merge_vjp(n, g, y, x):
    return (_split(g, n.attr("into"), n.attr("parts"), ()),)


def _shift_vjp(n, g, y, x):
    if not n.dtype.is_float:
        return (None,)
    # the forward's size relations hold in the backward too, which may lack other
    # sources for them (a concat's result axis, read only through a slice)
    return (shift(g, n.attr("into"), n.attr("axis"), start=-n.attr("start"),
                  plus=n.attr("minus") or (), minus=n.attr("plus") or (), fill=0.0,
                  sizes=n.attr("sizes") or ()),)


register(OpDef("split_axis", "movement", _split_eval, _split_vjp))
register(OpDef("merge_axes", "movement", _merge_eval, _merge_vjp))
register(OpDef("shift", "movement", _shift_eval, _shift_vjp))
RESHAPES = ("split_axis", "merge_axes", "shift")


# ---- checks
def _tensor(x, what: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise PlaitError(f"{what}: x must be a plait tensor, not {type(x).__name__}",
                         user_location())
    return x


def _axis_of(x: Tensor, axis, what: str) -> str:
    if not isinstance(axis, str) or axis not in x.axes:
        raise PlaitError(f"{what}: {axis!r} is not an axis of x [{', '.join(x.axes)}]",
                         user_location())
    return axis


def _new_name(x: Tensor, name, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise PlaitError(f"{what}: the new axis name must be an identifier, not {name!r}",
                         user_location())
    if name in x.axes:
        raise PlaitError(f"{what}: x already has an axis {name!r} [{', '.join(x.axes)}]; "
                         "an axis name has one size in an algorithm, so the result's axis "
                         "needs a name of its own", user_location())
    return name


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise PlaitError(f"{what} must be a Python int (a static size or position), not "
                         f"{value!r}", user_location())
    return int(value)


# ---- the ops
def _split(x: Tensor, axis: str, parts: tuple, fixed: tuple) -> Tensor:
    declare_axes(parts, axis)
    axes = canonical_axes([p for a in x.axes for p in (parts if a == axis else (a,))])
    relations = (("product", axis, tuple(parts)),) + tuple(("sum", p, s, ()) for p, s in fixed)
    return new_node("split_axis", (x,), axes, x.dtype, axis=axis, into=tuple(parts),
                    sizes=relations, **({"fixed": tuple(fixed)} if fixed else {}))


def split_axis(x, axis=None, into=None, **sizes) -> Tensor:
    """x with axis `axis` split into the axes `into` (outer first): with C split into
    (H, D), element [h, d] is x[c = h * D + d] (numpy's reshape). The size of all but one
    new axis is given as a keyword (`D=64`), unless the algorithm has that axis already
    (an input over D); the last one is derived, and `axis` must be a multiple of the
    product (checked when sizes are bound, at this line)."""
    x = _tensor(x, "split_axis")
    axis = _axis_of(x, axis, "split_axis")
    if not isinstance(into, (tuple, list)) or len(into) < 2:
        raise PlaitError(f"split_axis: into must be a tuple of two or more new axis names, "
                         f"e.g. (\"H\", \"D\"), not {into!r}", user_location())
    parts = tuple(_new_name(x, p, "split_axis") for p in into)
    if len(set(parts)) != len(parts):
        raise PlaitError(f"split_axis: repeated axis in into {list(parts)}", user_location())
    unknown = set(sizes) - set(parts)
    if unknown:
        raise PlaitError(f"split_axis: {sorted(unknown)[0]!r} is not one of the new axes "
                         f"{list(parts)}", user_location())
    # an axis the algorithm has already (an input's, say) brings its own size
    order = current_axis_order() or ()
    unknown = [p for p in parts if p not in order and p not in sizes]
    if len(sizes) > len(parts) - 1 or len(unknown) > 1:
        raise PlaitError(f"split_axis of {axis!r} into {list(parts)}: give the sizes of all "
                         f"but one new axis (e.g. {parts[-1]}=64); the other is derived from "
                         f"{axis}'s size", user_location())
    fixed = []
    for p in parts:
        if p in sizes:
            s = _int(sizes[p], f"split_axis: the size of {p}")
            if s < 1:
                raise PlaitError(f"split_axis: the size of {p} must be >= 1, not {s}",
                                 user_location())
            fixed.append((p, s))
    return _split(x, axis, parts, tuple(fixed))


def merge_axes(x, axes=None, into=None) -> Tensor:
    """x with the axes `axes` (outer first) merged into one axis `into`: with (B, T)
    merged into N, element n is x[b = n // T, t = n % T] (numpy's reshape of [B, T]),
    whatever order x is stored in. size(N) = size(B) * size(T)."""
    x = _tensor(x, "merge_axes")
    if not isinstance(axes, (tuple, list)) or len(axes) < 2:
        raise PlaitError(f"merge_axes: axes must be a tuple of two or more axes of x, not "
                         f"{axes!r}", user_location())
    parts = tuple(_axis_of(x, a, "merge_axes") for a in axes)
    if len(set(parts)) != len(parts):
        raise PlaitError(f"merge_axes: repeated axis in {list(parts)}", user_location())
    into = _new_name(x, into, "merge_axes")
    declare_axes((into,), min(parts, key=x.axes.index), before=True)
    kept = [into if a == parts[0] else a for a in x.axes if a not in parts[1:]]
    return new_node("merge_axes", (x,), canonical_axes(kept), x.dtype, parts=parts, into=into,
                    sizes=(("product", into, parts),))


def shift(x, axis, into, start=0, plus=(), minus=(), fill=0, sizes=()) -> Tensor:
    """The primitive under slice, pad and concat: x along `axis` read into axis `into`,
    out[j] = x[j + start] where j + start is inside `axis`, else `fill`; `start` grows by
    the size of each axis in `plus` and shrinks by each in `minus`. `into` must have a
    size: an axis of the algorithm already, or one `sizes` relations give."""
    x = _tensor(x, "shift")
    axis = _axis_of(x, axis, "shift")
    _new_name(x, into, "shift")
    start = _int(start, "shift: start")
    plus, minus = tuple(plus), tuple(minus)
    if x.dtype == DType.BOOL:
        fill = bool(fill)
    elif x.dtype.is_float:
        fill = float(fill)
    elif isinstance(fill, float) and not fill.is_integer():
        raise PlaitError(f"pad value {fill} is not an integer; x is {x.dtype}", user_location())
    else:
        fill = int(fill)
    declare_axes((into,), axis)
    axes = canonical_axes([into if a == axis else a for a in x.axes])
    attrs = {k: v for k, v in (("plus", plus), ("minus", minus), ("sizes", tuple(sizes)))
             if v}
    return new_node("shift", (x,), axes, x.dtype, axis=axis, into=into, start=start,
                    fill=fill, **attrs)


def _one_range(ranges: dict, what: str):
    if len(ranges) != 1:
        raise PlaitError(f"{what} takes one axis=(a, b) range, e.g. {what}(x, T=(0, 128), "
                         f"into=\"S\"), not {len(ranges)}", user_location())
    ((axis, pair),) = ranges.items()
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise PlaitError(f"{what}: {axis}= must be a pair (a, b), not {pair!r}",
                         user_location())
    return axis, pair


def slice(x, into=None, **ranges) -> Tensor:  # noqa: A001 - the DSL's slice
    """The positions [start, stop) of one axis, as a new axis `into` of size stop - start:
    `slice(x, T=(0, 128), into="S")[s] = x[t = s]`. stop None runs to the axis's end
    (size(S) = size(T) - start). Static ranges: start >= 0 and stop are ints, stop is
    checked against T's size when sizes are bound."""
    x = _tensor(x, "slice")
    axis, (start, stop) = _one_range(ranges, "slice")
    _axis_of(x, axis, "slice")
    start = _int(start, "slice: start")
    if start < 0:
        raise PlaitError(f"slice: start must be >= 0, not {start} (ranges are static "
                         "positions from the start of the axis)", user_location())
    into = _new_name(x, into, "slice")
    if stop is None:
        rel = (("sum", axis, start, (into,)),)
    else:
        stop = _int(stop, "slice: stop")
        if stop <= start:
            raise PlaitError(f"slice: the range ({start}, {stop}) is empty; stop must be "
                             "past start", user_location())
        rel = (("sum", into, stop - start, ()), ("within", axis, stop))
    return shift(x, axis, into, start=start, sizes=rel)


def pad(x, into=None, value=0.0, **ranges) -> Tensor:
    """One axis grown by `before` positions in front and `after` behind, which hold
    `value`: `pad(x, T=(2, 3), into="P")` has size(P) = size(T) + 5 and P[p] = x[p - 2]
    inside (numpy's pad with a constant)."""
    x = _tensor(x, "pad")
    axis, (before, after) = _one_range(ranges, "pad")
    _axis_of(x, axis, "pad")
    before, after = _int(before, "pad: before"), _int(after, "pad: after")
    if before < 0 or after < 0:
        raise PlaitError(f"pad: before and after must be >= 0, not ({before}, {after}); "
                         "slice takes a range", user_location())
    if not isinstance(value, (bool, int, float)):
        raise PlaitError(f"pad: value must be a Python number, not {value!r}", user_location())
    into = _new_name(x, into, "pad")
    return shift(x, axis, into, start=-before, fill=value,
                 sizes=(("sum", into, before + after, (axis,)),))


def concat(tensors, over=None, into=None) -> Tensor:
    """The tensors one after another along a new axis `into`: `over` names each operand's
    axis (one name for all, or one per operand), size(into) is their sum. The operands'
    other axes broadcast by name; the dtype is promoted as `where` promotes."""
    if not isinstance(tensors, (list, tuple)) or len(tensors) < 2:
        raise PlaitError("concat takes a list of two or more tensors", user_location())
    tensors = [_tensor(t, "concat") for t in tensors]
    overs = (over,) * len(tensors) if isinstance(over, str) else over
    if not isinstance(overs, (tuple, list)) or len(overs) != len(tensors):
        raise PlaitError(f"concat needs over=AXIS (or one axis per tensor), not {over!r}",
                         user_location())
    for t, o in zip(tensors, overs):
        _axis_of(t, o, "concat")
        _new_name(t, into, "concat")
    # one size relation for the result: into = the sum of the operands' axes (an axis
    # named twice counts twice)
    rel = (("sum", into, 0, tuple(overs)),)
    result, before = None, []
    for t, o in zip(tensors, overs):
        part = shift(t, o, into, minus=tuple(before), sizes=rel)
        if result is None:
            result = part
        else:
            result = where(index(into) < _size_sum(before), result, part)
        before.append(o)
    return result


def _size_sum(axes) -> Tensor:
    total = size(axes[0])
    for a in axes[1:]:
        total = total + size(a)
    return total


def spelling(n, operand: str) -> str:
    """DSL source that traces to reshape node `n` again (autodiff's to_source)."""
    if n.op == "split_axis":
        sizes = "".join(f", {p}={s}" for p, s in n.attr("fixed") or ())
        return f"split_axis({operand}, {n.attr('axis')!r}, {n.attr('into')!r}{sizes})"
    if n.op == "merge_axes":
        return f"merge_axes({operand}, {n.attr('parts')!r}, {n.attr('into')!r})"
    extra = "".join(f", {k}={n.attr(k)!r}" for k in ("plus", "minus", "sizes") if n.attr(k))
    return (f"shift({operand}, {n.attr('axis')!r}, {n.attr('into')!r}, "
            f"start={n.attr('start')!r}, fill={n.attr('fill')!r}{extra})")
