"""The products of a streamed kernel's step on mma.sync m16n8k16, fragment by fragment.

`em` is the kernel emitter (stream/emitter.py). Values are dicts keyed by register
position (row slot, (8-column block, column of the pair)); slot r of a warp is its rows
8r + lane/4: m block i holds slots 2i and 2i+1. Two products:

    scores:   a resident (rows x width) times a streamed tile (keys x width), transposed:
              [rows, keys] accumulators (q . k in the forward)
    weighted: a [rows, keys] value, its accumulator registers packed as the A operand,
              times a streamed tile (keys x width): [rows, width] added to an accumulator
    scatter:  a [rows, keys] value, transposed through shared memory, times a resident
              (rows x width): [keys, width] summed over the block's rows, added with
              atomic reductions into an fp32 buffer (attention's dq in the dk/dv kernel)

ldmatrix row addresses are worked out once per lane and tile (`tile_offsets`); rows 16
apart keep their swizzle, so that part is an address immediate.
"""
from __future__ import annotations

from llvmlite import ir

from ..nvptx import ops as L
from ..nvptx import ptx_mma as P
from ..nvptx.swizzle import swizzled as _swizzled


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


def to_scratch(em, w: dict, t) -> None:
    """This warp's rows of w, in t's dtype, into the scratch tile [rows, keys]."""
    b, sk = em.b, em.sk
    dtype = em.buffers[t.name].dtype
    scratch = b.add(em.base, L.i32(sk.scratch_offset))
    quad_row = b.lshr(em.lane, L.i32(2))
    for slot in range(2 * sk.row_blocks):
        row = b.add(em.warp_row, b.add(L.i32(8 * slot), quad_row))
        for jb in range(sk.keys // 8):
            (word,) = L.encode_pairs(b, [w[(slot, (jb, 0))], w[(slot, (jb, 1))]], dtype)
            at = b.add(_swizzled(b, row, L.i32(jb), sk.keys * 2), b.shl(em.lane_col, L.i32(1)))
            P.st_shared_b32(b, b.add(scratch, at), word)


def scatter(em, t, name: str) -> None:
    """Add sum over the block's rows of w . t (t a resident [rows, width], w in the
    scratch tile) into buffer `name` [batch, keys, width], f32. The sum runs over the
    rows, which the warps split: after a barrier (every warp's rows of w written) each
    warp takes 16 keys of the product (and a share of the width where the warps
    outnumber the 16-key blocks), its A fragments read transposed."""
    b, sk = em.b, em.sk
    dtype = em.buffers[t.name].dtype
    kind = P.MMA_TYPES[dtype.short]
    scratch = b.add(em.base, L.i32(sk.scratch_offset))
    w_row_bytes = sk.keys * 2
    P.barrier(b)
    r8, lo, hi = lane_parts(em)
    m_blocks, units = sk.keys // 16, t.pad // 16
    if m_blocks >= sk.warps:
        rounds, parts = -(-m_blocks // sk.warps), 1
    else:
        rounds, parts = 1, sk.warps // m_blocks
    per_part = -(-units // parts)
    resident = b.add(em.base, L.i32(sk.resident_offset(t.name)))
    for i in range(rounds):
        if parts == 1:
            mi, part = b.add(em.warp, L.i32(i * sk.warps)), L.i32(0)
        else:
            mi, part = b.urem(em.warp, L.i32(m_blocks)), b.udiv(em.warp, L.i32(m_blocks))
        busy = b.and_(b.icmp_unsigned("<", mi, L.i32(m_blocks)),
                      b.icmp_unsigned("<", part, L.i32(parts)))
        with b.if_then(busy):
            a = [P.ldmatrix_x4(b, b.add(scratch, _swizzled(
                b, b.add(L.i32(16 * kk), b.add(r8, b.shl(hi, L.i32(3)))),
                b.add(b.shl(mi, L.i32(1)), lo), w_row_bytes)), True)
                for kk in range(sk.rows // 16)]
            for u in range(per_part):
                ni = b.add(b.mul(part, L.i32(per_part)), L.i32(u))
                with b.if_then(b.icmp_unsigned("<", ni, L.i32(units))):
                    acc = [[L.f32(0.0)] * 4, [L.f32(0.0)] * 4]
                    for kk in range(sk.rows // 16):
                        addr = b.add(resident, _swizzled(
                            b, b.add(L.i32(16 * kk), b.add(r8, b.shl(lo, L.i32(3)))),
                            b.add(hi, b.shl(ni, L.i32(1))), t.pad * 2))
                        regs = P.ldmatrix_x4(b, addr, True)
                        acc = [P.mma_16816(b, acc[n], a[kk], regs[2 * n:2 * n + 2], kind)
                               for n in (0, 1)]
                    _add_fragments(em, name, t.width, mi, ni, acc)


def _add_fragments(em, name: str, width: int, mi, ni, acc) -> None:
    """The accumulators of keys 16 mi.. and columns 16 ni.. added into buffer `name`."""
    b, sk = em.b, em.sk
    base = em.args[("buffer", name)]
    keys = em.size(sk.keys_axis)
    for n in (0, 1):
        col = b.add(b.add(b.shl(ni, L.i32(4)), L.i32(8 * n)), em.lane_col)
        for h in (0, 1):
            key = b.add(b.add(em.key0, b.shl(mi, L.i32(4))),
                        b.add(b.lshr(em.lane, L.i32(2)), L.i32(8 * h)))
            row_at = b.add(em.offsets[name], b.mul(b.zext(key, L.I64), ir.Constant(L.I64, width)))
            for e in (0, 1):
                c = b.add(col, L.i32(e))
                valid = b.and_(b.icmp_signed("<", key, keys), b.icmp_signed("<", c, L.i32(width)))
                element = b.add(row_at, b.zext(c, L.I64))
                ptr = b.gep(base, [b.mul(element, ir.Constant(L.I64, 4))])
                P.red_add_f32(b, b.ptrtoint(ptr, L.I64), acc[n][2 * h + e], valid)
