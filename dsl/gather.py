"""Gather and scatter-add along a named axis: `take` and its transpose `scatter_add`.

    take(table, idx, axis="V")          table[V, D], idx[N] (int32/int64)  ->  [N, D]
    scatter_add(src, idx, axis="V")     src[N, D], idx[N]                  ->  [V, D]

`take` reads `table` at the positions `idx` holds along `axis`; the axes of `idx` take the
place of `axis` in the result (an embedding lookup, a block table, index_select). An axis
that `idx` shares with `table` is a batch axis: row b of `idx` indexes row b of `table`
(a per-sequence block table). `scatter_add` adds each element of `src` into the result at
position idx along `axis` (repeated indices accumulate): the gradient of `take` with
respect to its table. `batch` names the axes of `idx` that stay in its result.

Both are "movement" ops: an element reads (or writes) another position of its operand,
so no pass may treat them as per-element. An index outside [0, size of axis) is an error
in the reference and the CPU executor; the GPU kernels mask it (the element reads 0, the
add is dropped) and never read or write outside the tensor.
"""
from __future__ import annotations

import numpy as np

from .dtypes import DType
from .errors import PlaitError, user_location
from .node import OpDef, register
from .tensor import Tensor, canonical_axes, new_node

INDEX_DTYPES = (DType.INT32, DType.INT64)


def out_of_range_message(op: str, axis: str, size: int, idx: np.ndarray, axes) -> str:
    """The error for an index outside [0, size): the first bad one, where it is."""
    bad = np.argwhere((idx < 0) | (idx >= size))[0]
    where = ", ".join(f"{a}={int(i)}" for a, i in zip(axes, bad))
    return (f"{op} along {axis!r}: index {int(idx[tuple(bad)])} at [{where}] is outside "
            f"[0, {size}) (the size of {axis}); {int(((idx < 0) | (idx >= size)).sum())} "
            "such indices in all")


def _full(array, axes, sizes) -> np.ndarray:
    return np.broadcast_to(np.asarray(array), tuple(sizes[a] for a in axes))


def _aligned(array, src: tuple, dst: tuple) -> np.ndarray:
    """`array` (dims in src order) with dims in dst order, size 1 where src lacks one."""
    moved = np.transpose(array, [src.index(a) for a in dst if a in src])
    return np.expand_dims(moved, tuple(i for i, a in enumerate(dst) if a not in src))


def _checked(n, ctx, idx):
    axis = n.attr("axis")
    size = ctx.sizes[axis]
    idx = _full(idx, n.inputs[1].axes, ctx.sizes)
    if idx.size and ((idx < 0) | (idx >= size)).any():
        raise PlaitError(out_of_range_message(n.op, axis, size, idx, n.inputs[1].axes), n.loc)
    return idx.astype(np.int64)


def _positions(space: tuple, target: tuple, axis: str, idx, idx_axes, sizes) -> tuple:
    """Index arrays (one per axis of `target`) over the iteration space `space`: idx
    along `axis`, each other axis its own position."""
    out = []
    for a in target:
        if a == axis:
            out.append(_aligned(idx, idx_axes, space))
        else:
            shape = [sizes[a] if b == a else 1 for b in space]
            out.append(np.arange(sizes[a]).reshape(shape))
    return tuple(out)


def _take_eval(n, ctx, table, idx):
    idx = _checked(n, ctx, idx)
    t_axes = n.inputs[0].axes
    table = _full(table, t_axes, ctx.sizes)
    at = _positions(n.axes, t_axes, n.attr("axis"), idx, n.inputs[1].axes, ctx.sizes)
    return np.broadcast_to(table[at], tuple(ctx.sizes[a] for a in n.axes))


def _scatter_eval(n, ctx, src, idx):
    idx = _checked(n, ctx, idx)
    s_axes, i_axes = n.inputs[0].axes, n.inputs[1].axes
    space = canonical_space(s_axes, i_axes)
    shape = tuple(ctx.sizes[a] for a in space)
    src = np.broadcast_to(_aligned(_full(src, s_axes, ctx.sizes), s_axes, space), shape)
    at = _positions(space, n.axes, n.attr("axis"), idx, i_axes, ctx.sizes)
    out = np.zeros(tuple(ctx.sizes[a] for a in n.axes),
                   np.float64 if n.dtype.is_float else n.dtype.numpy)
    np.add.at(out, tuple(np.broadcast_to(p, shape) for p in at), src)
    return out


