"""The CPU executor's indexed loads (take; the reshapes' view load) and indexed atomic
add (scatter_add).

What the GPU does, element by element: an element whose index lies outside [0, size of
the axis) reads 0 (take) or adds nothing (scatter_add), and no address outside the
buffer is formed. With the machine's `check_indices` on (the default), such an index
raises a PlaitError naming the op and the index instead: the CPU executor is where a
bad index is caught.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import round_to
from plait.dsl.errors import PlaitError


def _in_range(m, op, idx, mask):
    axis = op.attr("take")
    size = m.sizes[axis]
    ok = (idx >= 0) & (idx < size)
    bad = np.broadcast_to(mask, np.broadcast_shapes(mask.shape, ok.shape)) & ~ok
    if getattr(m, "check_indices", True) and bad.any():
        values = np.broadcast_to(idx, bad.shape)[bad]
        what = "take" if op.op == "load" else "scatter_add"
        raise PlaitError(f"kernel {m.prog.name}: {what} along {axis!r} into buffer "
                         f"{op.attr('buffer')!r}: index {int(values[0])} is outside "
                         f"[0, {size}) (the size of {axis}); {values.size} element(s) "
                         "read such indices")
    return mask & ok


def _positions(m, buffer_axes, axis, idx, ok):
    """The element of each buffer axis each fragment element addresses (0 where masked)."""
    return tuple(np.where(ok, idx if a == axis else m.index(a), 0) for a in buffer_axes)


def take_load(m, op, idx, arrays):
    buf = arrays[op.attr("buffer")]
    axes = m.prog.buffer(op.attr("buffer")).axes
    ok = _in_range(m, op, idx, m.in_bounds(op.axes))
    value = buf[_positions(m, axes, op.attr("take"), idx, ok)]
    return np.where(ok, value, np.zeros((), buf.dtype))


def view_load(m, op, indices, arrays):
    """A reshape's load (tileir/view_load.py): the buffer at the given indices along the
    axes `view` names, the load's own positions along the others. An index outside its
    axis reads 0 (a pad's border, which the guard fills afterwards): it is no error."""
    buf = arrays[op.attr("buffer")]
    axes = m.prog.buffer(op.attr("buffer")).axes
    at = dict(zip(op.attr("view"), indices))
    ok = m.in_bounds(op.axes)
    for a, idx in at.items():
        ok = ok & (idx >= 0) & (idx < m.sizes[a])
    value = buf[tuple(np.where(ok, at[a] if a in at else m.index(a), 0) for a in axes)]
    return np.where(ok, value, np.zeros((), buf.dtype))


def scatter_add(m, op, args, arrays):
    src, idx = args
    buffer = m.prog.buffer(op.attr("buffer"))
    target = arrays[buffer.name]
    mask = m.in_bounds(op.axes) & m.owner(op.axes)
    ok = _in_range(m, op, idx, mask)
    add_at(target, buffer.dtype, _positions(m, buffer.axes, op.attr("take"), idx, ok), ok,
           src)
    return None


def add_at(target: np.ndarray, dtype, at, ok: np.ndarray, src: np.ndarray) -> None:
    """src added into `target` at positions `at` (one index array per buffer axis) where
    `ok`, each value rounded to the buffer's `dtype` first; all of them broadcast."""
    shape = np.broadcast_shapes(ok.shape, src.shape, *[p.shape for p in at])
    ok = np.broadcast_to(ok, shape)
    value = np.broadcast_to(src, shape)[ok].astype(np.float64)
    np.add.at(target, tuple(np.broadcast_to(p, shape)[ok] for p in at),
              round_to(value, dtype).astype(target.dtype))
