"""The CPU executor's steps of a scan (ir/scan_steps.py says what each step computes).

Values are emulate's arrays (blocks, Tr, Tc, Rr, Rc, V). The steps fold in the GPU's
order: vector lanes, then a Kogge-Stone scan of the threads' totals over a warp's lanes,
then the warps' totals in warp order (the ones before this warp make its prefix), then
the repeats one after another, carrying the running total. A thread or repeat the
executor does not hold is masked on the GPU and holds the identity, which changes no
prefix: those are left out here.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import DType
from plait.dsl.node import OPS

from . import mathfns
from ..tileir.scan_combine import scan_identity_value

_TR, _TC, _RR, _RC, _V = 1, 2, 3, 4, 5
_DTYPE = {np.dtype(np.float32): DType.FP32, np.dtype(np.int32): DType.INT32,
          np.dtype(np.int64): DType.INT64, np.dtype(np.bool_): DType.BOOL}


def scan_identity(kind: str, dtype) -> np.generic:
    """What an element outside the tensor contributes to named scan `kind` in register
    dtype `dtype` (np.float32, np.int32, ...): 0, 1, or the lowest / highest value."""
    return np.dtype(dtype).type(scan_identity_value(kind, _DTYPE[np.dtype(dtype)]))


def combine_fn(kind: str):
    """The numpy fold of two partials of named scan `kind` (the op table's combine)."""
    return mathfns.BINARY[OPS[kind].combine]


class Combine:
    """A scan step's combine on tuple states (one array per part), run op by op through
    `step`, the thread executor's rule for one op (emulate._step). Called as
    fn(earlier, later) in scan order: a reverse scan combines (later, earlier), since
    its result is x_t o ... o x_last."""

    def __init__(self, op, step, np_types):
        self.program, self.results = op.attr("combine"), op.attr("results")
        self.types = [np_types[d] for d in op.attr("dtypes")]
        self.identity = tuple(np.asarray(v).astype(t)
                              for v, t in zip(op.attr("init"), self.types))
        self.step = step
        self.reverse = bool(op.attr("reverse"))

    def __call__(self, left: tuple, right: tuple) -> tuple:
        if self.reverse:
            left, right = right, left
        values = {}
        with np.errstate(all="ignore"):
            for c in self.program:
                if c.op == "scan_arg":
                    values[c.id] = (left + right)[c.attr("index")]
                else:
                    values[c.id] = self.step(None, c, [values[a] for a in c.args], {}, {})
        return tuple(np.asarray(values[r]).astype(t) for r, t in zip(self.results,
                                                                      self.types))


def _dims(m, op):
    lay = m.layout
    if lay.row is not None and op.attr("axis") == lay.row.axis:
        return lay.row, _TR, _RR, None
    return lay.col, _TC, _RC, _V


def _take(state, dim, index):
    return tuple(np.take(s, index, axis=dim) for s in state)


def _where(mask, a: tuple, b: tuple) -> tuple:
    return tuple(np.where(mask, x, y) for x, y in zip(a, b))


def scan_local(m, op, values, step, np_types):
    """Each part in its register dtype over the axis's held positions, those outside the
    tensor the identity; an inclusive scan along V."""
    fn = Combine(op, step, np_types)
    axis = op.attr("axis")
    inside = m.in_bounds((axis,))
    shape = np.broadcast_shapes(inside.shape, *(np.shape(v) for v in values))
    state = tuple(np.where(inside, np.broadcast_to(v, shape).astype(t), i).astype(t)
                  for v, t, i in zip(values, fn.types, fn.identity))
    _, _, _, vdim = _dims(m, op)
    if vdim is None or shape[vdim] == 1:
        return state
    order = list(range(shape[vdim]))
    order = order[::-1] if op.attr("reverse") else order
    out = [np.empty_like(s) for s in state]
    acc = None
    for v in order:
        x = _take(state, vdim, [v])
        acc = x if acc is None else fn(acc, x)
        for o, a in zip(out, acc):
            idx = [slice(None)] * o.ndim
            idx[vdim] = slice(v, v + 1)
            o[tuple(idx)] = a
    return tuple(out)


def scan_carry(m, op, arrays, step, np_types):
    """A split scan's carry-in: the totals of the chunks before this block's (after it,
    reversed), read from the `carry` buffers and folded in scan order."""
    fn = Combine(op, step, np_types)
    rev, part = bool(op.attr("reverse")), op.attr("chunks")
    mine = m.block_index[op.attr("axis")]
    acc = fn.identity
    for c in (reversed(range(m.sizes[part])) if rev else range(m.sizes[part])):
        total = []
        for name, t in zip(op.attr("carry"), fn.types):
            axes = m.prog.buffer(name).axes
            inside = m.in_bounds(tuple(a for a in axes if a != part))
            index = tuple(c if a == part else np.where(inside, m.index(a), 0) for a in axes)
            total.append(np.asarray(arrays[name][index]).astype(t))
        acc = _where((c > mine) if rev else (c < mine), fn(acc, tuple(total)), acc)
    return acc


def scan_block(m, op, local, step, np_types, carry_in=None):
    """The block-wide inclusive scan of the state `local` along the axis (module doc),
    its running total starting from `carry_in` where a split scan's chunk has one."""
    fn = Combine(op, step, np_types)
    rev = bool(op.attr("reverse"))
    amap, tdim, rdim, vdim = _dims(m, op)
    ident = fn.identity
    threads, reps = local[0].shape[tdim], local[0].shape[rdim]
    lanes = 1 << len(op.attr("lanes"))
    lane = np.arange(threads)
    in_warp, warp = lane % lanes, lane // lanes
    warps = amap.threads // lanes
    shape = [1] * local[0].ndim
    shape[tdim] = threads
    out = [np.empty_like(s) for s in local]
    carry = carry_in
    for r in (reversed(range(reps)) if rev else range(reps)):
        chunk = _take(local, rdim, [r])
        last = (0 if rev else chunk[0].shape[vdim] - 1) if vdim is not None else None
        inclusive = chunk if vdim is None else _take(chunk, vdim, [last])
        for d in (1 << k for k in range(len(op.attr("lanes")))):
            partner = lane + d if rev else lane - d
            ok = (in_warp + d < lanes) & (partner < threads) if rev else in_warp >= d
            other = _take(inclusive, tdim, np.clip(partner, 0, threads - 1))
            inclusive = _where(ok.reshape(shape), fn(other, inclusive), inclusive)
        partner = lane + 1 if rev else lane - 1
        ok = (in_warp + 1 < lanes) & (partner < threads) if rev else in_warp >= 1
        exclusive = _where(ok.reshape(shape), _take(
            inclusive, tdim, np.clip(partner, 0, threads - 1)), ident)
        # warp u's total: its first lane's inclusive value (reverse) or its last held
        # lane's (identities past the held threads change nothing)
        before, block_total = tuple(np.broadcast_to(i, e.shape) for i, e in
                                    zip(ident, exclusive)), None
        for u in (reversed(range(warps)) if rev else range(warps)):   # scan order
            if u * lanes >= threads:
                continue
            src = u * lanes if rev else min(u * lanes + lanes - 1, threads - 1)
            val = _take(inclusive, tdim, [src])
            block_total = val if block_total is None else fn(block_total, val)
            earlier = (warp < u) if rev else (warp > u)
            before = _where(earlier.reshape(shape), fn(before, val), before)
        prefix = fn(before, exclusive)
        if carry is not None:
            prefix = fn(carry, prefix)
        done = fn(prefix, chunk)
        for o, d in zip(out, done):
            idx = [slice(None)] * o.ndim
            idx[rdim] = slice(r, r + 1)
            o[tuple(idx)] = np.broadcast_to(d, o[tuple(idx)].shape)
        carry = block_total if carry is None else fn(carry, block_total)
    return carry if op.attr("total") else tuple(out)
