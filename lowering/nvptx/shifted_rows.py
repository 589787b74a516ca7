"""LLVM emission for rows shifted to their alignment (ir/shifted_rows.py says why and
when): each row's lead, which repeats are wholly inside the row, and the accesses of a
vector that may straddle either end of it.
"""
from __future__ import annotations

from . import ops as L
from .fragments import mask_and
from .memo import per_emitter
from .ptx_memory import asm_load_words, asm_store, asm_store_words, unpack_words


@per_emitter
def lead(em, r: int):
    """(offset of row r's first element) mod V, in wrapping i32 arithmetic: V divides
    2**32, so the wrapped offset has the same remainder."""
    b, axes = em.b, em.lay.lead_axes
    linear = L.i32(0)
    for axis in axes[:-1]:
        linear = b.add(b.mul(linear, em.size(axis)), em.index(axis, r, 0, 0))
    offset = b.mul(linear, em.size(axes[-1]))
    return b.and_(offset, L.i32(em.lay.col.vector - 1))


def column_inside(em, c: int, v: int) -> bool:
    """Whether column element (c, v) lies inside the row for every thread and lead:
    past the first vector (a lead moves columns back by less than V) and, with no lead,
    before the row's end."""
    m = em.lay.col
    return c >= 1 and c * m.threads * m.vector + (m.threads - 1) * m.vector + v < m.extent


def straddles(em, buf, c: int, v0: int, vec: int) -> bool:
    """Whether vector (c, v0..v0+vec) of `buf` may lie partly outside its row."""
    return bool(em.lay.lead_axes) and em.lay.col.axis in buf.axes and \
        not column_inside(em, c, v0 + vec - 1)


def _whole(em, buf, r, c, v0, vec, ahead=0):
    """i1: the vector's first and last elements are both inside (then all are)."""
    return mask_and(em.b, [em.in_bounds(buf.axes, r, c, v0, ahead),
                           em.in_bounds(buf.axes, r, c, v0 + vec - 1, ahead)])


def straddling_load(em, buf, r, c, v0, vec, hint, ahead=0) -> list:
    """Storage bits of the vector's elements: one vector load where it is wholly inside
    the row, else each element inside by itself (both predicated: one path runs)."""
    b = em.b
    whole = _whole(em, buf, r, c, v0, vec, ahead)
    wide = asm_load_words(b, em.address(buf, r, c, v0, ahead), whole, vec, buf.dtype, hint)
    wide_bits = unpack_words(b, wide, vec, buf.dtype)
    out = []
    for k in range(vec):
        alone = mask_and(b, [em.in_bounds(buf.axes, r, c, v0 + k, ahead), b.not_(whole)])
        one = asm_load_words(b, em.address(buf, r, c, v0 + k, ahead), alone, 1, buf.dtype,
                             hint)
        out.append(b.select(whole, wide_bits[k], unpack_words(b, one, 1, buf.dtype)[0]))
    return out


def straddling_store(em, buf, r, c, v0, vec, bits: list, owner, pairs=None) -> None:
    """Store the vector's elements: as one vector where it is wholly inside the row, else
    each element inside by itself. `bits`: each element's storage bits; `pairs` the
    (words, regs) a packed vector store takes, when the dtype packs."""
    b = em.b
    inside = _whole(em, buf, r, c, v0, vec)
    whole = mask_and(b, [inside, owner])
    if pairs is not None:
        asm_store_words(b, em.address(buf, r, c, v0), whole, *pairs)
    else:
        asm_store(b, em.address(buf, r, c, v0), whole, bits, buf.dtype)
    outside = b.not_(inside)
    for k in range(vec):
        alone = mask_and(b, [em.in_bounds(buf.axes, r, c, v0 + k), owner, outside])
        asm_store(b, em.address(buf, r, c, v0 + k), alone, [bits[k]], buf.dtype)
