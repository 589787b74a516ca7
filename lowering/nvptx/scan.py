"""LLVM emission of scans (tileir/scan.py says what each step computes): a mixin of the
backend's emitter beside `reduce.ReductionEmitter`, whose shared-memory words and the
barrier it reuses. `cpu/scan.py` is the same program on the CPU, folding in this order.

Per repeat of the scanned axis (a chunk of threads x vector consecutive elements), in
scan order: the threads' totals are scanned over each warp's lanes by Kogge-Stone
(`shfl.sync.up`, or `.down` for a reverse scan, log2(lanes) rounds); the last lane of
each warp (the first, reversed) writes the warp's total to shared memory between two
barriers; every thread folds the totals of the warps before its own (its prefix) and of
all warps (the chunk's total, carried into the next repeat).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from plait.dsl.node import OPS

from ..cpu.scan import scan_identity
from . import ops as L
from ..tileir.scan import smem_words_of


class ScanEmitter:
    def _scan_op(self, op, args):
        if op.op == "scan_local":
            return self._scan_local(op, args[0])
        return self._rounded(op, self._scan_block(op, args[0]))

    def _scan_ident(self, op):
        value = scan_identity(op.attr("op"), op.dtype.numpy).item()
        return ir.Constant(L.REGISTER[op.dtype], value)

    def _scan_combine(self, op, x, y):
        return L.binary(self.b, self.intr, OPS[op.attr("op")].combine, x, y)

    def _scan_local(self, op, frag):
        b, axis = self.b, op.attr("axis")
        shape = self.frag_shape(op.axes)
        full = np.broadcast_to(frag, shape)
        ident = self._scan_ident(op)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(shape):
            value = L.convert(b, full[idx], op.dtype)      # as the CPU's astype
            out[idx] = b.select(self.in_bounds((axis,), *idx), value, ident)
        if self.lay.map_of(axis) is self.lay.col and shape[2] > 1:
            order = range(shape[2])
            order = list(reversed(order)) if op.attr("reverse") else list(order)
            for r, c in np.ndindex(shape[:2]):
                for prev, v in zip(order, order[1:]):
                    out[r, c, v] = self._scan_combine(op, out[r, c, prev], out[r, c, v])
        return out

    def _scan_shuffle(self, x, delta: int, up: bool):
        """The value of lane (lane - delta), or (lane + delta) when not `up`; out of the
        warp a lane reads its own (the caller masks it)."""
        b = self.b
        mode, clamp = ("up", 0) if up else ("down", 0x1F)

        def shfl(word):
            return self.intr.call(b, f"llvm.nvvm.shfl.sync.{mode}.i32", L.I32,
                                  [L.i32(-1), word, L.i32(delta), L.i32(clamp)])
        if x.type == L.F32:
            return b.bitcast(shfl(b.bitcast(x, L.I32)), L.F32)
        if x.type == L.I64:
            lo = shfl(b.trunc(x, L.I32))
            hi = shfl(b.trunc(b.lshr(x, ir.Constant(L.I64, 32)), L.I32))
            return b.or_(b.zext(lo, L.I64), b.shl(b.zext(hi, L.I64), ir.Constant(L.I64, 32)))
        if x.type == L.I1:
            return b.trunc(shfl(b.zext(x, L.I32)), L.I1)
        return shfl(x)

    def _scan_block(self, op, local):
        b, axis, rev = self.b, op.attr("axis"), bool(op.attr("reverse"))
        m = self.lay.map_of(axis)
        shape = self.frag_shape(op.axes)
        local = np.broadcast_to(local, shape)
        ident = self._scan_ident(op)
        lane_bits = len(op.attr("lanes"))
        lanes, warps = 1 << lane_bits, m.threads >> lane_bits
        lane = self.thread_index[axis]
        in_warp = b.and_(lane, L.i32(lanes - 1))
        warp = b.lshr(lane, L.i32(lane_bits))
        low = b.and_(self.tid, L.i32((1 << m.shift) - 1))
        high = b.lshr(self.tid, L.i32(m.shift + m.threads.bit_length() - 1))
        mine = b.or_(b.shl(b.lshr(self.tid, L.i32(m.shift + lane_bits)), L.i32(m.shift)), low)
        writer = b.icmp_unsigned("==", in_warp, L.i32(0 if rev else lanes - 1))
        per_thread = self.lay.threads // lanes
        smem = self._smem_base(op.dtype)
        first_word = op.attr("slot") // smem_words_of(op.dtype)
        row = m is self.lay.row
        reps = shape[0] if row else shape[1]
        out = np.empty(shape, dtype=object)
        carry: dict = {}
        for r in (reversed(range(reps)) if rev else range(reps)):
            # each group: the chunk's elements one thread holds at one other position
            if row:
                groups = [[(r, c, v)] for c, v in np.ndindex(shape[1:])]
            else:
                groups = [[(rr, r, v) for v in range(shape[2])] for rr in range(shape[0])]
            totals = [local[g[0] if rev else g[-1]] for g in groups]
            inclusive = []
            for t in totals:
                for d in op.attr("lanes"):
                    other = self._scan_shuffle(t, d << m.shift, not rev)
                    ok = b.icmp_unsigned("<", b.add(in_warp, L.i32(d)), L.i32(lanes)) if rev \
                        else b.icmp_unsigned(">=", in_warp, L.i32(d))
                    t = b.select(ok, self._scan_combine(op, other, t), t)
                inclusive.append(t)
            exclusive = []
            for t in inclusive:
                if not lane_bits:
                    exclusive.append(ident)
                    continue
                other = self._scan_shuffle(t, 1 << m.shift, not rev)
                ok = b.icmp_unsigned("<", b.add(in_warp, L.i32(1)), L.i32(lanes)) if rev \
                    else b.icmp_unsigned(">=", in_warp, L.i32(1))
                exclusive.append(b.select(ok, other, ident))
            self._barrier()
            with b.if_then(writer):
                for k, t in enumerate(inclusive):
                    word = b.add(L.i32(first_word + k * per_thread), mine)
                    b.store(self._to_word(t), b.gep(smem, [word]))
            self._barrier()
            for k, (g, excl) in enumerate(zip(groups, exclusive)):
                before, total = ident, None
                for u in range(warps):
                    src = b.or_(b.shl(b.or_(b.shl(high, L.i32(warps.bit_length() - 1)),
                                            L.i32(u)), L.i32(m.shift)), low)
                    word = b.add(L.i32(first_word + k * per_thread), src)
                    val = self._from_word(b.load(b.gep(smem, [word])), op.dtype)
                    total = val if total is None else self._scan_combine(op, total, val)
                    earlier = b.icmp_unsigned(">" if rev else "<", L.i32(u), warp)
                    before = b.select(earlier, self._scan_combine(op, before, val), before)
                prefix = self._scan_combine(op, before, excl)
                if k in carry:
                    prefix = self._scan_combine(op, carry[k], prefix)
                for pos in g:
                    out[pos] = self._scan_combine(op, prefix, local[pos])
                carry[k] = total if k not in carry else self._scan_combine(op, carry[k], total)
        return out

    def _barrier(self):
        self.b.call(self.intr.get("llvm.nvvm.barrier0", ir.VoidType(), []), [])
