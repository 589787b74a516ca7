"""The IR interpreter's scans (ir_interp.py runs every other op): whole tensors at once,
values over the frame's axes.

- a named scan is numpy's accumulate along its axis, positions past the end the
  identity; a generic scan's state (a program for its combine) is folded position by
  position, in scan order;
- a split scan's kernels (graph/scan_split.py) fold each chunk of the axis (the grid
  tile, a contiguous range) on its own: with `total` the result is each chunk's last
  running state, over the chunk axis where the scanned axis stood; with `carry` each
  chunk starts from the totals of the chunks before it (after it, reversed), read from
  the `carry` buffers and folded in scan order, as cpu/scan.py and nvptx/scan.py do.
"""
from __future__ import annotations

import numpy as np

from .emulate import _NP, _rounded
from .emulate import _step as elementwise_step
from .scan import Combine, scan_identity
from .scan import combine_fn as scan_combine


def scan(f, op, args: list, t):
    """Frame `f`'s value(s) of IR op `scan` (a tuple for a generic scan's parts)."""
    if op.attr("carry") is not None or op.attr("total") is not None:
        return _split(f, op, args, t)
    if not isinstance(op.attr("combine"), str):
        return _state_scan(f, op, args)
    value = args[0]
    kind, d = op.attr("combine"), f.dim(op.attr("axis"))
    dtype = _NP[t.dtype]
    inside = f.inside((op.attr("axis"),))
    value = np.broadcast_to(value, np.broadcast_shapes(value.shape, inside.shape))
    value = np.where(inside, value, scan_identity(kind, dtype)).astype(dtype)
    fn = scan_combine(kind)
    flip = bool(op.attr("reverse"))
    value = np.flip(value, d) if flip else value
    with np.errstate(all="ignore"):
        out = fn.accumulate(value, axis=d, dtype=dtype)
    return _rounded((np.flip(out, d) if flip else out).astype(dtype), op)


def _state_scan(f, op, args: list):
    fn = Combine(op, elementwise_step, _NP)
    d = f.dim(op.attr("axis"))
    inside = f.inside((op.attr("axis"),))
    shape = np.broadcast_shapes(inside.shape, *(a.shape for a in args))
    state = [np.broadcast_to(a, shape).astype(t) for a, t in zip(args, fn.types)]
    out = [np.empty(shape, t) for t in fn.types]
    steps = range(shape[d])
    acc = None
    for i in (reversed(steps) if op.attr("reverse") else steps):
        x = tuple(np.take(s, [i], axis=d) for s in state)
        acc = x if acc is None else fn(acc, x)
        for o, a in zip(out, acc):
            o[(slice(None),) * d + (slice(i, i + 1),)] = a
    return tuple(out) if len(out) > 1 else out[0]


def _fold(op, t):
    """(fold of two states in scan order, identity, register dtypes) of scan `op`."""
    if not isinstance(op.attr("combine"), str):
        fn = Combine(op, elementwise_step, _NP)
        return fn, fn.identity, fn.types
    kind, dtype = op.attr("combine"), _NP[t.dtype]
    ufunc = scan_combine(kind)

    def fold(a: tuple, b: tuple) -> tuple:      # the named combines commute
        with np.errstate(all="ignore"):
            return (np.asarray(ufunc(a[0], b[0])).astype(dtype),)
    return fold, (scan_identity(kind, dtype),), (dtype,)


def _split(f, op, args: list, t):
    fold, identity, types = _fold(op, t)
    axis, rev = op.attr("axis"), bool(op.attr("reverse"))
    d, tile = f.dim(axis), dict(f.kernel.grid)[axis]
    inside = f.inside((axis,))
    shape = np.broadcast_shapes(inside.shape, *(a.shape for a in args))
    state = [np.where(inside, np.broadcast_to(a, shape), i).astype(ty)
             for a, i, ty in zip(args, identity, types)]
    count = -(-f.sizes[axis] // tile)
    order = range(count - 1, -1, -1) if rev else range(count)
    take = lambda s, i: tuple(np.take(p, [i], axis=d) for p in s)   # noqa: E731
    if op.attr("total") is not None:           # each chunk's last state, along the chunks
        part = f.dim(op.attr("total"))
        totals = [None] * count
        for c in order:
            acc = identity
            span = range(c * tile, min((c + 1) * tile, f.sizes[axis]))
            for i in (reversed(span) if rev else span):
                acc = fold(acc, take(state, i))
            totals[c] = acc
        out = [np.concatenate([np.broadcast_to(np.asarray(totals[c][k], ty),
                                               _one(shape, d)) for c in range(count)],
                              axis=part) for k, ty in enumerate(types)]
        return _parts(out, op)
    carry = _carry_in(f, op, fold, identity, types, order)
    out = [np.empty(shape, ty) for ty in types]
    acc = None
    steps = range(f.sizes[axis])
    for i in (reversed(steps) if rev else steps):
        if acc is None or (i % tile == (tile - 1 if rev else 0)):    # a chunk's first
            acc = take(carry, i // tile) if carry is not None else identity
        acc = fold(acc, take(state, i))
        for o, a in zip(out, acc):
            o[(slice(None),) * d + (slice(i, i + 1),)] = a
    return _parts(out, op)


def _carry_in(f, op, fold, identity, types, order):
    """Per chunk (along the scanned axis's dim), the fold of the totals before it."""
    part = op.attr("chunks")
    totals = []
    for name, ty in zip(op.attr("carry"), types):
        buf = f.kernel.buffer(name)
        index = tuple(f.index(a) for a in buf.axes)
        totals.append(np.asarray(f.arrays[name][index]).astype(ty))
    p, d = f.dim(part), f.dim(op.attr("axis"))
    acc, carry = identity, [None] * f.sizes[part]
    for c in order:
        carry[c] = acc
        acc = fold(acc, tuple(np.take(s, [c], axis=p) for s in totals))
    shape = np.broadcast_shapes((1,) * len(f.axes), *(np.shape(x) for c in carry for x in c))
    return tuple(np.concatenate([np.swapaxes(np.broadcast_to(np.asarray(c[k], ty), shape),
                                             p, d) for c in carry], axis=d)
                 for k, ty in enumerate(types))


def _one(shape, d: int) -> tuple:
    return tuple(1 if i == d else n for i, n in enumerate(shape))


def _parts(out: list, op):
    if isinstance(op.attr("combine"), str):
        return _rounded(out[0], op)
    return tuple(out) if len(out) > 1 else out[0]
