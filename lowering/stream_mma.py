"""The products of a streamed kernel's step on mma.sync m16n8k16, fragment by fragment.

`em` is the kernel emitter (stream_sm80._Emitter). Values are dicts keyed by register
position (row slot, (8-column block, column of the pair)); slot r of a warp is its rows
8r + lane/4: m block i holds slots 2i and 2i+1. Two products:

    scores:   a resident (rows x width) times a streamed tile (keys x width), transposed:
              [rows, keys] accumulators (q . k in the forward)
    weighted: a [rows, keys] value, its accumulator registers packed as the A operand,
              times a streamed tile (keys x width): [rows, width] added to an accumulator

ldmatrix row addresses are worked out once per lane and tile (`tile_offsets`); rows 16
apart keep their swizzle, so that part is an address immediate.
"""
from __future__ import annotations

from . import ops_llvm as L
from . import ptx_mma as P
from .stream_copy import swizzled as _swizzled


def lane_parts(em):
    b = em.b
    j = b.lshr(em.lane, L.i32(3))
    return b.and_(em.lane, L.i32(7)), b.and_(j, L.i32(1)), b.lshr(j, L.i32(1))


def tile_offsets(em, t, trans: bool) -> list:
    """This lane's ldmatrix byte offsets into streamed tile t, per 16 columns: as the B
    operand of a score (rows are keys, x4 covers 16 keys x 16 columns) or, `trans`, of
    a weighted product (x4.trans covers 16 keys x 16 columns, transposed)."""
    b = em.b
    r8, lo, hi = lane_parts(em)
    row_bytes = t.pad * 2
    if trans:
        return [_swizzled(b, b.add(r8, b.shl(lo, L.i32(3))), b.add(hi, L.i32(2 * ip)), row_bytes)
                for ip in range(t.pad // 16)]
    return [_swizzled(b, b.add(r8, b.shl(hi, L.i32(3))), b.add(lo, L.i32(2 * kk)), row_bytes)
            for kk in range(t.pad // 16)]


def fragments(em, t) -> list:
    """[m block][16 of width]: A fragments of the warp's rows of resident t (in registers
    for the whole loop, or read again each step where registers are short)."""
    b, sk = em.b, em.sk
    r8, lo, hi = lane_parts(em)
    base = b.add(em.base, L.i32(sk.resident_offset(t.name)))
    out = []
    for i in range(sk.row_blocks):
        row = b.add(em.warp_row, b.add(L.i32(16 * i), b.add(r8, b.shl(lo, L.i32(3)))))
        out.append([P.ldmatrix_x4(b, b.add(base, _swizzled(b, row, b.add(hi, L.i32(2 * kk)),
                                                           t.pad * 2)), False)
                    for kk in range(t.pad // 16)])
    return out


def scores(em, a, c) -> dict:
    """a . c_j: {(m block, 8 keys): 4 accumulators}. Each fragment of the streamed tile c
    serves every m block of the warp, which is what more rows per warp buy."""
    b, sk = em.b, em.sk
    kind = P.MMA_TYPES[em.buffers[a.name].dtype.short]
    frags = em.resident_frags.get(a.name) or fragments(em, a)
    acc = {}
    row_bytes = c.pad * 2
    base = b.add(em.stage_base, L.i32(sk.stage_offset(c.name)))
    offsets = em.tile_offsets[c.name, False]
    for jp in range(sk.keys // 16):        # two blocks of 8 keys per ldmatrix.x4
        out = {(i, n): [L.f32(0.0)] * 4 for i in range(sk.row_blocks) for n in (0, 1)}
        for kk in range(a.pad // 16):
            addr = b.add(b.add(base, offsets[kk]), L.i32(16 * jp * row_bytes))
            regs = P.ldmatrix_x4(b, addr, False)
            for (i, n), value in out.items():
                out[i, n] = P.mma_16816(b, value, frags[i][kk], regs[2 * n:2 * n + 2], kind)
        for (i, n), value in out.items():
            acc[i, 2 * jp + n] = value
    return {(2 * i + h, (j, e)): value[2 * h + e] for (i, j), value in acc.items()
            for h in (0, 1) for e in (0, 1)}


def weighted(em, p: dict, acc: dict, t) -> dict:
    """round(p) . t_j + acc, with p's accumulator registers as the A operand: rows
    8r.. of slot r; m block i holds slots 2i (rows +0) and 2i+1 (rows +8)."""
    b, sk = em.b, em.sk
    dtype = em.buffers[t.name].dtype
    kind = P.MMA_TYPES[dtype.short]
    base = b.add(em.stage_base, L.i32(sk.stage_offset(t.name)))
    offsets = em.tile_offsets[t.name, True]
    blocks = range(sk.row_blocks)
    out = {(i, je): [acc[(2 * i + h, (je, e))] for h in (0, 1) for e in (0, 1)]
           for i in blocks for je in range(t.pad // 8)}
    row_bytes = t.pad * 2
    for kk in range(sk.keys // 16):
        a = {}
        for i in blocks:         # a0 a1 from key block 2kk, a2 a3 from 2kk+1
            a[i] = [word for jb in (2 * kk, 2 * kk + 1) for h in (0, 1) for word in
                    L.encode_pairs(b, [p[(2 * i + h, (jb, 0))], p[(2 * i + h, (jb, 1))]],
                                   dtype)]
        for ip in range(t.pad // 16):
            addr = b.add(b.add(base, offsets[ip]), L.i32(16 * kk * row_bytes))
            regs = P.ldmatrix_x4(b, addr, True)
            for i in blocks:
                for n in (0, 1):
                    key = (i, 2 * ip + n)
                    out[key] = P.mma_16816(b, out[key], a[i], regs[2 * n:2 * n + 2], kind)
    return {(2 * i + h, (je, e)): value[2 * h + e] for (i, je), value in out.items()
            for h in (0, 1) for e in (0, 1)}
