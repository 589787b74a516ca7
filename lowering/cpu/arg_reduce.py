"""The CPU executor's steps of a pair reduction (argmax, argmin): the state is a tuple
(values, indices) of arrays shaped as emulate's values, folded by `mathfns.arg_combine`.

The steps mirror emulate's one-value steps (and the GPU's): the thread's own fragment
(vector lanes, then repeats), the butterfly over a warp's lanes, then the warps through
shared memory, in the same order. A thread, repeat or warp the executor does not hold is
masked on the GPU and holds the identity (lowest value, index INT32_MAX), which loses to
every pair: folding it in changes nothing, so those steps are skipped here.
"""
from __future__ import annotations

import numpy as np

from . import mathfns

_TR, _TC, _RR, _RC, _V = 1, 2, 3, 4, 5


def _thread_dim(m, axis):
    lay = m.layout
    if lay.row is not None and axis == lay.row.axis:
        return lay.row, _TR
    return lay.col, _TC


def _spread(value, dim: int, threads: int):
    return np.broadcast_to(value, [s if d != dim else threads
                                   for d, s in enumerate(value.shape)])


def reduce_local(m, op, value, np_types):
    """(values, indices) of the thread's own elements along the axis, folded; elements
    outside the tensor are the identity."""
    kind, axis = op.attr("op"), op.attr("axis")
    dtype = np_types[op.attr("value")]
    inside = m.in_bounds((axis,))
    index = np.broadcast_to(m.index(axis), np.broadcast_shapes(np.shape(m.index(axis)),
                                                               np.shape(value)))
    state = (np.where(inside, value, mathfns.reduce_identity(kind, dtype)).astype(dtype),
             np.where(inside, index, mathfns.INDEX_IDENTITY).astype(np.int32))
    shape = np.broadcast_shapes(state[0].shape, state[1].shape)
    state = tuple(np.broadcast_to(s, shape) for s in state)
    lay = m.layout
    dims = (_RR,) if lay.row is not None and axis == lay.row.axis else \
        (_RC, _V) if lay.col is not None and axis == lay.col.axis else ()
    for dim in (_V, _RC, _RR):        # vector lanes first, as the GPU code does
        if dim in dims and state[0].shape[dim] > 1:
            acc = tuple(np.take(s, [0], axis=dim) for s in state)
            for i in range(1, state[0].shape[dim]):
                acc = mathfns.arg_combine(kind, acc, tuple(np.take(s, [i], axis=dim)
                                                           for s in state))
            state = acc
    return state


def reduce_shfl(m, op, state):
    amap, dim = _thread_dim(m, op.attr("axis"))
    threads = m.held[amap.axis][0]
    state = tuple(_spread(s, dim, threads) for s in state)
    lane = np.arange(threads)
    for lanes in op.attr("lanes"):
        partner = lanes >> amap.shift
        if partner < threads:
            other = tuple(np.take(s, lane ^ partner, axis=dim) for s in state)
            state = mathfns.arg_combine(op.attr("op"), state, other)
    return state


def smem_put(m, op, state) -> None:
    amap, dim = _thread_dim(m, op.attr("axis"))
    threads = m.held[amap.axis][0]
    m.shared[op.attr("slot")] = tuple(_spread(s, dim, threads) for s in state)


def smem_fold(m, op):
    amap, dim = _thread_dim(m, op.attr("axis"))
    threads = m.held[amap.axis][0]
    state = m.shared[op.attr("slot")]
    group = 1 << (min(op.attr("bits")) - amap.shift)  # thread-index bit where warps start
    acc = tuple(np.take(s, [0], axis=dim) for s in state)
    for w in range(1, amap.threads // group):
        if w * group < threads:
            acc = mathfns.arg_combine(op.attr("op"), acc,
                                      tuple(np.take(s, [w * group], axis=dim) for s in state))
    return acc
