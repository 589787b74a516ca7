"""LLVM emission of reductions: in-thread folds, warp shuffles, shared-memory
exchanges, and the loop a block walks with its accumulators (a mixin of the
backend's emitter, which provides indices, fragments and the IR builder)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from . import ops_llvm as L
from .llvm_fragments import map_fragments as _map
from .thread import REDUCE_IDENTITY


class ReductionEmitter:
    def _emit_loop(self, body, fn) -> None:
        """One basic block walked `tile` times; accumulators are phis carried around it."""
        b = self.b
        header = fn.append_basic_block("loop")
        exit_block = fn.append_basic_block("after_loop")
        for op in body:                  # shared accumulators start at the identity
            if op.op == "loop_acc" and op.attr("shared") is not None:
                identity = L.f32(REDUCE_IDENTITY[op.attr("op")])
                self._shared_acc_write(op, np.full(self.frag_shape(op.axes), identity,
                                                   dtype=object))
        # Software pipelining: the loads of index i + depth are issued at the top of step
        # i, so `depth` further rows are in flight while this one is reduced and written.
        # Values of the rows in flight are phis carried from step to step.
        axis = self.lay.loop.axis
        depth = self.lay.prefetch
        # The block walks min(tile, extent - base) indices, so no index inside the loop
        # lies past the axis's end; loads ahead of the last one reload it.
        remaining = b.sub(self.size(axis), self.base(axis))
        tile = L.i32(self.lay.loop.tile)
        self.loop_count = b.select(b.icmp_unsigned("<", remaining, tile), remaining, tile)
        streamed = [op for op in body if op.op == "load"
                    and axis in self.prog.buffer(op.attr("buffer")).axes] if depth else []
        first = {op.id: [self._load(op, ahead=("first", k)) for k in range(depth)]
                 for op in streamed}
        entry = b.block
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(L.I32, name="row")
        counter.add_incoming(L.i32(0), entry)
        self.loop_index = counter
        carried = {}                     # load -> the fragments of steps i .. i + depth - 1
        for op in streamed:
            carried[op.id] = []
            for start in first[op.id]:
                frag = np.empty(start.shape, dtype=object)
                for idx in np.ndindex(frag.shape):
                    frag[idx] = b.phi(start[idx].type)
                    frag[idx].add_incoming(start[idx], entry)
                carried[op.id].append(frag)
            self.values[op.id] = carried[op.id][0]
        phis = {}
        for op in body:
            if op.op == "loop_acc" and op.attr("shared") is None:
                identity = L.f32(REDUCE_IDENTITY[op.attr("op")])
                frag = np.empty(self.frag_shape(op.axes), dtype=object)
                for idx in np.ndindex(frag.shape):
                    frag[idx] = b.phi(L.F32)
                    frag[idx].add_incoming(identity, entry)
                phis[op.id] = frag
        upcoming = {op.id: self._load(op, ahead=depth) for op in streamed}   # after the phis
        shared_accs = []
        for op in body:
            if op.op == "loop_acc" and op.attr("shared") is not None:
                current = self._shared_acc_read(op)
                self._shared_acc_write(op, self._loop_acc(op, current,
                                                          self.values[op.args[0]]))
                shared_accs.append(op)
            elif op.op == "loop_acc":
                self.values[op.id] = self._loop_acc(op, phis[op.id],
                                                    self.values[op.args[0]])
            elif op.id not in carried:
                self.values[op.id] = self._op(op)
        latch = b.block
        for op_id, frags in carried.items():
            for frag, following in zip(frags, frags[1:] + [upcoming[op_id]]):
                for idx in np.ndindex(frag.shape):
                    frag[idx].add_incoming(following[idx], latch)
        for op_id, frag in phis.items():
            for idx in np.ndindex(frag.shape):
                frag[idx].add_incoming(self.values[op_id][idx], latch)
        following = b.add(counter, L.i32(1))
        counter.add_incoming(following, latch)
        b.cbranch(b.icmp_unsigned("<", following, self.loop_count), header,
                  exit_block)
        b.position_at_end(exit_block)
        for op in shared_accs:           # each thread reads back only its own slots
            self.values[op.id] = self._shared_acc_read(op)

    def _shared_acc_groups(self, op):
        """This thread's shared-memory words of accumulator `op`, as (fragment indices,
        pointer) per group of up to 4: group g of a thread starts at word
        base + (g * threads + tid) * width. The words are private (no barrier), and a
        warp's 16-byte accesses cover 512 contiguous bytes (no bank conflicts)."""
        b = self.b
        indices = list(np.ndindex(self.frag_shape(op.axes)))
        width = 4 if len(indices) % 4 == 0 else 1
        base = b.gep(self.smem, [L.i32(0), L.i32(0)])
        vector = ir.VectorType(L.F32, width).as_pointer(addrspace=3)
        for g in range(len(indices) // width):
            word = b.add(L.i32(op.attr("shared") + g * width * self.lay.threads),
                         b.mul(self.tid, L.i32(width)))
            ptr = b.gep(base, [word])
            yield indices[g * width:(g + 1) * width], (b.bitcast(ptr, vector) if width > 1
                                                        else ptr)

    def _shared_acc_read(self, op) -> np.ndarray:
        b = self.b
        out = np.empty(self.frag_shape(op.axes), dtype=object)
        for idxs, ptr in self._shared_acc_groups(op):
            if len(idxs) == 1:
                out[idxs[0]] = b.load(ptr)
                continue
            words = b.load(ptr, align=16)
            for k, idx in enumerate(idxs):
                out[idx] = b.extract_element(words, L.i32(k))
        return out

    def _shared_acc_write(self, op, values: np.ndarray) -> None:
        b = self.b
        for idxs, ptr in self._shared_acc_groups(op):
            if len(idxs) == 1:
                b.store(values[idxs[0]], ptr)
                continue
            words = ir.Constant(ir.VectorType(L.F32, len(idxs)), None)
            for k, idx in enumerate(idxs):
                words = b.insert_element(words, values[idx], L.i32(k))
            b.store(words, ptr, align=16)

    def _loop_acc(self, op, acc, value):
        axis, kind = op.attr("axis"), op.attr("op")
        identity = L.f32(REDUCE_IDENTITY[kind])
        valid = self.in_bounds((axis,), 0, 0, 0)
        value = np.broadcast_to(value, acc.shape)
        return _map(acc.shape, lambda a, v: self._combine(kind, a, self.b.select(valid, v,
                                                                                 identity)),
                    acc, value)

    def _combine(self, kind, x, y):
        if kind == "sum":
            return self.b.fadd(x, y, flags=L.CONTRACT)
        return self.intr.call(self.b, f"llvm.{'maximum' if kind == 'max' else 'minimum'}.f32",
                              L.F32, [x, y])

    def _reduce_local(self, op, frag):
        axis, kind = op.attr("axis"), op.attr("op")
        full = np.broadcast_to(frag, self.frag_shape(self.prog.ops[op.args[0]].axes + (axis,)))
        identity = L.f32(REDUCE_IDENTITY[kind])
        masked = np.empty(full.shape, dtype=object)
        for idx in np.ndindex(full.shape):
            masked[idx] = self.b.select(self.in_bounds((axis,), *idx), full[idx], identity)
        m = self.lay.map_of(axis)
        dims = (0,) if m is self.lay.row and m is not None else (1, 2) if m is not None else ()
        for dim in (2, 1, 0):                        # same order as the CPU executor
            if dim in dims and masked.shape[dim] > 1:
                acc = np.take(masked, [0], axis=dim)
                for i in range(1, masked.shape[dim]):
                    nxt = np.take(masked, [i], axis=dim)
                    acc = _map(acc.shape, lambda x, y: self._combine(kind, x, y), acc, nxt)
                masked = acc
        return masked

    def _reduce_shfl(self, op, frag):
        kind = op.attr("op")
        out = frag
        for lanes in op.attr("lanes"):
            def step(x, lanes=lanes):
                other = self.intr.call(self.b, "llvm.nvvm.shfl.sync.bfly.f32", L.F32,
                                       [L.i32(-1), x, L.i32(lanes), L.i32(0x1F)])
                return self._combine(kind, x, other)
            out = _map(out.shape, step, out)
        return out

    def _smem_put(self, op, frag) -> None:
        """Each thread writes its partials: fragment element k to word slot + k*threads + tid."""
        b = self.b
        base_ptr = b.gep(self.smem, [L.i32(0), L.i32(0)])
        for k, idx in enumerate(np.ndindex(frag.shape)):
            word = b.add(L.i32(op.attr("slot") + k * self.lay.threads), self.tid)
            b.store(frag[idx], b.gep(base_ptr, [word]))

    def _smem_fold(self, op, _barrier):
        """Fold the partials of the threads that differ from this one only in the reduced
        axis's warp bits, in warp order (the same order in every thread)."""
        b = self.b
        kind = op.attr("op")
        bits = op.attr("bits")
        threads = self.lay.threads
        shape = self.frag_shape(op.axes)
        base_ptr = b.gep(self.smem, [L.i32(0), L.i32(0)])
        first, count = min(bits), 1 << len(bits)
        cleared = b.and_(self.tid, L.i32(~(((count - 1) << first)) & 0xFFFFFFFF))
        out = np.empty(shape, dtype=object)
        for k, idx in enumerate(np.ndindex(shape)):
            acc = None
            for w in range(count):
                word = b.add(L.i32(op.attr("slot") + k * threads + (w << first)), cleared)
                val = b.load(b.gep(base_ptr, [word]))
                acc = val if acc is None else self._combine(kind, acc, val)
            out[idx] = acc
        return out
