"""ATen's ranges and positions of one dim as plait's slice / pad / concat / take (fx_ops'
table takes them from here): `slice.Tensor` (what split and chunk decompose to, and
x[:, 3:11]), `slice_backward` (a slice's gradient: the slice padded back with zeros),
`cat`, and `embedding` (rows of a table at int64 positions: take).

A range of another size than its operand's dim is a new axis (fx_axes gives it one), so
each builder names it with `into=`. What plait cannot write is refused by `accepts`:
a step other than 1, a range that picks a single position (the result's dim has no axis
to write it into), an empty range, a cat operand of size 1 along the dim.
"""
from __future__ import annotations

import torch

from plait import dsl

from .fx_axes import cat_dim, shape, slice_range


def _ints(*values) -> bool:
    return all(v is None or isinstance(v, int) for v in values)


def slice_accepts(node):
    if not _ints(*node.args[1:], *node.kwargs.values()):
        step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
        # symbolic bounds: fx_dynamic checks them again at each concrete size
        return None if step in (None, 1) else f"{node.target} with step {step}"
    dim, start, stop, step = slice_range(node)
    return _range_refusal(node, shape(node.args[0])[dim], start, stop, step)


def _range_refusal(node, full: int, start: int, stop: int, step: int):
    if step != 1:
        return f"{node.target} with step {step}"
    if stop <= start:
        return f"{node.target} of the empty range [{start}, {stop})"
    if stop - start == 1 and full != 1:
        return f"{node.target} [{start}, {stop}) picks one position of {full}"
    return None


def build_slice(ctx, node, x, *rest):
    src = node.args[0]
    dim, start, stop, _ = slice_range(node)
    axis, into = ctx.axis(src, dim), ctx.axis(node, dim)
    if axis is None or axis == into or axis not in x.axes:    # the whole dim
        return x
    return dsl.slice(x, into=into, **{axis: (start, stop)})


def slice_backward_accepts(node):
    grad, sizes, dim, start, stop, step = node.args
    if not _ints(*sizes, dim, start, stop, step):
        # symbolic sizes: fx_dynamic checks them again at each concrete size
        return None if step == 1 else f"{node.target} with step {step}"
    dim = dim % len(sizes)
    n = sizes[dim]
    start, stop = (min(max(i + n if i < 0 else i, 0), n) for i in (start, stop))
    return _range_refusal(node, n, start, stop, step)


def build_slice_backward(ctx, node, g, *rest):
    """The gradient of a slice: g padded with zeros back to its operand's size."""
    dim = node.args[2] % len(node.args[1])
    axis, into = ctx.axis(node.args[0], dim), ctx.axis(node, dim)
    if axis is None or axis == into or axis not in g.axes:
        return g
    n, width = shape(node)[dim], shape(node.args[0])[dim]
    start = node.args[3] + n if node.args[3] < 0 else node.args[3]
    start = min(max(start, 0), n)
    return dsl.pad(g, into=into, value=0.0, **{axis: (start, n - start - width)})


def cat_accepts(node):
    tensors = node.args[0]
    dim = cat_dim(node)
    for t in tensors:
        if not isinstance(t, torch.fx.Node) or len(shape(t)) != len(shape(node)):
            return "cat of a tensor of another rank (a legacy empty tensor)"
        if shape(t)[dim] == 1 and shape(node)[dim] != 1:
            return f"cat of {t.name}, of size 1 along dim {dim}"
    return None


def build_cat(ctx, node, tensors, *rest):
    dim = cat_dim(node)
    if len(tensors) == 1:
        return tensors[0]
    overs = tuple(ctx.axis(t, dim) for t in node.args[0])
    return dsl.concat(list(tensors), over=overs, into=ctx.axis(node, dim))


def embedding_accepts(node):
    """Only the forward: padding_idx, scale_grad_by_freq and sparse change the backward
    (embedding_dense_backward, which torch runs), never the rows read."""
    weight = node.args[0]
    if len(shape(weight)) != 2 or shape(weight)[0] == 1:
        return f"embedding of a {list(shape(weight))} table"
    return None


def build_embedding(ctx, node, weight, idx, *rest):
    return dsl.take(weight, idx, axis=ctx.axis(node.args[0], 0))
