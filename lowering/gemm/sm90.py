"""Stage 5 for contractions on sm_90a: a GemmProgram as a warp-specialized wgmma kernel.

One block computes a tile_m x tile_n output tile. Warpgroup 0 is the producer: one
thread walks the K tiles, and for each waits until its shared-memory stage is free,
then has the tensor memory accelerator copy the A and B tiles into it (128-byte
swizzled), completing on the stage's `full` mbarrier. Warpgroups 1..C consume: each
waits for a stage, issues wgmma over it for its 64 rows, and releases the stage on
its `empty` mbarrier. After the loop the consumers run the epilogue on their
accumulators, write the output tile to shared memory (swizzled as the output's
tensor map reads it) and one thread stores it with the TMA, which clips at the
edges. Out-of-range input elements arrive as zeros.

    shared memory: [stage 0: A | B] ... [stage S-1: A | B] [full x S] [empty x S]
"""
from __future__ import annotations

from llvmlite import ir

from ..nvptx import ops as L
from ..nvptx import ptx_async as P
from ..artifact import CompiledKernel, KernelArg
from ..nvptx import ptx_mma as MMA
from ..nvptx.kernel import KernelEmitter, loop, plain_args, tile_coordinates
from .copy import TileCopy, strides
from ..nvptx.ptx_memory import asm_store
from ..nvptx.swizzle import paneled
from .epilogue import EpilogueEmitter
from .plan import WGMMA_TYPES, GemmProgram
from .tiles import SWIZZLE_BYTES

PRODUCER_REGS = 40           # one thread issuing TMA copies
COPY_PRODUCER_REGS = 96      # 128 threads computing the addresses of their chunks
COPY_IN_FLIGHT = 32          # register loads each holds at once: 64 spill at 1000x3001x777


def operand_box(g: GemmProgram, which: str) -> tuple[tuple[str, int], ...]:
    """(axis, box extent) per axis of an operand's storage, as its tensor map copies it."""
    op = g.a if which == "a" else g.b
    rows_axis, rows = (g.m, g.tile_m) if which == "a" else (g.n, g.tile_n)
    swizzle_elems = SWIZZLE_BYTES // op.dtype.itemsize
    box = {g.k: g.tile_k, rows_axis: rows if op.k_major else swizzle_elems}
    return tuple((a, box.get(a, 1)) for a in op.buffer.axes)


