"""LLVM emission of the rotated load (`rotate=(axis, mode)`; the spec is rotate_load.py,
which the CPU executor runs): the source index of each memory instruction, and the sign
and lane order applied to the elements it brought."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from . import ops as L


def _along_vector(buf, axis: str, vec: int) -> bool:
    """Whether the instruction's `vec` elements run along the rotated axis."""
    return vec > 1 and buf.axes[-1] == axis


def rotated_source(em, buf, rotate, vec: int, r: int, c: int, v0: int, ahead):
    """({axis: source index (i32)} for the address, the negation predicate or None) of
    the instruction at fragment element (r, c, v0). In 'pairs' mode along the vector the
    address is the plain one: the lanes are swapped afterwards (`apply_rotation`)."""
    axis, mode = rotate
    b = em.b
    if mode == "pairs" and _along_vector(buf, axis, vec):
        return {}, None
    i = em.index(axis, r, c, v0, ahead)
    if mode == "pairs":
        even = b.icmp_unsigned("==", b.and_(i, L.i32(1)), L.i32(0))
        return {axis: b.xor(i, L.i32(1))}, even
    half = b.lshr(em.size(axis), L.i32(1))
    low = b.icmp_unsigned("<", i, half)       # the vector lies on one side: n/2 % vec == 0
    return {axis: b.select(low, b.add(i, half), b.sub(i, half))}, low


def _negated(b: ir.IRBuilder, x):
    """-x for a register float, or for a narrow float's storage bits (the sign bit)."""
    if isinstance(x.type, ir.FloatType):
        return b.fneg(x)
    return b.xor(x, ir.Constant(x.type, 1 << (x.type.width - 1)))


def apply_rotation(b: ir.IRBuilder, out: np.ndarray, at, vec: int, buf, rotate,
                   negate) -> None:
    """Sign (and, for pairs along the vector, lane order) of the `vec` elements just
    unpacked into `out` from fragment element `at` on."""
    r, c, v0 = at
    if negate is None:            # whole pairs in the vector: (a, b) -> (-b, a)
        for k in range(v0, v0 + vec, 2):
            first, second = out[r, c, k], out[r, c, k + 1]
            out[r, c, k], out[r, c, k + 1] = _negated(b, second), first
        return
    for k in range(v0, v0 + vec):
        out[r, c, k] = b.select(negate, _negated(b, out[r, c, k]), out[r, c, k])
