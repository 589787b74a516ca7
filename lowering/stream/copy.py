"""Threads of a streamed kernel copying its tiles into swizzled shared memory (where a
chunk goes is the emitter's `place`: each instruction reads its own arrangement).

`em` is the kernel emitter (stream/emitter.py): builder, arguments, sizes, the
thread index and the tensors' batch offsets. Every thread copies 16-byte chunks with
cp.async; a chunk outside the tensor (rows past the end, the head's padding) is
zero-filled, so the products need no masks along the padded axes.
"""
from __future__ import annotations

from llvmlite import ir

from ..nvptx import ops as L
from ..nvptx import ptx_mma as P


def copy_rows(em, name: str, rows_axis: str, row0, n_rows: int, width: int,
               padded: int, dst_base) -> None:
    """cp.async rows row0 .. row0+n_rows of tensor `name` ([batch, rows, width],
    width innermost) into a swizzled tile at `dst_base`; outside rows and the padding
    columns are zero-filled."""
    b, sk = em.b, em.sk
    per_row = padded * 2 // 16
    total = n_rows * per_row
    src = em.args[("buffer", name)]
    rows_in = em.size(rows_axis)
    for i in range(-(-total // sk.threads)):
        q = b.add(em.tid, L.i32(i * sk.threads))
        row, chunk = b.udiv(q, L.i32(per_row)), b.urem(q, L.i32(per_row))
        at = b.add(row0, row)
        valid = b.and_(b.icmp_signed("<", at, rows_in),
                       b.icmp_signed("<", b.mul(chunk, L.i32(8)), L.i32(width)))
        if (i + 1) * sk.threads > total:
            valid = b.and_(valid, b.icmp_signed("<", q, L.i32(total)))
        element = b.add(em.offsets[name],
                        b.add(b.mul(b.zext(at, L.I64), ir.Constant(L.I64, width)),
                              b.zext(b.mul(chunk, L.i32(8)), L.I64)))
        ptr = b.gep(src, [b.mul(element, ir.Constant(L.I64, 2))])
        ptr = b.ptrtoint(b.select(valid, ptr, src), L.I64)
        dst = b.add(dst_base, em.place(row, chunk, n_rows, padded))
        if (i + 1) * sk.threads > total:
            with b.if_then(b.icmp_signed("<", q, L.i32(total))):
                P.cp_async_16(b, dst, ptr, valid)
        else:
            P.cp_async_16(b, dst, ptr, valid)

def copy_step(em, j, stage) -> None:
    """cp.async every streamed tile of step j into stage `stage`."""
    b, sk = em.b, em.sk
    base = b.add(b.add(em.base, L.i32(sk.resident_bytes)), b.mul(stage, L.i32(sk.stage_bytes)))
    key0 = b.mul(j, L.i32(sk.keys))
    for t in sk.streamed:
        copy_rows(em, t.name, sk.keys_axis, key0, sk.keys, t.width, t.pad,
                  b.add(base, L.i32(sk.stage_offset(t.name))))
