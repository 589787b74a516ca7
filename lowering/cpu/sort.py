"""The CPU executor's step of a sort (ir/sort_steps.py says what it computes): the bitonic
network of each block, run pass by pass on numpy arrays of its (key, index) pairs, as
the GPU runs it in shared memory.

Values are emulate's arrays (blocks, Tr, Tc, Rr, Rc, V); a block holds one row of the
sorted axis (the lowering refuses others), so each block is one network.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import round_to
from plait.dsl.sort import GIVEN_SENTINEL


def precedes(ka, ia, kb, ib, size: int, descending: bool):
    """Whether (ka, ia) goes before (kb, ib): ir/sort_steps.py's total order."""
    sa, sb = ia >= size, ib >= size
    if np.asarray(ka).dtype.kind == "f":
        na, nb = np.isnan(ka), np.isnan(kb)
    else:
        na = nb = np.zeros(np.shape(ka), bool)
    with np.errstate(invalid="ignore"):
        by_value = (ka > kb) if descending else (ka < kb)
        number = by_value | ((ka == kb) & (ia < ib))
    nan = np.where(na & nb, ia < ib, na if descending else nb)
    element = np.where(na | nb, nan, number)
    return np.where(sa | sb, sb & (~sa | (ia < ib)), element)


def _compare_swap(keys, idx, lo, hi, up, size: int, descending: bool) -> None:
    """Order each pair (lo, hi): the preceding one first where `up`, last elsewhere."""
    a, b = (keys[:, lo], idx[:, lo]), (keys[:, hi], idx[:, hi])
    swap = np.where(up, precedes(*b, *a, size, descending),
                    precedes(*a, *b, size, descending))
    keys[:, lo], keys[:, hi] = np.where(swap, b[0], a[0]), np.where(swap, a[0], b[0])
    idx[:, lo], idx[:, hi] = np.where(swap, b[1], a[1]), np.where(swap, a[1], b[1])


def bitonic(keys: np.ndarray, idx: np.ndarray, size: int, descending: bool,
            chunk: int | None = None) -> None:
    """Sort each row of (keys, idx) in place, width a power of two, pass by pass; with
    `chunk`, each run of `chunk` positions alike (the last stage does not alternate)."""
    width = keys.shape[-1]
    chunk = width if chunk is None else chunk
    i = np.arange(width)
    k = 2
    while k <= chunk:
        j = k // 2
        while j >= 1:
            lo = i[(i ^ j) > i]
            # this pair's run ascends (all of them at the last stage)
            _compare_swap(keys, idx, lo, lo ^ j, (lo & k & (chunk - 1)) == 0, size,
                          descending)
            j //= 2
        k *= 2


