"""LLVM emission of take's indexed load, the reshapes' view load and scatter_add's
indexed atomic add (the spec is lowering/cpu/gather.py, which the CPU executor runs).

The index (int32 or int64) is compared with the axis's size as an unsigned 64-bit
number, so a negative index is out of range too; an out-of-range element's load or add
is predicated off and its address is formed from row 0, so no instruction ever touches
memory outside the buffer. Along the vector the row is one index (the thread-level IR
made the vector 1 where it is not), so a row of a [V, D] table is read 16 bytes at a time.
"""
from __future__ import annotations

import itertools

import numpy as np
from llvmlite import ir

from . import ops as L
from .fragments import mask_and
from .ptx_memory import asm_load_words, asm_red_add_f32


def _row(em, raw, axis: str):
    """(the row as i32, 0 where out of range; whether the index is in range)."""
    b = em.b
    wide = raw if raw.type.width == 64 else b.sext(raw, L.I64)
    ok = b.icmp_unsigned("<", wide, b.zext(em.size(axis), L.I64))
    return b.trunc(b.select(ok, wide, ir.Constant(L.I64, 0)), L.I32), ok


def take_load(em, op) -> np.ndarray:
    buf = em.prog.buffer(op.attr("buffer"))
    axis, vec = op.attr("take"), op.attr("vector")
    shape = em.frag_shape(op.axes)
    idx = np.broadcast_to(em.value(op.args[0]), shape)
    out = np.empty(shape, dtype=object)
    for r, c in itertools.product(range(shape[0]), range(shape[1])):
        for v0 in range(0, shape[2], vec):
            row, ok = _row(em, idx[r, c, v0], axis)
            mask = mask_and(em.b, [em.in_bounds(op.axes, r, c, v0), ok])
            regs = asm_load_words(em.b, em.address(buf, r, c, v0, 0, {axis: row}), mask, vec,
                                  buf.dtype, em._cache_hint(buf))
            em.unpack(out, (r, c, v0), regs, vec, buf.dtype)
    return out


def view_load(em, op) -> np.ndarray:
    """A reshape's load (lowering/cpu/gather.py view_load is its spec): one element at a
    time, at the index operands along the axes `view` names; an index outside its axis
    is predicated off (reads 0) and addressed at 0."""
    buf = em.prog.buffer(op.attr("buffer"))
    shape = em.frag_shape(op.axes)
    indices = [np.broadcast_to(em.value(a), shape) for a in op.args]
    out = np.empty(shape, dtype=object)
    for r, c, v in itertools.product(*(range(n) for n in shape)):
        at, oks = {}, [em.in_bounds(op.axes, r, c, v)]
        for axis, idx in zip(op.attr("view"), indices):
            at[axis], ok = _row(em, idx[r, c, v], axis)
            oks.append(ok)
        regs = asm_load_words(em.b, em.address(buf, r, c, v, 0, at), mask_and(em.b, oks), 1,
                              buf.dtype, em._cache_hint(buf))
        em.unpack(out, (r, c, v), regs, 1, buf.dtype)
    return out


def scatter_add(em, op, src: np.ndarray, idx: np.ndarray) -> None:
    buf = em.prog.buffer(op.attr("buffer"))
    axis = op.attr("take")
    shape = em.frag_shape(op.axes)
    src, idx = np.broadcast_to(src, shape), np.broadcast_to(idx, shape)
    owner = em.owner(op.axes)        # threads holding one element add it once
    for r, c, v in itertools.product(*(range(n) for n in shape)):
        row, ok = _row(em, idx[r, c, v], axis)
        mask = mask_and(em.b, [em.in_bounds(op.axes, r, c, v), owner, ok])
        asm_red_add_f32(em.b, em.address(buf, r, c, v, 0, {axis: row}), mask, src[r, c, v])