def out_box(g: GemmProgram) -> tuple[tuple[str, int], ...]:
    box = {g.n: SWIZZLE_BYTES // g.out.dtype.itemsize, g.m: g.tile_m}
    return tuple((a, box.get(a, 1)) for a in g.out.axes)


def tma_roles(g: GemmProgram) -> tuple[str, ...]:
    """Which of 'a', 'b', 'out' the TMA moves (the rest, threads: gemm.copy)."""
    return tuple(w for w in ("a", "b", "out") if g.uses_tma(w))


def kernel_args(g: GemmProgram) -> tuple[KernelArg, ...]:
    maps = {"a": (g.a.buffer.name, g.a.dtype, operand_box(g, "a")),
            "b": (g.b.buffer.name, g.b.dtype, operand_box(g, "b")),
            "out": (g.out.name, g.out.dtype, out_box(g))}
    return tuple(KernelArg(name, "tensormap", dt, box)
                 for name, dt, box in (maps[w] for w in tma_roles(g))) + tuple(plain_args(g))


def gemm_ptx(llvm_ir: str, g: GemmProgram, entry: str) -> str:
    """PTX with the block size and one block per SM declared: ptxas then caps registers
    at entry, which `setmaxnreg` needs to move registers between the warpgroups."""
    from ..nvptx.ptx_text import launch_bounds, llvm_to_ptx
    return launch_bounds(llvm_to_ptx(llvm_ir, g.target), entry, g.threads, 1)


def gemm_kernel(g: GemmProgram, entry: str) -> CompiledKernel:
    ptx = gemm_ptx(emit_gemm_llvm_ir(g, entry), g, entry)
    return CompiledKernel(g.name, entry, g.target, ptx, kernel_args(g), g.threads, g.grid,
                          g.shared_bytes, g.shared_bytes, g.persistent)


def emit_gemm_llvm_ir(g: GemmProgram, entry: str) -> str:
    return str(_GemmEmitter(g, entry).module)


class _GemmEmitter(KernelEmitter):
    def __init__(self, g: GemmProgram, entry: str):
        super().__init__(g, entry, tma_roles(g), 1024)
        self.tma_in = [w for w in ("a", "b") if g.uses_tma(w)]
        self.copied = [w for w in ("a", "b") if not g.uses_tma(w)]
        self._body()

    def tmap(self, name):
        return self.b.ptrtoint(self.args[("tensormap", name)], L.I64)

    def _body(self) -> None:
        g, b = self.g, self.b
        raw = b.trunc(b.ptrtoint(self.smem, L.I64), L.I32)
        self.base = b.and_(b.add(raw, L.i32(1023)), L.i32(-1024))
        stages = g.stages * g.stage_bytes
        # A persistent block stages its output tile apart: the producer is already
        # loading the next tile while the consumers write this one out.
        self.out_smem = b.add(self.base, L.i32(stages if g.persistent else 0))
        bars = b.add(self.base, L.i32(g.shared_bytes - 1024 - 16 * g.stages))
        self.full = [b.add(bars, L.i32(8 * s)) for s in range(g.stages)]
        self.empty = [b.add(bars, L.i32(8 * (g.stages + s))) for s in range(g.stages)]
        tid = self.sreg("tid.x")
        k_tiles = b.sdiv(b.add(self.size(g.k), L.i32(g.tile_k - 1)), L.i32(g.tile_k))
        with b.if_then(b.icmp_unsigned("==", tid, L.i32(0))):
            # A full stage: the TMA thread's arrival with its bytes, and one arrival per
            # producer thread once its own copies have landed.
            arrivals = (1 if self.tma_in else 0) + (128 if self.copied else 0)
            for s in range(g.stages):
                P.mbarrier_init(b, self.full[s], arrivals)
                P.mbarrier_init(b, self.empty[s], g.consumers)
            for name in tma_roles(g):
                P.prefetch_tensormap(b, self.tmap(name))
            P.fence_barrier_init(b)
        self.intr.call(b, "llvm.nvvm.barrier0", ir.VoidType(), [])
        warpgroup = b.lshr(tid, L.i32(7))
        with b.if_else(b.icmp_unsigned("==", warpgroup, L.i32(0))) as (producer, consumer):
            with producer:
                if g.consumers > 1:
                    P.setmaxnreg(b, self._producer_regs(), False)
                if self.copied:                      # every producer thread copies
                    self._produce(k_tiles, tid)
                else:                                # one thread drives the TMA
                    with b.if_then(b.icmp_unsigned("==", tid, L.i32(0))):
                        self._produce(k_tiles, tid)
            with consumer:
                if g.consumers > 1:
                    P.setmaxnreg(b, self._consumer_regs(), True)
                self._consume(k_tiles, b.sub(warpgroup, L.i32(1)), b.and_(tid, L.i32(127)))
        b.ret_void()

    def _for_each_tile(self, carried: list, body) -> list:
        """Tiles ctaid.x, ctaid.x + nctaid.x, ...: each sets m0, n0 and batch_index, then
        runs body(carried) -> carried."""
        g, b = self.g, self.b
        total = b.mul(b.sdiv(b.add(self.size(g.m), L.i32(g.tile_m - 1)), L.i32(g.tile_m)),
                      b.sdiv(b.add(self.size(g.n), L.i32(g.tile_n - 1)), L.i32(g.tile_n)))
        for axis in g.outer_axes:
            total = b.mul(total, self.size(axis))
        first, step = self.sreg("ctaid.x"), self.sreg("nctaid.x")
        count = b.udiv(b.add(b.sub(total, first), b.sub(step, L.i32(1))), step)
        count = b.select(b.icmp_signed(">", total, first), count, L.i32(0))

        def one(i, state):
            pid = b.add(first, b.mul(i, step))
            self.m0, self.n0, self.batch_index = tile_coordinates(self, pid)
            return body(state)
        return loop(b, self.fn, count, carried, one)

    def _producer_regs(self) -> int:
        return COPY_PRODUCER_REGS if self.copied else PRODUCER_REGS

    def _consumer_regs(self) -> int:
        """What the consumers grow to on the registers the producer gives back: a block
        starts with the launch's per-thread share (65536 / threads, in 8s), and
        setmaxnreg.inc waits forever for registers no warpgroup released."""
        threads = self.g.threads
        start = min(255, 65536 // threads) // 8 * 8
        spare = threads * start - 128 * self._producer_regs()
        return min(256, spare // (128 * self.g.consumers) // 8 * 8)

    def _k_range(self, k_tiles):
        """(first K tile, K tiles) of the current tile: all of K, or its split-K range."""
        g, b = self.g, self.b
        if not g.split:
            return L.i32(0), k_tiles
        per = L.i32(g.split_chunk // g.tile_k)
        first = b.mul(self.batch_index[g.split], per)
        left = b.sub(k_tiles, first)
        return first, b.select(b.icmp_signed("<", left, per), left, per)

    def _coords(self, axes_box, at: dict) -> list:
        """Tensor-map coordinates (innermost first) of a box whose corner is `at`."""
        return [at[a] if a in at else self.batch_index.get(a, L.i32(0))
                for a, _ in reversed(axes_box)]

    # ---- producer ------------------------------------------------------------------
    def _produce(self, k_tiles, tid) -> None:
        g, b = self.g, self.b
        a_bytes = g.tile_m * g.tile_k * g.a.dtype.itemsize
        offsets = {"a": 0, "b": a_bytes}
        tma_bytes = sum(getattr(g, f"tile_{'m' if w == 'a' else 'n'}") * g.tile_k
                        * g.a.dtype.itemsize for w in self.tma_in)
        registers = any(getattr(g, f"{w}_access") < 4 for w in self.copied)

        def step(kt, carried):
            stage, phase, issued = carried
            k0 = b.mul(b.add(self.k_first, kt), L.i32(g.tile_k))
            full = b.add(self.full[0], b.mul(stage, L.i32(8)))
            with b.if_then(b.icmp_signed(">=", issued, L.i32(g.stages))):
                # the consumers' release of this stage's previous use
                P.mbarrier_wait(b, b.add(self.empty[0], b.mul(stage, L.i32(8))),
                                b.xor(phase, L.i32(1)))
            dst = b.add(self.base, b.mul(stage, L.i32(g.stage_bytes)))
            if self.tma_in:
                with b.if_then(b.icmp_unsigned("==", tid, L.i32(0))):
                    P.mbarrier_expect_tx(b, full, tma_bytes)
                    for w in self.tma_in:
                        self._load_operand(w, b.add(dst, L.i32(offsets[w])), k0,
                                           self.m0 if w == "a" else self.n0,
                                           g.tile_m if w == "a" else g.tile_n, full)
            for w in self.copied:
                self._copy(w, tid).issue(k0, b.add(dst, L.i32(offsets[w])))
            if self.copied and registers:     # stores done; cp.async ones too, then say so
                MMA.cp_async_commit(b)        # wait_group waits on committed groups only
                MMA.cp_async_wait(b, 0)
                P.mbarrier_arrive_if(b, full, L.i32(1))
            elif self.copied:                 # the barrier hears when the copies land
                P.mbarrier_arrive_on_copies(b, full)
            return self._advance(stage, phase) + [b.add(issued, L.i32(1))]
        def tile(state):
            self.k_first, count = self._k_range(k_tiles)
            return loop(b, self.fn, count, state, step)
        self._for_each_tile([L.i32(0)] * 3, tile)

    def _advance(self, stage, phase):
        b = self.b
        wrap = b.icmp_unsigned("==", stage, L.i32(self.g.stages - 1))
        return [b.select(wrap, L.i32(0), b.add(stage, L.i32(1))),
                b.select(wrap, b.xor(phase, L.i32(1)), phase)]

    def _copy(self, which: str, tid) -> TileCopy:
        """This producer thread's chunks of an operand the TMA cannot address, laid out in
        the stage exactly as the TMA's 128-byte swizzle would put them."""
        g, b = self.g, self.b
        op = g.a if which == "a" else g.b
        rows_axis, row0, rows = (g.m, self.m0, g.tile_m) if which == "a" else \
            (g.n, self.n0, g.tile_n)
        def dst(row, chunk):                           # MN-major: 64-wide column boxes
            return paneled(b, row, chunk, g.tile_k * SWIZZLE_BYTES)
        row_bytes = SWIZZLE_BYTES if op.k_major else rows * op.dtype.itemsize
        return TileCopy(self, op, rows_axis, row0, rows, row_bytes, tid, 128,
                        getattr(g, f"{which}_access"), dst, COPY_IN_FLIGHT)

    def _load_operand(self, which, dst, k0, row0, rows, bar) -> None:
        g, b = self.g, self.b
        op = g.a if which == "a" else g.b
        rows_axis = g.m if which == "a" else g.n
        box = operand_box(g, which)
        if op.k_major:
            P.tma_load(b, dst, self.tmap(which), self._coords(box, {g.k: k0, rows_axis: row0}),
                       bar)
            return
        chunk = SWIZZLE_BYTES // op.dtype.itemsize      # MN-major: 64-wide column boxes
        for i in range(rows // chunk):
            at = {g.k: k0, rows_axis: b.add(row0, L.i32(i * chunk))}
            P.tma_load(b, b.add(dst, L.i32(i * g.tile_k * SWIZZLE_BYTES)), self.tmap(which),
                       self._coords(box, at), bar)

    # ---- consumers -----------------------------------------------------------------
    def _descriptors(self, stage_base, consumer, kk):
        """wgmma descriptors of step kk (k elements kk*K_STEP..) of this consumer's A rows
        and the block's B columns, in stage memory at `stage_base`."""
        g, b = self.g, self.b
        es = g.a.dtype.itemsize
        k_step = 32 // es
        a_base = b.add(stage_base, b.mul(consumer, L.i32(64 * g.tile_k * es)))
        b_base = b.add(stage_base, L.i32(g.tile_m * g.tile_k * es))
        descs = []
        for base, op in ((a_base, g.a), (b_base, g.b)):
            if op.k_major:    # rows of 128 bytes, 8-row groups 1024 apart; k moves in a row
                addr = b.add(base, L.i32(kk * k_step * es))
                descs.append(P.smem_descriptor(b, addr, 16, 1024))
            else:             # 64-wide column boxes of tile_k rows; k moves down the rows
                addr = b.add(base, L.i32(kk * k_step * SWIZZLE_BYTES))
                descs.append(P.smem_descriptor(b, addr, g.tile_k * SWIZZLE_BYTES, 1024))
        return descs

    def _consume(self, k_tiles, consumer, thread) -> None:
        g, b = self.g, self.b
        es = g.a.dtype.itemsize
        kind_a, kind_b = WGMMA_TYPES[g.a.dtype], WGMMA_TYPES[g.b.dtype]
        k_step = 32 // es
        first_thread = b.zext(b.icmp_unsigned("==", thread, L.i32(0)), L.I32)
        acc0 = [L.f32(0.0)] * (g.tile_n // 2)

        def empty_of(stage):
            return b.add(self.empty[0], b.mul(stage, L.i32(8)))

        def step(kt, carried):
            stage, phase, acc = carried[0], carried[1], carried[2:]
            stage_base = b.add(self.base, b.mul(stage, L.i32(g.stage_bytes)))
            full = b.add(self.full[0], b.mul(stage, L.i32(8)))
            P.mbarrier_wait(b, full, phase)
            if self.copied:         # threads' copies, seen by wgmma's (async) proxy
                P.fence_async_shared(b)
            P.wgmma_fence(b)
            for kk in range(g.tile_k // k_step):
                da, db = self._descriptors(stage_base, consumer, kk)
                acc = P.wgmma(b, acc, da, db, g.tile_n, k_step, kind_a, kind_b,
                              not g.a.k_major, not g.b.k_major)
            P.wgmma_commit(b)
            # Keep this step's MMAs in flight while waiting for the previous step's, then
            # hand the previous step's stage back to the producer.
            acc = P.wgmma_wait(b, acc, 1)
            release = b.and_(first_thread, b.zext(b.icmp_signed(">", kt, L.i32(0)), L.I32))
            P.mbarrier_arrive_if(b, empty_of(self._previous(stage)), release)
            return self._advance(stage, phase) + acc

        def tile(state):
            _, count = self._k_range(k_tiles)
            final = loop(b, self.fn, count, state + acc0, step)
            acc = P.wgmma_wait(b, final[2:], 0)
            # the tile's last stage, in flight until now
            last = b.and_(first_thread, b.zext(b.icmp_signed(">", count, L.i32(0)), L.I32))
            P.mbarrier_arrive_if(b, empty_of(self._previous(final[0])), last)
            self._epilogue(acc, consumer, thread)
            return final[:2]
        self._for_each_tile([L.i32(0), L.i32(0)], tile)
        if g.uses_tma("out"):
            with b.if_then(b.icmp_unsigned("==", b.add(b.mul(consumer, L.i32(128)), thread),
                                           L.i32(0))):
                P.tma_store_wait(b)

    def _previous(self, stage):
        b = self.b
        return b.select(b.icmp_unsigned("==", stage, L.i32(0)), L.i32(self.g.stages - 1),
                        b.sub(stage, L.i32(1)))

    # ---- epilogue ------------------------------------------------------------------
    def _epilogue(self, acc, consumer, thread) -> None:
        """Epilogue ops per accumulator, the output tile to shared memory, one TMA store."""
        g, b = self.g, self.b
        if not g.uses_tma("out"):
            self._store_direct(acc, consumer, thread)
            return
        consumers = 128 * g.consumers
        issuer = b.icmp_unsigned("==", b.add(b.mul(consumer, L.i32(128)), thread), L.i32(0))
        with b.if_then(issuer):               # the last tile's store has read its smem
            P.tma_store_wait(b)
        P.named_barrier(b, 1, consumers)      # ... and every consumer is done with the stages
        warp, lane = b.lshr(thread, L.i32(5)), b.and_(thread, L.i32(31))
        row = b.add(b.mul(consumer, L.i32(64)), b.add(b.mul(warp, L.i32(16)),
                                                     b.lshr(lane, L.i32(2))))
        col = b.mul(b.and_(lane, L.i32(3)), L.i32(2))
        index = {g.m: b.add(self.m0, row), g.n: b.add(self.n0, col), **self.batch_index}
        epi = EpilogueEmitter(self, index, (g.m, g.n))
        out_es = g.out.dtype.itemsize
        chunk = SWIZZLE_BYTES // out_es            # output columns per swizzled box
        for j in range(g.tile_n // 8):
            for half in (0, 1):                    # rows +0 and +8 of this thread
                r = b.add(row, L.i32(8 * half))
                bits = [epi.value(acc[4 * j + 2 * half + e], {g.m: 8 * half, g.n: 8 * j + e})
                        for e in (0, 1)]
                c = 8 * j                          # + col, a multiple of 2
                box_base = (c // chunk) * g.tile_m * SWIZZLE_BYTES
                byte = b.add(b.mul(col, L.i32(out_es)), L.i32((c % chunk) * out_es))
                swz = b.xor(b.lshr(byte, L.i32(4)), b.and_(r, L.i32(7)))
                addr = b.add(b.add(self.out_smem, L.i32(box_base)),
                             b.add(b.mul(r, L.i32(SWIZZLE_BYTES)),
                                   b.or_(b.shl(swz, L.i32(4)), b.and_(byte, L.i32(15)))))
                self._store_pair(addr, bits, out_es)
        P.fence_async_shared(b)
        P.named_barrier(b, 1, consumers)
        with b.if_then(issuer):
            box = out_box(g)
            for q in range(g.tile_n // chunk):
                at = {g.m: self.m0, g.n: b.add(self.n0, L.i32(q * chunk))}
                P.tma_store(b, self.tmap("out"), self._coords(box, at),
                            b.add(self.out_smem, L.i32(q * g.tile_m * SWIZZLE_BYTES)))
            P.tma_store_commit(b)

    def _store_direct(self, acc, consumer, thread) -> None:
        """The epilogue stored from registers, element pairs (or single elements where the
        output's rows do not keep pairs aligned) predicated on the output's bounds."""
        g, b = self.g, self.b
        warp, lane = b.lshr(thread, L.i32(5)), b.and_(thread, L.i32(31))
        row = b.add(self.m0, b.add(b.mul(consumer, L.i32(64)),
                                   b.add(b.mul(warp, L.i32(16)), b.lshr(lane, L.i32(2)))))
        col = b.add(self.n0, b.mul(b.and_(lane, L.i32(3)), L.i32(2)))
        index = {g.m: row, g.n: col, **self.batch_index}
        epi = EpilogueEmitter(self, index, (g.m, g.n))
        st = strides(self, g.out.axes)
        start = ir.Constant(L.I64, 0)
        for axis in g.out.axes:
            start = b.add(start, b.mul(b.zext(index[axis], L.I64), st[axis]))
        base = self.args[("buffer", g.out.name)]
        es = g.out.dtype.itemsize
        pieces = [slice(0, 2)] if g.out_access >= 2 * es else [slice(0, 1), slice(1, 2)]
        for half in (0, 1):                        # rows +0 and +8 of this thread
            row_in = b.icmp_signed("<", b.add(row, L.i32(8 * half)), self.size(g.m))
            row_at = b.add(start, b.mul(ir.Constant(L.I64, 8 * half), st[g.m]))
            for j in range(g.tile_n // 8):
                bits = [epi.value(acc[4 * j + 2 * half + e], {g.m: 8 * half, g.n: 8 * j + e})
                        for e in (0, 1)]
                for e, piece in enumerate(pieces):
                    c = 8 * j + e
                    inside = b.and_(row_in, b.icmp_signed("<", b.add(col, L.i32(c)),
                                                          self.size(g.n)))
                    ptr = b.gep(base, [b.mul(b.add(row_at, ir.Constant(L.I64, c)),
                                             ir.Constant(L.I64, es))])
                    asm_store(b, b.ptrtoint(ptr, L.I64), inside, bits[piece], g.out.dtype)

    def _store_pair(self, addr, bits, es) -> None:
        b = self.b
        width = {1: L.I16, 2: L.I32, 4: L.I64}[es]
        lo = b.zext(bits[0], width)
        hi = b.shl(b.zext(bits[1], width), ir.Constant(width, 8 * es))
        ptr = b.inttoptr(b.zext(addr, L.I64), ir.PointerType(width, 3))
        b.store(b.or_(lo, hi), ptr)
