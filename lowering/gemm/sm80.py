"""Stage 5 for contractions on sm_80 and later: a GemmProgram as an mma.sync kernel.

One block of `consumers` warps computes a tile_m x tile_n output tile; the warps form
a grid (`gemm.tiles.warp_grid`) and each owns a sub-tile of 16x8 mma fragments. Every
thread copies 16-byte chunks of the A and B tiles into a ring of `stages` shared-memory
stages with cp.async (chunks outside the operand are zero-filled), so that while the
warps multiply one stage the next stages-1 are in flight:

    prologue: copy tiles 0 .. S-2, one commit group each
    for kt:   wait for tile kt; bar.sync (all copies landed, stage kt-1 is free);
              copy tile kt+S-1 into stage (kt-1) % S; commit;
              ldmatrix + mma.sync over stage kt % S, 16 of K at a time

A stage is [A tile | B tile], each stored as the operand is (K-major: a row per M or
N index; MN-major: a row per K index) in rows of whole 64-byte units, with the 16-byte
chunk index XORed with the row (mod 8) inside each 128-byte line: the 8 row addresses
of one ldmatrix matrix, and a warp's 32 cp.async chunks, then fall in distinct banks.
The epilogue runs on the accumulators in registers and stores pairs of adjacent
output elements straight to global memory, predicated on the output's bounds.
"""
from __future__ import annotations

from llvmlite import ir

from ..nvptx import ops as L
from ..nvptx import ptx_mma as P
from ..artifact import CompiledKernel, KernelArg
from ..nvptx.kernel import KernelEmitter, loop, plain_args, tile_coordinates
from .copy import TileCopy, strides
from .epilogue import EpilogueEmitter
from .plan import GemmProgram
from .tiles import MMA_K, warp_grid
from ..nvptx.ptx_memory import asm_store
from ..nvptx.swizzle import swizzled


# Register copies (rows of 2-byte pitch) share the threads with the accumulators: few
# loads at a time, or ptxas spills.
REGISTER_PIECES = 16


def kernel_args(g: GemmProgram) -> tuple[KernelArg, ...]:
    return tuple(plain_args(g))


def gemm_ptx(llvm_ir: str, g: GemmProgram, entry: str) -> str:
    """PTX with the block size declared, so ptxas may give each thread up to 255 registers
    (the accumulators stay in registers)."""
    from ..nvptx.ptx_text import launch_bounds, llvm_to_ptx
    return launch_bounds(llvm_to_ptx(llvm_ir, g.target), entry, g.threads, 1)


def gemm_kernel(g: GemmProgram, entry: str) -> CompiledKernel:
    ptx = gemm_ptx(emit_gemm_llvm_ir(g, entry), g, entry)
    return CompiledKernel(g.name, entry, g.target, ptx, kernel_args(g), g.threads, g.grid,
                          g.shared_bytes, g.shared_bytes)


def emit_gemm_llvm_ir(g: GemmProgram, entry: str) -> str:
    return str(_Emitter(g, entry).module)


class _Operand:
    """Where one operand's tile lies in a stage and how each thread copies it."""

    def __init__(self, g: GemmProgram, which: str):
        self.op = g.a if which == "a" else g.b
        self.rows_axis = g.m if which == "a" else g.n
        self.tile_rows = g.tile_m if which == "a" else g.tile_n
        es = self.op.dtype.itemsize
        self.offset = 0 if which == "a" else g.tile_m * g.tile_k * es   # within a stage
        # Shared-memory rows: one per M/N index (K-major) or per K index (MN-major).
        self.row_bytes = (g.tile_k if self.op.k_major else self.tile_rows) * es
        self.chunks = self.tile_rows * g.tile_k * es // 16
        self.trans = not self.op.k_major      # ldmatrix.trans turns MN-major into fragments