def keep_best(keys: np.ndarray, idx: np.ndarray, size: int, descending: bool,
              chunk: int) -> None:
    """After bitonic(..., chunk): the rounds that leave the best `chunk` of each row
    sorted at its first positions (ir/sort_steps.py says how)."""
    width = keys.shape[-1]
    i = np.arange(chunk)
    span = 2 * chunk
    while span <= width:
        base = np.arange(0, width, span)[:, None]
        lo = (base + i).reshape(-1)
        hi = (base + span // 2 + chunk - 1 - i).reshape(-1)
        better = precedes(keys[:, hi], idx[:, hi], keys[:, lo], idx[:, lo], size, descending)
        keys[:, lo] = np.where(better, keys[:, hi], keys[:, lo])
        idx[:, lo] = np.where(better, idx[:, hi], idx[:, lo])
        j = chunk // 2
        while j >= 1:
            first = i[(i ^ j) > i]
            lo = (base + first).reshape(-1)
            _compare_swap(keys, idx, lo, lo ^ j, np.ones(lo.shape, bool), size, descending)
            j //= 2
        span *= 2


def sort_block(m, op, value, given=None) -> tuple[np.ndarray, np.ndarray]:
    """(sorted keys, their int32 indices) at each element's position along the axis;
    `given`: the elements' indices (ir/sort_steps.py GIVEN_SENTINEL), else positions."""
    axis, width = op.attr("axis"), op.attr("width")
    size = m.sizes[axis]
    pos = np.asarray(m.index(axis))
    shape = np.broadcast_shapes(pos.shape, np.shape(value), (m.nblocks, 1, 1, 1, 1, 1),
                                np.shape(given) if given is not None else ())
    pos = np.broadcast_to(pos, shape).reshape(shape[0], -1)
    value = np.broadcast_to(value, shape).reshape(shape[0], -1)
    keys = np.zeros((shape[0], width), value.dtype)
    idx = np.tile(np.arange(width, dtype=np.int32), (shape[0], 1))   # sentinels: >= size
    rows = np.broadcast_to(np.arange(shape[0])[:, None], pos.shape)
    inside = pos < size
    keys[rows[inside], pos[inside]] = value[inside]
    if given is not None:
        idx += GIVEN_SENTINEL
        idx[rows[inside], pos[inside]] = np.broadcast_to(given, shape).reshape(
            shape[0], -1)[inside]
        size = GIVEN_SENTINEL
    chunk = op.attr("chunk")
    bitonic(keys, idx, size, bool(op.attr("descending")), chunk)
    if chunk is not None:               # a topk's: its first `chunk` positions
        keep_best(keys, idx, size, bool(op.attr("descending")), chunk)
    at = np.minimum(pos, width - 1)
    return (np.take_along_axis(keys, at, 1).reshape(shape),
            np.take_along_axis(idx, at, 1).reshape(shape))


def sort_along(value: np.ndarray, d: int, size: int, descending: bool,
               given: np.ndarray | None = None) -> tuple:
    """(keys, int32 indices) of `value` sorted along dim d by the same network (the IR
    interpreter's sort): positions from `size` on are sentinels, after every element.
    `given`: the elements' indices (a split topk's), sentinels from GIVEN_SENTINEL on."""
    rows = np.moveaxis(value, d, -1)
    n = rows.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    keys = np.zeros((int(np.prod(rows.shape[:-1])), width), rows.dtype)
    keys[:, :n] = rows.reshape(-1, n)
    idx = np.tile(np.arange(width, dtype=np.int32), (keys.shape[0], 1))
    if given is not None:
        idx += GIVEN_SENTINEL
        idx[:, :size] = np.moveaxis(given, d, -1).reshape(-1, n)[:, :size]
        size = GIVEN_SENTINEL
    bitonic(keys, idx, size, descending)
    return tuple(np.moveaxis(a[:, :n].reshape(rows.shape), -1, d) for a in (keys, idx))


def sort_frame(f, op, args) -> tuple:
    """The IR interpreter's sort: (values, int32 indices) of each row along the axis;
    with a second operand, the indices it gives (a topk's keep reads the first k)."""
    axis = op.attr("axis")
    shape = np.broadcast_shapes(*[a.shape for a in args], f.inside((axis,)).shape)
    given = np.broadcast_to(args[1], shape) if len(args) > 1 else None
    return sort_along(np.broadcast_to(args[0], shape), f.dim(axis), f.sizes[axis],
                      bool(op.attr("descending")), given)


def store_along(m, op, value, arrays) -> None:
    """A topk's store: the element at position p < size(into) along `axis` goes to the
    buffer's [.., into = p] (the value is held along the axis the topk read)."""
    axis, into = op.attr("along")
    buffer = m.prog.buffer(op.attr("buffer"))
    axes = tuple(axis if a == into else a for a in buffer.axes)
    mask = m.in_bounds(axes) & m.owner(axes) & (np.asarray(m.index(axis)) < m.sizes[into])
    shape = np.broadcast_shapes(mask.shape, np.shape(value),
                                *[np.shape(m.index(a)) for a in axes])
    mask = np.broadcast_to(mask, shape)
    idx = tuple(np.broadcast_to(m.index(a), shape)[mask] for a in axes)
    stored = np.broadcast_to(value, shape)[mask]
    if buffer.dtype.is_float:
        stored = round_to(stored.astype(np.float64), buffer.dtype)
    arrays[buffer.name][idx] = stored.astype(arrays[buffer.name].dtype)
