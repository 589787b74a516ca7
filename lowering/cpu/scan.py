"""The CPU executor's steps of a scan (tileir/scan.py says what each step computes).

Values are emulate's arrays (blocks, Tr, Tc, Rr, Rc, V). The steps fold in the GPU's
order: vector lanes, then a Kogge-Stone scan of the threads' totals over a warp's lanes,
then the warps' totals in warp order (the ones before this warp make its prefix), then
the repeats one after another, carrying the running total. A thread or repeat the
executor does not hold is masked on the GPU and holds the identity, which changes no
prefix: those are left out here.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.node import OPS

from . import mathfns

_TR, _TC, _RR, _RC, _V = 1, 2, 3, 4, 5


def scan_identity(kind: str, dtype) -> np.generic:
    """What an element outside the tensor contributes to scan `kind` in register dtype
    `dtype`: 0, 1, or the lowest / highest value (an integer has no infinity)."""
    dtype = np.dtype(dtype)
    identity = OPS[kind].identity
    if identity == "one":
        return dtype.type(1)
    if identity == "zero":
        return dtype.type(0)
    if dtype == np.bool_:
        return np.bool_(identity == "highest")
    if dtype.kind == "f":
        return dtype.type(-np.inf if identity == "lowest" else np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min if identity == "lowest" else info.max)


def combine_fn(kind: str):
    """The numpy fold of two partials of scan `kind` (the op table's combine)."""
    return mathfns.BINARY[OPS[kind].combine]


def _dims(m, op):
    lay = m.layout
    if lay.row is not None and op.attr("axis") == lay.row.axis:
        return lay.row, _TR, _RR, None
    return lay.col, _TC, _RC, _V


def _full(m, op, value, np_types):
    """value in the register dtype, broadcast along every held dim of the axis."""
    shape = np.broadcast_shapes(np.shape(value), np.shape(m.index(op.attr("axis"))))
    return np.broadcast_to(value, shape).astype(np_types[op.dtype])


def scan_local(m, op, value, np_types):
    """Elements outside the tensor made the identity; an inclusive scan along V."""
    kind, axis = op.attr("op"), op.attr("axis")
    value = _full(m, op, value, np_types)
    ident = scan_identity(kind, value.dtype)
    value = np.where(m.in_bounds((axis,)), value, ident).astype(value.dtype)
    _, _, _, vdim = _dims(m, op)
    if vdim is None or value.shape[vdim] == 1:
        return value
    fn = combine_fn(kind)
    order = range(value.shape[vdim])
    order = reversed(order) if op.attr("reverse") else order
    out, acc = np.empty_like(value), None
    with np.errstate(all="ignore"):
        for v in order:
            x = np.take(value, [v], axis=vdim)
            acc = x if acc is None else fn(acc, x).astype(value.dtype)
            idx = [slice(None)] * value.ndim
            idx[vdim] = slice(v, v + 1)
            out[tuple(idx)] = acc
    return out


def _at(a, dim, i):
    return np.take(a, [i], axis=dim)


def scan_block(m, op, local):
    """The block-wide inclusive scan of `local` along the axis (see the module doc)."""
    kind, rev = op.attr("op"), bool(op.attr("reverse"))
    amap, tdim, rdim, vdim = _dims(m, op)
    fn = combine_fn(kind)
    dtype = local.dtype
    ident = scan_identity(kind, dtype)
    threads, reps = local.shape[tdim], local.shape[rdim]
    lanes = 1 << len(op.attr("lanes"))
    lane = np.arange(threads)
    in_warp, warp = lane % lanes, lane // lanes
    warps = amap.threads // lanes
    shape = [1] * local.ndim
    shape[tdim] = threads
    out = np.empty_like(local)
    carry = None
    with np.errstate(all="ignore"):
        for r in (reversed(range(reps)) if rev else range(reps)):
            chunk = _at(local, rdim, r)
            last = (0 if rev else chunk.shape[vdim] - 1) if vdim is not None else None
            total = chunk if vdim is None else _at(chunk, vdim, last)
            inclusive = total
            for d in (1 << k for k in range(len(op.attr("lanes")))):
                partner = lane + d if rev else lane - d
                ok = (in_warp + d < lanes) & (partner < threads) if rev else in_warp >= d
                other = np.take(inclusive, np.clip(partner, 0, threads - 1), axis=tdim)
                inclusive = np.where(ok.reshape(shape), fn(other, inclusive), inclusive)
            partner = lane + 1 if rev else lane - 1
            ok = (in_warp + 1 < lanes) & (partner < threads) if rev else in_warp >= 1
            exclusive = np.where(ok.reshape(shape), np.take(
                inclusive, np.clip(partner, 0, threads - 1), axis=tdim), ident)
            # warp w's total: its first lane's inclusive value (reverse) or its last
            # held lane's (identities past the held threads change nothing)
            before, block_total = np.full_like(exclusive, ident), None
            for u in range(warps):
                if u * lanes >= threads:
                    break
                src = u * lanes if rev else min(u * lanes + lanes - 1, threads - 1)
                val = _at(inclusive, tdim, src)
                block_total = val if block_total is None else fn(block_total, val)
                earlier = (warp < u) if rev else (warp > u)
                before = np.where(earlier.reshape(shape), fn(before, val), before)
            prefix = fn(before, exclusive)
            if carry is not None:
                prefix = fn(carry, prefix)
            out_idx = [slice(None)] * local.ndim
            out_idx[rdim] = slice(r, r + 1)
            out[tuple(out_idx)] = fn(prefix, chunk).astype(dtype)
            carry = block_total if carry is None else fn(carry, block_total)
    return out
