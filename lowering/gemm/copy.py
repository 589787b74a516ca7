"""Threads copying an operand tile from global memory into a stage of shared memory.

Both contraction backends stage operands the same way when threads (not the TMA) copy
them: the tile is cut into 16-byte chunks of shared memory, a thread takes chunks
`thread`, `thread + threads`, ..., and each chunk lands where the backend's swizzled
layout puts it. How a chunk travels depends on the operand's *access width*: the
widest global access every chunk of it is aligned to (`access_width`).

    16, 8, 4 bytes: cp.async of that size, 16/width per chunk, each piece zero-filled
                    when it lies outside the operand (src-size 0);
    2, 1 bytes:     element loads into registers (predicated, zero outside), packed
                    and stored to shared memory as one 16-byte word.

A piece is wholly inside or wholly outside, because the width divides the row pitch.
So a row pitch that is not a multiple of 16 bytes (bf16 K = 4095) costs narrower copies,
never a fall off tensor cores.
"""
from __future__ import annotations

from llvmlite import ir

from ..nvptx import ops as L
from ..nvptx import ptx_mma as P
from ..nvptx.kernel import loop
from ..nvptx.ptx_memory import asm_load_words
from .plan import CHUNK, access_width  # noqa: F401  (access_width: where the docstring says)


def strides(k, axes) -> dict:
    """Element strides (i64) of a row-major tensor over `axes`; `k` is the kernel emitter."""
    b, out, step = k.b, {}, ir.Constant(L.I64, 1)
    for axis in reversed(axes):
        out[axis] = step
        step = b.mul(step, b.zext(k.size(axis), L.I64))
    return out




class TileCopy:
    """One operand's chunks of one thread, for tiles whose corner is (row0, k = 0).

    `op` is the gemm Operand, `rows_axis` its M or N axis, `tile_rows` the tile's extent
    along it, `row_bytes` the bytes of a shared-memory row (one per M/N index when K-major,
    per K index when MN-major), `dst(row, chunk)` the chunk's byte offset in the stage,
    `in_flight` the most register loads the thread may hold at once (more are faster
    until ptxas spills)."""

    def __init__(self, k, op, rows_axis: str, row0, tile_rows: int, row_bytes: int,
                 thread, threads: int, width: int, dst, in_flight: int):
        g, b = k.g, k.b
        self.in_flight = in_flight
        self.k, self.op, self.rows_axis, self.width = k, op, rows_axis, width
        self.row0, self.thread, self.threads, self.dst = row0, thread, threads, dst
        self.elems = CHUNK // op.dtype.itemsize       # elements per chunk
        self.per_row = row_bytes // CHUNK
        self.count = tile_rows * g.tile_k * op.dtype.itemsize // CHUNK // threads
        st = strides(k, op.buffer.axes)
        self.k_stride, self.rows_stride = st[g.k], st[rows_axis]
        self.fixed = ir.Constant(L.I64, 0)            # the batch's offset
        for axis in op.buffer.axes:
            if axis in k.batch_index:
                self.fixed = b.add(self.fixed, b.mul(b.zext(k.batch_index[axis], L.I64),
                                                     st[axis]))

    def _chunk(self, i):
        """(shared offset, element offset at k = 0, M/N index, K offset) of the thread's
        i-th chunk (i an i32 value)."""
        b = self.k.b
        q = b.add(self.thread, b.mul(i, L.i32(self.threads)))
        row, chunk = b.udiv(q, L.i32(self.per_row)), b.urem(q, L.i32(self.per_row))
        if self.op.k_major:
            index, k_off = b.add(self.row0, row), b.mul(chunk, L.i32(self.elems))
        else:
            index, k_off = b.add(self.row0, b.mul(chunk, L.i32(self.elems))), row
        offset = b.add(self.fixed, b.add(b.mul(b.zext(index, L.I64), self.rows_stride),
                                         b.mul(b.zext(k_off, L.I64), self.k_stride)))
        return self.dst(row, chunk), offset, index, k_off

    def issue(self, k0, stage_base) -> None:
        """Copy every chunk of the K tile starting at k0 into the stage at `stage_base`
        (asynchronously for widths of 4 and more; the caller commits and waits).
        Register copies go a group at a time, so that a thread never holds more than
        `in_flight` loads."""
        if self.width >= 4:
            for i in range(self.count):
                self._copy_chunk(self._chunk(L.i32(i)), k0, stage_base)
            return
        pieces = CHUNK // self.width
        group = max(d for d in range(1, self.count + 1)
                    if self.count % d == 0 and d * pieces <= max(self.in_flight, pieces))
        b = self.k.b

        def body(j, carried):
            for i in range(group):
                self._copy_chunk(self._chunk(b.add(b.mul(j, L.i32(group)), L.i32(i))), k0,
                                 stage_base)
            return carried
        loop(b, self.k.fn, L.i32(self.count // group), [], body)

    def _copy_chunk(self, chunk, k0, stage_base) -> None:
        k, b, g = self.k, self.k.b, self.k.g
        dst, offset, index, k_off = chunk
        base = k.args[("buffer", self.op.buffer.name)]
        es = self.op.dtype.itemsize
        step = self.width // es                       # elements per piece
        rows, depth = k.size(self.rows_axis), k.size(g.k)
        at = b.add(offset, b.mul(b.zext(k0, L.I64), self.k_stride))
        kk = b.add(k0, k_off)
        rows_in = b.icmp_signed("<", index, rows)
        depth_in = b.icmp_signed("<", kk, depth)
        # One address per chunk, its pieces at constant offsets (address immediates, not
        # a register pair each); a chunk wholly outside reads at the base instead.
        src = b.gep(base, [b.mul(at, ir.Constant(L.I64, es))])
        src = b.ptrtoint(b.select(b.and_(rows_in, depth_in), src, base), L.I64)
        words = []
        for p in range(CHUNK // self.width):
            if self.op.k_major:            # pieces walk along K
                valid = b.and_(rows_in, b.icmp_signed("<", b.add(kk, L.i32(p * step)), depth))
            else:                          # pieces walk along M/N
                valid = b.and_(b.icmp_signed("<", b.add(index, L.i32(p * step)), rows),
                               depth_in)
            piece = b.add(src, ir.Constant(L.I64, p * self.width))
            if self.width >= 4:            # src-size 0 outside: nothing is read
                P.cp_async(b, b.add(stage_base, b.add(dst, L.i32(p * self.width))), piece,
                           valid, self.width)
            else:                          # predicated off outside: nothing is read
                words.append(asm_load_words(b, piece, valid, step, self.op.dtype)[0])
        if words:
            _store_shared_chunk(b, b.add(stage_base, dst), words, self.width)


def _store_shared_chunk(b, addr, pieces: list, width: int) -> None:
    """Pack 16 bytes of pieces (each `width` bytes, in 16-bit registers) and store them."""
    per_word = 4 // width
    words = []
    for w in range(4):
        word = None
        for j in range(per_word):
            piece = pieces[w * per_word + j]
            bits = b.zext(b.trunc(piece, ir.IntType(8 * width)), L.I32)
            if j:
                bits = b.shl(bits, L.i32(8 * width * j))
            word = bits if word is None else b.or_(word, bits)
        words.append(word)
    b.asm(ir.FunctionType(ir.VoidType(), [L.I32] * 5),
          "st.shared.v4.b32 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}",
          [addr, *words], True)
