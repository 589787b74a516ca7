"""LLVM emission of scans (ir/scan_steps.py says what each step computes): a mixin of the
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

from . import ops as L
from .scan_carry import scan_carry
from ..ir.thread_rules import smem_words


def _get(state: tuple, idx) -> tuple:
    """Element idx of a state held as one fragment (object array) per part."""
    return tuple(part[idx] for part in state)


def _put(state: tuple, idx, values: tuple) -> None:
    for part, value in zip(state, values):
        part[idx] = value


class ScanEmitter:
    def _scan_op(self, op, args):
        if op.op == "scan_local":
            return self._scan_local(op, args)
        if op.op == "scan_part":
            return self._rounded(op, args[0][op.attr("index")])   # a fragment per part
        if op.op == "scan_carry":
            return scan_carry(self, op)
        return self._scan_block(op, args[0], *args[1:])

    def _scan_parts(self, op):
        """(register dtypes, identities as LLVM constants) of the state's parts."""
        dtypes = op.attr("dtypes")
        return dtypes, tuple(ir.Constant(L.REGISTER[d], v) for d, v in
                             zip(dtypes, op.attr("init")))

    def _scan_combine(self, op, earlier: tuple, later: tuple) -> tuple:
        """The combine program on two states, in scan order (a reverse scan's result is
        x_t o ... o x_last: its later state goes on the left)."""
        b = self.b
        left, right = (later, earlier) if op.attr("reverse") else (earlier, later)
        values = {}
        for c in op.attr("combine"):
            args = [values[a] for a in c.args]
            if c.op == "scan_arg":
                values[c.id] = (left + right)[c.attr("index")]
            elif c.op == "const":
                value = c.attr("value")
                values[c.id] = L.f32(value) if c.dtype.is_float else \
                    ir.Constant(L.REGISTER[c.dtype], int(value))
            elif c.op == "convert":
                values[c.id] = L.convert(b, args[0], c.dtype)
            elif c.op == "where":
                values[c.id] = b.select(*args)
            elif len(args) == 1:
                values[c.id] = L.unary(b, self.intr, c.op, args[0])
            else:
                values[c.id] = L.binary(b, self.intr, c.op, *args)
        return tuple(values[r] for r in op.attr("results"))

    def _select(self, mask, a: tuple, c: tuple) -> tuple:
        return tuple(self.b.select(mask, x, y) for x, y in zip(a, c))

    def _scan_local(self, op, frags):
        b, axis = self.b, op.attr("axis")
        shape = self.frag_shape(op.axes)
        dtypes, ident = self._scan_parts(op)
        fulls = [np.broadcast_to(f, shape) for f in frags]
        out = tuple(np.empty(shape, dtype=object) for _ in dtypes)
        for idx in np.ndindex(shape):
            inside = self.in_bounds((axis,), *idx)
            _put(out, idx, tuple(b.select(inside, L.convert(b, f[idx], d), i)  # as astype
                                 for f, d, i in zip(fulls, dtypes, ident)))
        if self.lay.map_of(axis) is self.lay.col and shape[2] > 1:
            order = range(shape[2])
            order = list(reversed(order)) if op.attr("reverse") else list(order)
            for r, c in np.ndindex(shape[:2]):
                for prev, v in zip(order, order[1:]):
                    _put(out, (r, c, v), self._scan_combine(op, _get(out, (r, c, prev)),
                                                            _get(out, (r, c, v))))
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

    def _scan_block(self, op, local, carry_in=None):
        b, axis, rev = self.b, op.attr("axis"), bool(op.attr("reverse"))
        m = self.lay.map_of(axis)
        # a chunk's total drops the scanned axis: the scan runs over scan_local's fragment
        shape = local[0].shape if op.attr("total") else self.frag_shape(op.axes)
        local = tuple(np.broadcast_to(p, shape) for p in local)
        dtypes, ident = self._scan_parts(op)
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
        row = m is self.lay.row
        reps = shape[0] if row else shape[1]
        # each group: the chunk's elements one thread holds at one other position
        groups_of = (lambda r: [[(r, c, v)] for c, v in np.ndindex(shape[1:])]) if row else \
            (lambda r: [[(rr, r, v) for v in range(shape[2])] for rr in range(shape[0])])
        slots = self._scan_slots(op, dtypes, per_thread, len(groups_of(0)))
        out = tuple(np.empty(shape, dtype=object) for _ in dtypes)
        carry: dict = {}
        if carry_in is not None:      # a split scan's chunk starts from the chunks before
            carry_in = tuple(np.broadcast_to(p, shape) for p in carry_in)
            carry = {k: _get(carry_in, g[0]) for k, g in enumerate(groups_of(0))}
        for r in (reversed(range(reps)) if rev else range(reps)):
            groups = groups_of(r)
            inclusive = []
            for g in groups:
                t = _get(local, g[0] if rev else g[-1])
                for d in op.attr("lanes"):
                    other = tuple(self._scan_shuffle(x, d << m.shift, not rev) for x in t)
                    ok = b.icmp_unsigned("<", b.add(in_warp, L.i32(d)), L.i32(lanes)) if rev \
                        else b.icmp_unsigned(">=", in_warp, L.i32(d))
                    t = self._select(ok, self._scan_combine(op, other, t), t)
                inclusive.append(t)
            exclusive = []
            for t in inclusive:
                if not lane_bits:
                    exclusive.append(ident)
                    continue
                other = tuple(self._scan_shuffle(x, 1 << m.shift, not rev) for x in t)
                ok = b.icmp_unsigned("<", b.add(in_warp, L.i32(1)), L.i32(lanes)) if rev \
                    else b.icmp_unsigned(">=", in_warp, L.i32(1))
                exclusive.append(self._select(ok, other, ident))
            self._barrier()
            with b.if_then(writer):
                for k, t in enumerate(inclusive):
                    for (base, first), x in zip(slots[k], t):
                        b.store(self._to_word(x), b.gep(base, [b.add(L.i32(first), mine)]))
            self._barrier()
            for k, (g, excl) in enumerate(zip(groups, exclusive)):
                before, total = ident, None
                for u in (reversed(range(warps)) if rev else range(warps)):   # scan order
                    src = b.or_(b.shl(b.or_(b.shl(high, L.i32(warps.bit_length() - 1)),
                                            L.i32(u)), L.i32(m.shift)), low)
                    val = tuple(self._from_word(b.load(b.gep(base, [b.add(L.i32(first), src)])),
                                                d) for (base, first), d in zip(slots[k], dtypes))
                    total = val if total is None else self._scan_combine(op, total, val)
                    earlier = b.icmp_unsigned(">" if rev else "<", L.i32(u), warp)
                    before = self._select(earlier, self._scan_combine(op, before, val), before)
                prefix = self._scan_combine(op, before, excl)
                if k in carry:
                    prefix = self._scan_combine(op, carry[k], prefix)
                for pos in g:
                    _put(out, pos, self._scan_combine(op, prefix, _get(local, pos)))
                carry[k] = total if k not in carry else self._scan_combine(op, carry[k], total)
        if op.attr("total"):          # the chunk's total, where the scanned axis is dropped
            kept = tuple(np.empty(self.frag_shape(op.axes), dtype=object) for _ in dtypes)
            for k, g in enumerate(groups_of(0)):
                r, c, v = g[0]
                _put(kept, (0, c, v) if row else (r, 0, 0), carry[k])
            return kept
        return out

    def _scan_slots(self, op, dtypes, per_thread: int, groups: int):
        """[group][part] -> (shared base pointer of the part's dtype, first element): the
        parts one after another, each `groups` x `per_thread` words (two for an int64)."""
        word = op.attr("slot")
        slots = [[] for _ in range(groups)]
        for d in dtypes:
            word += word % smem_words(d)      # an int64 part starts on 8 bytes
            base = self._smem_base(d)
            for k in range(groups):
                slots[k].append((base, word // smem_words(d) + k * per_thread))
            word += groups * per_thread * smem_words(d)
        return slots

    def _barrier(self):
        self.b.call(self.intr.get("llvm.nvvm.barrier0", ir.VoidType(), []), [])