class _Emitter(KernelEmitter):
    def __init__(self, g: GemmProgram, entry: str):
        super().__init__(g, entry, (), 128)    # the swizzle assumes 128-byte lines
        self.ops = {"a": _Operand(g, "a"), "b": _Operand(g, "b")}
        self.warps_m, self.warps_n = warp_grid(g.tile_m, g.tile_n, g.consumers)
        self.warp_m, self.warp_n = g.tile_m // self.warps_m, g.tile_n // self.warps_n
        self._body()

    # ---- indices and addresses ------------------------------------------------------
    def i64(self, v):
        return self.b.zext(v, L.I64)

    def strides(self, axes) -> dict:
        return strides(self, axes)

    def swizzled(self, row, chunk, row_bytes: int):
        return swizzled(self.b, row, chunk, row_bytes)

    # ---- the kernel ---------------------------------------------------------------
    def _body(self) -> None:
        g, b = self.g, self.b
        self.base = b.trunc(b.ptrtoint(self.smem, L.I64), L.I32)
        tid = self.sreg("tid.x")
        self.tid, self.lane = tid, b.and_(tid, L.i32(31))
        warp = b.lshr(tid, L.i32(5))
        self.wm, self.wn = b.udiv(warp, L.i32(self.warps_n)), b.urem(warp, L.i32(self.warps_n))
        self.m0, self.n0, self.batch_index = tile_coordinates(self)
        k_tiles = b.sdiv(b.add(self.size(g.k), L.i32(g.tile_k - 1)), L.i32(g.tile_k))
        copies = [self._copies(w) for w in ("a", "b")]
        frags = {w: self._fragment_offsets(w) for w in ("a", "b")}
        for s in range(g.stages - 1):
            with b.if_then(b.icmp_signed("<", L.i32(s), k_tiles)):
                self._issue(copies, L.i32(s), L.i32(s))
            P.cp_async_commit(b)
        acc0 = [L.f32(0.0)] * (self.warp_m * self.warp_n // 32)

        def step(kt, carried):
            stage, acc = carried[0], carried[1:]
            P.cp_async_wait(b, g.stages - 2)     # this thread's copies of tile kt landed
            P.barrier(b)                         # everyone's did, and all are done with
                                                 # stage (kt-1) % S, which is refilled now
            free = b.select(b.icmp_unsigned("==", stage, L.i32(0)), L.i32(g.stages - 1),
                            b.sub(stage, L.i32(1)))
            ahead = b.add(kt, L.i32(g.stages - 1))
            with b.if_then(b.icmp_signed("<", ahead, k_tiles)):
                self._issue(copies, ahead, free)
            P.cp_async_commit(b)
            acc = self._multiply(b.add(self.base, b.mul(stage, L.i32(g.stage_bytes))), frags,
                                 acc)
            wrap = b.icmp_unsigned("==", stage, L.i32(g.stages - 1))
            return [b.select(wrap, L.i32(0), b.add(stage, L.i32(1)))] + acc
        final = loop(b, self.fn, k_tiles, [L.i32(0)] + acc0, step)
        P.cp_async_wait(b, 0)                    # only empty groups are left; leave none
        self._epilogue(final[1:])
        b.ret_void()

    # ---- global -> shared ---------------------------------------------------------
    def _copies(self, which: str) -> TileCopy:
        """This thread's chunks of operand `which` (gemm.copy), at the width its rows allow."""
        g, o = self.g, self.ops[which]
        width = g.a_access if which == "a" else g.b_access
        return TileCopy(self, o.op, o.rows_axis, self.m0 if which == "a" else self.n0,
                        o.tile_rows, o.row_bytes, self.tid, g.threads, width,
                        lambda row, chunk: self.b.add(self.swizzled(row, chunk, o.row_bytes),
                                                      L.i32(o.offset)),
                        in_flight=REGISTER_PIECES)

    def _issue(self, copies, kt, stage) -> None:
        """Copy every chunk of K tile `kt` into `stage`."""
        g, b = self.g, self.b
        k0 = b.mul(kt, L.i32(g.tile_k))
        stage_base = b.add(self.base, b.mul(stage, L.i32(g.stage_bytes)))
        for copy in copies:
            copy.issue(k0, stage_base)

    # ---- shared -> fragments -> mma ---------------------------------------------------
    def _fragment_offsets(self, which: str) -> dict:
        """{(i, kk): (lane part, constant)}: the byte offset in a stage of this lane's
        ldmatrix.x4 row address for 16-row (A) or 16-column (B) block i of the warp, K step
        kk. The constant is kept apart so that it ends up as the address immediate.

        The four 8x8 matrices (lanes 8j..8j+7 address matrix j) are, for A, the mma
        registers a0..a3 = (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15,
        k 8-15); for B, b0 and b1 of n 0-7, then b0 and b1 of n 8-15, where b0 is k 0-7.
        Rows 8 apart differ by whole 128-byte lines, which the XOR leaves alone, so rows
        that are multiples of 8 are added after the swizzle."""
        g, b, o = self.g, self.b, self.ops[which]
        j = b.lshr(self.lane, L.i32(3))                  # the matrix this lane addresses
        r8 = b.and_(self.lane, L.i32(7))
        lo, hi = b.and_(j, L.i32(1)), b.lshr(j, L.i32(1))
        mn_blk, k_blk = (lo, hi) if which == "a" else (hi, lo)   # matrix j's 8-blocks
        warp0 = b.mul(self.wm if which == "a" else self.wn,
                      L.i32(self.warp_m if which == "a" else self.warp_n))
        blocks = (self.warp_m if which == "a" else self.warp_n) // 16
        steps = g.tile_k // MMA_K
        out = {}
        if o.op.k_major:        # rows are M/N indices, chunks are 8 of K
            lane_row = b.add(r8, b.shl(mn_blk, L.i32(3)))
            rows = b.mul(warp0, L.i32(o.row_bytes))
            for kk in range(steps):
                off = b.add(self.swizzled(lane_row, b.add(k_blk, L.i32(2 * kk)),
                                          o.row_bytes), rows)
                for i in range(blocks):
                    out[i, kk] = (off, 16 * i * o.row_bytes + o.offset)
        else:                   # rows are K indices, chunks are 8 of M/N
            lane_row = b.add(r8, b.shl(k_blk, L.i32(3)))
            first = b.add(b.lshr(warp0, L.i32(3)), mn_blk)
            for i in range(blocks):
                off = self.swizzled(lane_row, b.add(first, L.i32(2 * i)), o.row_bytes)
                for kk in range(steps):
                    out[i, kk] = (off, MMA_K * kk * o.row_bytes + o.offset)
        return out

    def _multiply(self, stage_base, frags, acc) -> list:
        g, b = self.g, self.b
        kind = P.MMA_TYPES[g.a.dtype.short]
        ms, ns = self.warp_m // 16, self.warp_n // 8
        acc = list(acc)
        def load(which, i, kk):
            lane_part, const = frags[which][i, kk]   # constant last: an address immediate
            addr = b.add(b.add(stage_base, lane_part), L.i32(const))
            return P.ldmatrix_x4(b, addr, self.ops[which].trans)
        for kk in range(g.tile_k // MMA_K):
            a = [load("a", i, kk) for i in range(ms)]
            bb = [load("b", i, kk) for i in range(ns // 2)]
            for i in range(ms):
                for jn in range(ns):
                    regs = bb[jn // 2][2 * (jn % 2):2 * (jn % 2) + 2]
                    at = 4 * (i * ns + jn)
                    acc[at:at + 4] = P.mma_16816(b, acc[at:at + 4], a[i], regs, kind)
        return acc

    # ---- epilogue -----------------------------------------------------------------
    def _epilogue(self, acc) -> None:
        """Accumulator (i, jn, c) of lane l is output row 16i + l/4 + 8(c/2), column
        8jn + 2(l%4) + c%2 of the warp's sub-tile; c = 0, 1 (and 2, 3) are adjacent
        columns, stored together."""
        g, b = self.g, self.b
        lane = self.lane
        row = b.add(self.m0, b.add(b.mul(self.wm, L.i32(self.warp_m)), b.lshr(lane, L.i32(2))))
        col = b.add(self.n0, b.add(b.mul(self.wn, L.i32(self.warp_n)),
                                   b.shl(b.and_(lane, L.i32(3)), L.i32(1))))
        index = {g.m: row, g.n: col, **self.batch_index}
        epi = EpilogueEmitter(self, index, (g.m, g.n))
        strides = self.strides(g.out.axes)
        start = ir.Constant(L.I64, 0)
        for axis in g.out.axes:
            start = b.add(start, b.mul(self.i64(index[axis]), strides[axis]))
        base = self.args[("buffer", g.out.name)]
        es = g.out.dtype.itemsize
        ns = self.warp_n // 8
        # Adjacent columns go out as one store where the output's rows keep pairs aligned.
        pieces = [slice(0, 2)] if g.out_access >= 2 * es else [slice(0, 1), slice(1, 2)]
        for i in range(self.warp_m // 16):
            for half in (0, 1):
                dm = 16 * i + 8 * half
                row_in = b.icmp_signed("<", b.add(row, L.i32(dm)), self.size(g.m))
                row_at = b.add(start, b.mul(ir.Constant(L.I64, dm), strides[g.m]))
                for jn in range(ns):
                    at = 4 * (i * ns + jn) + 2 * half
                    bits = [epi.value(acc[at + e], {g.m: dm, g.n: 8 * jn + e}) for e in (0, 1)]
                    for e, piece in enumerate(pieces):   # a pair, or one by one
                        c = 8 * jn + e
                        inside = b.and_(row_in, b.icmp_signed("<", b.add(col, L.i32(c)),
                                                              self.size(g.n)))
                        offset = b.add(row_at, ir.Constant(L.I64, c))
                        ptr = b.gep(base, [b.mul(offset, ir.Constant(L.I64, es))])
                        asm_store(b, b.ptrtoint(ptr, L.I64), inside, bits[piece], g.out.dtype)
