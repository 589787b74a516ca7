"""LLVM emission of a sort (ir/sort_steps.py says what `sort_block` computes): a mixin of
the backend's emitter beside `scan.ScanEmitter`. `cpu/sort.py` runs the same network.

Shared memory holds the network: `width` keys (f32 or i32 words) from the op's slot, then
`width` int32 indices. The stages and passes are two nested loops in the kernel (k and j
are loop values, so the code does not grow with the row); in each pass a thread takes
pairs p = tid, tid + threads, ... of the width / 2, whose lower position is p with a zero
bit inserted at j: lo = ((p & ~(j - 1)) << 1) | (p & (j - 1)), hi = lo | j.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from plait.dsl.dtypes import DType

from plait.dsl.sort import GIVEN_SENTINEL

from . import ops as L
from .fragments import mask_and
from .ptx_memory import asm_store


class SortEmitter:
    def _sort_op(self, op, args):
        if op.op == "sort_part":
            return args[0][op.attr("index")]
        return self._sort_block(op, *args)

    def _store_along(self, op, value) -> None:
        """A topk's store (cpu/sort.py store_along is its spec): the element at position
        p < size(into) along `axis` goes to [.., into = p], one element at a time."""
        b = self.b
        axis, into = op.attr("along")
        buf = self.prog.buffer(op.attr("buffer"))
        axes = tuple(axis if a == into else a for a in buf.axes)
        shape = self.frag_shape(axes)
        value = np.broadcast_to(value, shape)
        owner = self.owner(axes)
        for r, c, v in np.ndindex(shape):
            pos = self.index(axis, r, c, v)
            kept = b.icmp_unsigned("<", pos, self.size(into))
            mask = mask_and(b, [self.in_bounds(axes, r, c, v), kept, owner])
            bits = [L.encode(b, self.intr, value[r, c, v], buf.dtype)]
            asm_store(b, self.address(buf, r, c, v, 0, {into: pos}), mask, bits, buf.dtype)

    def _sort_precedes(self, a: tuple, c: tuple, size, descending: bool):
        """Whether pair a = (key, index) goes before pair c (ir/sort_steps.py's order)."""
        b = self.b
        (ka, ia), (kc, ic) = a, c
        sa = b.icmp_signed(">=", ia, size)
        sc = b.icmp_signed(">=", ic, size)
        lower = b.icmp_signed("<", ia, ic)
        if ka.type == L.F32:
            na, nc = b.fcmp_unordered("uno", ka, ka), b.fcmp_unordered("uno", kc, kc)
            by_value = b.fcmp_ordered(">" if descending else "<", ka, kc)
            equal = b.fcmp_ordered("==", ka, kc)
        else:
            na = nc = ir.Constant(ir.IntType(1), 0)
            by_value = b.icmp_signed(">" if descending else "<", ka, kc)
            equal = b.icmp_signed("==", ka, kc)
        number = b.or_(by_value, b.and_(equal, lower))
        nan = b.select(b.and_(na, nc), lower, na if descending else nc)
        element = b.select(b.or_(na, nc), nan, number)
        sentinel = b.and_(sc, b.or_(b.not_(sa), lower))
        return b.select(b.or_(sa, sc), sentinel, element)

    def _sort_block(self, op, frag, given=None):
        """`given`: the elements' indices (a split topk's; sentinels from GIVEN_SENTINEL)."""
        b, axis, width = self.b, op.attr("axis"), op.attr("width")
        descending = bool(op.attr("descending"))
        shape = self.frag_shape(op.axes)
        frag = np.broadcast_to(frag, shape)
        given = None if given is None else np.broadcast_to(given, shape)
        dtype = op.dtype if op.dtype in (DType.FP32, DType.INT32) else DType.FP32
        keys = self._smem_base(dtype)
        first = op.attr("slot")
        index = b.gep(self._smem_base(DType.INT32), [L.i32(first + width)])
        keys = b.gep(keys, [L.i32(first)])
        size = self.size(axis)
        threads = self.lay.threads
        self._barrier()
        for t in range(-(-width // threads)):            # sentinels past the row's end
            q = b.add(self.tid, L.i32(t * threads))
            past = b.and_(b.icmp_signed("<", q, L.i32(width)), b.icmp_signed(">=", q, size))
            with b.if_then(past):
                b.store(ir.Constant(L.REGISTER[dtype], 0), b.gep(keys, [q]))
                b.store(q if given is None else b.add(q, L.i32(GIVEN_SENTINEL)),
                        b.gep(index, [q]))
        for idx in np.ndindex(shape):
            pos = self.index(axis, *idx)
            with b.if_then(self.in_bounds((axis,), *idx)):
                b.store(frag[idx], b.gep(keys, [pos]))
                b.store(pos if given is None else given[idx], b.gep(index, [pos]))
        self._barrier()
        if given is not None:           # sentinels go by GIVEN_SENTINEL, not the extent
            size = L.i32(GIVEN_SENTINEL)
        chunk = op.attr("chunk")
        self._sort_network(keys, index, size, width, descending, chunk)
        if chunk is not None:           # a topk's: the best `chunk` at the first positions
            self._keep_best(keys, index, size, width, chunk, descending)
        out = (np.empty(shape, dtype=object), np.empty(shape, dtype=object))
        for idx in np.ndindex(shape):
            pos = self.index(axis, *idx)
            out[0][idx] = b.load(b.gep(keys, [pos]))
            out[1][idx] = b.load(b.gep(index, [pos]))
        self._barrier()                 # the next user of shared memory waits for these
        return out

    def _sort_network(self, keys, index, size, width: int, descending: bool,
                      chunk: int | None = None) -> None:
        """for k in 2, 4, ..., width (or chunk): for j in k/2, ..., 1: compare-and-swap,
        barrier. With `chunk`, every run of chunk positions ends ascending."""
        b = self.b
        threads = self.lay.threads
        if (chunk or width) < 2:
            return
        fn = b.function
        start = b.block
        k_head = fn.append_basic_block("sort_k")
        j_head = fn.append_basic_block("sort_j")
        k_next = fn.append_basic_block("sort_k_next")
        done = fn.append_basic_block("sort_done")
        b.branch(k_head)
        b.position_at_end(k_head)
        k = b.phi(L.I32)
        k.add_incoming(L.i32(2), start)
        j_first = b.lshr(k, L.i32(1))
        b.branch(j_head)
        b.position_at_end(j_head)
        j = b.phi(L.I32)
        j.add_incoming(j_first, k_head)
        low = b.sub(j, L.i32(1))
        for t in range(-(-(width // 2) // threads)):
            p = b.add(self.tid, L.i32(t * threads))
            with b.if_then(b.icmp_signed("<", p, L.i32(width // 2))):
                lo = b.or_(b.shl(b.and_(p, b.not_(low)), L.i32(1)), b.and_(p, low))
                hi = b.or_(lo, j)
                a = (b.load(b.gep(keys, [lo])), b.load(b.gep(index, [lo])))
                c = (b.load(b.gep(keys, [hi])), b.load(b.gep(index, [hi])))
                run = b.and_(lo, k)
                if chunk is not None:           # the last stage (k = chunk) all ascending
                    run = b.and_(run, L.i32(chunk - 1))
                up = b.icmp_signed("==", run, L.i32(0))
                swap = b.select(up, self._sort_precedes(c, a, size, descending),
                                self._sort_precedes(a, c, size, descending))
                b.store(b.select(swap, c[0], a[0]), b.gep(keys, [lo]))
                b.store(b.select(swap, c[1], a[1]), b.gep(index, [lo]))
                b.store(b.select(swap, a[0], c[0]), b.gep(keys, [hi]))
                b.store(b.select(swap, a[1], c[1]), b.gep(index, [hi]))
        self._barrier()
        j_after = b.lshr(j, L.i32(1))
        j.add_incoming(j_after, b.block)
        b.cbranch(b.icmp_signed("!=", j_after, L.i32(0)), j_head, k_next)
        b.position_at_end(k_next)
        k_after = b.shl(k, L.i32(1))
        k.add_incoming(k_after, k_next)
        b.cbranch(b.icmp_signed("<=", k_after, L.i32(chunk or width)), k_head, done)
        b.position_at_end(done)

    def _keep_best(self, keys, index, size, width: int, chunk: int,
                   descending: bool) -> None:
        """The rounds of ir/sort_steps.py after the runs of `chunk` are sorted: span
        s = 2 chunk, ..., width (a loop value), `count` = width / s * chunk positions
        take the better of their pair, a barrier, then the passes that sort each run."""
        b = self.b
        threads = self.lay.threads
        fn = b.function
        start = b.block
        head = fn.append_basic_block("keep_round")
        done = fn.append_basic_block("keep_done")
        b.branch(head)
        b.position_at_end(head)
        span, count = b.phi(L.I32), b.phi(L.I32)
        span.add_incoming(L.i32(2 * chunk), start)
        count.add_incoming(L.i32(width // 2), start)
        shift = chunk.bit_length() - 1
        for t in range(-(-(width // 2) // threads)):
            p = b.add(self.tid, L.i32(t * threads))
            with b.if_then(b.icmp_signed("<", p, count)):
                i = b.and_(p, L.i32(chunk - 1))
                base = b.mul(b.lshr(p, L.i32(shift)), span)
                lo = b.add(base, i)
                hi = b.add(b.add(base, b.lshr(span, L.i32(1))), b.sub(L.i32(chunk - 1), i))
                a = (b.load(b.gep(keys, [lo])), b.load(b.gep(index, [lo])))
                c = (b.load(b.gep(keys, [hi])), b.load(b.gep(index, [hi])))
                with b.if_then(self._sort_precedes(c, a, size, descending)):
                    b.store(c[0], b.gep(keys, [lo]))
                    b.store(c[1], b.gep(index, [lo]))
        self._barrier()
        if chunk >= 2:
            self._merge_runs(keys, index, size, width, chunk, span, count, descending)
        span_after = b.shl(span, L.i32(1))
        span.add_incoming(span_after, b.block)
        count.add_incoming(b.lshr(count, L.i32(1)), b.block)
        b.cbranch(b.icmp_signed("<=", span_after, L.i32(width)), head, done)
        b.position_at_end(done)

    def _merge_runs(self, keys, index, size, width: int, chunk: int, span, count,
                    descending: bool) -> None:
        """for j in chunk/2, ..., 1: each pair (i, i ^ j) of the run at c span in order
        (count / 2 pairs), a barrier: a bitonic run of `chunk` ends sorted."""
        b = self.b
        threads = self.lay.threads
        fn = b.function
        start = b.block
        head = fn.append_basic_block("keep_j")
        done = fn.append_basic_block("keep_j_done")
        b.branch(head)
        b.position_at_end(head)
        j = b.phi(L.I32)
        j.add_incoming(L.i32(chunk // 2), start)
        low = b.sub(j, L.i32(1))
        shift = chunk.bit_length() - 2           # log2(chunk / 2): pairs per run
        for t in range(-(-(width // 4) // threads)):
            p = b.add(self.tid, L.i32(t * threads))
            with b.if_then(b.icmp_signed("<", p, b.lshr(count, L.i32(1)))):
                q = b.and_(p, L.i32(chunk // 2 - 1))
                at = b.or_(b.shl(b.and_(q, b.not_(low)), L.i32(1)), b.and_(q, low))
                lo = b.add(b.mul(b.lshr(p, L.i32(shift)), span), at)
                hi = b.or_(lo, j)
                a = (b.load(b.gep(keys, [lo])), b.load(b.gep(index, [lo])))
                c = (b.load(b.gep(keys, [hi])), b.load(b.gep(index, [hi])))
                swap = self._sort_precedes(c, a, size, descending)
                b.store(b.select(swap, c[0], a[0]), b.gep(keys, [lo]))
                b.store(b.select(swap, c[1], a[1]), b.gep(index, [lo]))
                b.store(b.select(swap, a[0], c[0]), b.gep(keys, [hi]))
                b.store(b.select(swap, a[1], c[1]), b.gep(index, [hi]))
        self._barrier()
        j_after = b.lshr(j, L.i32(1))
        j.add_incoming(j_after, b.block)
        b.cbranch(b.icmp_signed("!=", j_after, L.i32(0)), head, done)
        b.position_at_end(done)