def canonical_space(*axes_lists) -> tuple[str, ...]:
    """The union of some axes, in the order the first list gives then the others'."""
    return tuple(dict.fromkeys(a for axes in axes_lists for a in axes))


def _take_vjp(n, g, y, table, idx):
    batch = tuple(a for a in idx.axes if a in table.axes)
    return scatter_add(g, idx, axis=n.attr("axis"), batch=batch), None


def _scatter_vjp(n, g, y, src, idx):
    return take(g, idx, axis=n.attr("axis")), None


register(OpDef("take", "movement", _take_eval, _take_vjp))
register(OpDef("scatter_add", "movement", _scatter_eval, _scatter_vjp))


def _check_index(what: str, idx, axis) -> None:
    if not isinstance(idx, Tensor):
        raise PlaitError(f"{what}: idx must be a plait tensor of int32 or int64 indices, not "
                         f"{type(idx).__name__}", user_location())
    if idx.dtype not in INDEX_DTYPES:
        raise PlaitError(f"{what}: idx must be int32 or int64 (it is {idx.dtype}); indices "
                         "are integers, cast(x, 'int32') converts", user_location())
    if not isinstance(axis, str):
        raise PlaitError(f"{what} needs axis=AXIS, the one axis name idx indexes (axes are "
                         f"named, never positional), not {axis!r}", user_location())
    if axis in idx.axes:
        raise PlaitError(f"{what} along {axis!r}: idx must not have the axis it indexes; its "
                         f"axes [{', '.join(idx.axes)}] replace {axis} in the result",
                         user_location())


def take(table, idx, axis=None) -> Tensor:
    """`table` read at positions `idx` along `axis`: with table[V, D] and idx[N] (int32 or
    int64), `take(table, idx, axis="V")[n, d] = table[idx[n], d]`. The result has idx's
    axes in place of `axis` (in the canonical order) and table's dtype. An axis idx shares
    with table is a batch axis (row b of idx indexes row b of table)."""
    if not isinstance(table, Tensor):
        raise PlaitError(f"take(table, ...): table must be a plait tensor, not "
                         f"{type(table).__name__}", user_location())
    _check_index("take", idx, axis)
    if axis not in table.axes:
        raise PlaitError(f"take along {axis!r}: it is not an axis of table "
                         f"[{', '.join(table.axes)}]", user_location())
    axes = canonical_axes(idx.axes + tuple(a for a in table.axes if a != axis))
    return new_node("take", (table, idx), axes, table.dtype, axis=axis)


def scatter_add(src, idx, axis=None, batch=()) -> Tensor:
    """The transpose of take: a zero tensor over `axis` and src's other axes, with each
    element of src added at position idx along `axis` (repeated indices add up). idx's
    axes leave the result, except those listed in `batch` (idx's rows per batch row)."""
    if not isinstance(src, Tensor):
        raise PlaitError(f"scatter_add(src, ...): src must be a plait tensor, not "
                         f"{type(src).__name__}", user_location())
    _check_index("scatter_add", idx, axis)
    batch = (batch,) if isinstance(batch, str) else tuple(batch)
    if any(b not in idx.axes for b in batch):
        raise PlaitError(f"scatter_add: batch {list(batch)} must be axes of idx "
                         f"[{', '.join(idx.axes)}]", user_location())
    if axis in src.axes:
        raise PlaitError(f"scatter_add along {axis!r}: src must not have the axis it adds "
                         f"into; it has [{', '.join(src.axes)}]", user_location())
    if not src.dtype.is_float:
        raise PlaitError(f"scatter_add adds floats; src is {src.dtype}", user_location())
    kept = [a for a in src.axes if a not in idx.axes or a in batch] + list(batch) + [axis]
    return new_node("scatter_add", (src, idx), canonical_axes(kept), src.dtype, axis=axis,
                    **({"batch": tuple(batch)} if batch else {}))
