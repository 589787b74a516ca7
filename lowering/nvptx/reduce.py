"""LLVM emission of reductions: in-thread folds, warp shuffles, shared-memory
exchanges, and the loop a block walks with its accumulators (a mixin of the
backend's emitter, which provides indices, fragments and the IR builder)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from plait.dsl.dtypes import DType

from ..cpu import mathfns
from . import ops as L
from . import ptx_mma as P
from .fragments import mask_and
from .fragments import map_fragments as _map
from .pulled import Pulled, fold_pulled
from ..ir.thread_rules import smem_words, staged_row_words


def identity(kind: str, dtype) -> ir.Constant:
    """Reduction `kind`'s identity in the register type of `dtype` (mathfns' value)."""
    return ir.Constant(L.REGISTER[dtype], mathfns.reduce_identity(kind, dtype.numpy).item())


def combine(b: ir.IRBuilder, intr, kind: str, x, y):
    """Fold two partials of reduction `kind`: the elementwise op of mathfns.REDUCE."""
    mathfns.reduce_fn(kind)             # an unknown kind raises
    return L.binary(b, intr, mathfns.REDUCE_COMBINE[kind], x, y)


class ReductionEmitter:
    def _emit_loop(self, body, fn) -> None:
        """One basic block walked `tile` times; accumulators are phis carried around it."""
        b = self.b
        header = fn.append_basic_block("loop")
        exit_block = fn.append_basic_block("after_loop")
        for op in body:                  # shared accumulators start at the identity
            if op.op == "loop_acc" and op.attr("shared") is not None:
                start = identity(op.attr("op"), op.dtype)
                self._shared_acc_write(op, np.full(self.frag_shape(op.axes), start,
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
        streamed = [op for op in body if op.op == "load" and op.attr("take") is None
                    and op.attr("view") is None and axis in self.prog.buffer(op.attr("buffer")).axes] if depth else []
        staged = [op for op in streamed if op.attr("staged") is not None]
        streamed = [op for op in streamed if op.attr("staged") is None]
        first = {op.id: [self._load(op, ahead=("first", k)) for k in range(depth)]
                 for op in streamed}
        for k in range(depth if staged else 0):
            for op in staged:
                self._stage_copy(op, L.i32(k), ("first", k))
            P.cp_async_commit(b)
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
                start = identity(op.attr("op"), op.dtype)
                frag = np.empty(self.frag_shape(op.axes), dtype=object)
                for idx in np.ndindex(frag.shape):
                    frag[idx] = b.phi(start.type)
                    frag[idx].add_incoming(start, entry)
                phis[op.id] = frag
        upcoming = {op.id: self._load(op, ahead=depth) for op in streamed}   # after the phis
        if staged:                       # row i has landed once at most depth - 1 are out
            P.cp_async_wait(b, depth - 1)
            ring = L.i32(depth + 1)
            for op in staged:
                self._stage_copy(op, b.urem(b.add(counter, L.i32(depth)), ring), depth)
            P.cp_async_commit(b)
            for op in staged:
                self.values[op.id] = self._stage_read(op, b.urem(counter, ring))
        ready = set(carried) | {op.id for op in staged}
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
            elif op.id not in ready:
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

    # ---- rows copied ahead into shared memory (prefetch_into: shared) -------------
    def _stage_words(self, op, slot, j: int, chunk_words: int):
        """Word offset (i32) of vector j of this thread in ring slot `slot` of `op`."""
        per_slot = staged_row_words(self.lay, self.prog.buffer(op.attr("buffer")))
        b = self.b
        mine = b.mul(b.add(L.i32(j * self.lay.threads), self.tid), L.i32(chunk_words))
        return b.add(b.add(L.i32(op.attr("staged")), b.mul(slot, L.i32(per_slot))), mine)

    def _stage_copy(self, op, slot, ahead) -> None:
        """cp.async this thread's vectors of the row `ahead` into ring slot `slot`. A row
        past the block's last is zero-filled, not read."""
        b = self.b
        buf = self.prog.buffer(op.attr("buffer"))
        vec = op.attr("vector")
        nbytes = vec * buf.dtype.itemsize
        row = L.i32(ahead[1]) if isinstance(ahead, tuple) else b.add(self.loop_index,
                                                                     L.i32(ahead))
        live = b.icmp_unsigned("<", row, self.loop_count)
        base = b.trunc(b.ptrtoint(self.smem, L.I64), L.I32)
        for j, (r, c, v0) in enumerate(self.vectors(buf, vec)):
            valid = mask_and(b, [self.in_bounds(buf.axes, r, c, v0, ahead), live])
            words = self._stage_words(op, slot, j, nbytes // 4)
            P.cp_async(b, b.add(base, b.mul(words, L.i32(4))),
                       self.address(buf, r, c, v0, ahead), valid, nbytes)

    def _stage_read(self, op, slot) -> np.ndarray:
        """This thread's vectors of the row in ring slot `slot`, as a load would give."""
        b = self.b
        buf = self.prog.buffer(op.attr("buffer"))
        vec = op.attr("vector")
        count = vec * buf.dtype.itemsize // 4
        out = np.empty(self.frag_shape(buf.axes), dtype=object)
        words_ty = ir.VectorType(L.I32, count) if count > 1 else L.I32
        base = b.bitcast(b.gep(self.smem, [L.i32(0), L.i32(0)]), L.I32.as_pointer(addrspace=3))
        for j, at in enumerate(self.vectors(buf, vec)):
            ptr = b.gep(base, [self._stage_words(op, slot, j, count)])
            ptr = b.bitcast(ptr, words_ty.as_pointer(addrspace=3))
            words = b.load(ptr, align=4 * count)
            regs = [b.extract_element(words, L.i32(k)) for k in range(count)] if count > 1 \
                else [words]
            self.unpack(out, at, regs, vec, buf.dtype)
        return out

    def _shared_acc_groups(self, op):
        """This thread's shared-memory words of accumulator `op`, as (fragment indices,
        pointer) per group of up to 4: group g of a thread starts at word
        base + (g * threads + tid) * width. The words are private (no barrier), and a
        warp's 16-byte accesses cover 512 contiguous bytes (no bank conflicts)."""
        b = self.b
        indices = list(np.ndindex(self.frag_shape(op.axes)))
        per = smem_words(op.dtype)      # an int64 takes two words: index in elements
        width = 4 if len(indices) % 4 == 0 and op.dtype in (DType.FP32, DType.INT32) else 1
        base = self._smem_base(op.dtype)
        vector = ir.VectorType(base.type.pointee, width).as_pointer(addrspace=3)
        for g in range(len(indices) // width):
            word = b.add(L.i32(op.attr("shared") // per + g * width * self.lay.threads),
                         b.mul(self.tid, L.i32(width)))
            ptr = b.gep(base, [word])
            yield indices[g * width:(g + 1) * width], (b.bitcast(ptr, vector) if width > 1
                                                        else ptr)

    def _shared_acc_read(self, op) -> np.ndarray:
        b = self.b
        out = np.empty(self.frag_shape(op.axes), dtype=object)
        for idxs, ptr in self._shared_acc_groups(op):
            if len(idxs) == 1:
                out[idxs[0]] = self._from_word(b.load(ptr), op.dtype)
                continue
            words = b.load(ptr, align=16)
            for k, idx in enumerate(idxs):
                out[idx] = b.extract_element(words, L.i32(k))
        return out

    def _shared_acc_write(self, op, values: np.ndarray) -> None:
        b = self.b
        for idxs, ptr in self._shared_acc_groups(op):
            if len(idxs) == 1:
                b.store(self._to_word(values[idxs[0]]), ptr)
                continue
            words = ir.Constant(ptr.type.pointee, None)
            for k, idx in enumerate(idxs):
                words = b.insert_element(words, values[idx], L.i32(k))
            b.store(words, ptr, align=16)

    def _loop_acc(self, op, acc, value):
        axis, kind = op.attr("axis"), op.attr("op")
        start = identity(kind, op.dtype)
        valid = self.in_bounds((axis,), 0, 0, 0)
        value = np.broadcast_to(value, acc.shape)
        # In the accumulator's dtype, as the CPU executor's astype (an i1 summed as i32).
        return _map(acc.shape, lambda a, v: self._combine(
            kind, a, self.b.select(valid, L.convert(self.b, v, op.dtype), start)), acc, value)

    def _combine(self, kind, x, y):
        return combine(self.b, self.intr, kind, x, y)

    # ---- shared memory and shuffles move 32-bit words -----------------------------
    def _smem_base(self, dtype):
        """The shared array as a pointer to dtype's words (an i1 travels as an i32)."""
        word = L.REGISTER[dtype] if dtype != DType.BOOL else L.I32
        base = self.b.gep(self.smem, [L.i32(0), L.i32(0)])
        return base if word == L.F32 else self.b.bitcast(base, word.as_pointer(addrspace=3))

    def _to_word(self, value):
        return self.b.zext(value, L.I32) if value.type == L.I1 else value

    def _from_word(self, value, dtype):
        return self.b.trunc(value, L.I1) if dtype == DType.BOOL else value

    def _shuffle(self, x, lanes: int):
        """The value of lane (this lane xor `lanes`): f32 and i32 as they are, an i64 as
        two words, an i1 widened to a word."""
        b = self.b

        def shfl(word, suffix, ty):
            return self.intr.call(b, f"llvm.nvvm.shfl.sync.bfly.{suffix}", ty,
                                  [L.i32(-1), word, L.i32(lanes), L.i32(0x1F)])
        if x.type == L.F32:
            return shfl(x, "f32", L.F32)
        if x.type == L.I64:
            lo = shfl(b.trunc(x, L.I32), "i32", L.I32)
            hi = shfl(b.trunc(b.lshr(x, ir.Constant(L.I64, 32)), L.I32), "i32", L.I32)
            return b.or_(b.zext(lo, L.I64), b.shl(b.zext(hi, L.I64), ir.Constant(L.I64, 32)))
        return self._from_word(shfl(self._to_word(x), "i32", L.I32),
                               DType.BOOL if x.type == L.I1 else DType.INT32)

    def _reduce_local(self, op, frag):
        axis, kind = op.attr("axis"), op.attr("op")
        shape = self.frag_shape(self.prog.ops[op.args[0]].axes + (axis,))
        start = identity(kind, op.dtype)
        m = self.lay.map_of(axis)
        dims = (0,) if m is self.lay.row and m is not None else (1, 2) if m is not None else ()
        if isinstance(frag, Pulled):        # each element made just before it is folded
            def masked_element(idx):
                value = L.convert(self.b, frag[idx], op.dtype)
                return self.b.select(self.in_bounds((axis,), *idx), value, start)
            return fold_pulled(shape, tuple(d for d in dims if shape[d] > 1),
                               lambda x, y: self._combine(kind, x, y), masked_element)
        full = np.broadcast_to(frag, shape)
        masked = np.empty(full.shape, dtype=object)
        for idx in np.ndindex(full.shape):
            value = L.convert(self.b, full[idx], op.dtype)     # as the CPU's astype
            masked[idx] = self.b.select(self.in_bounds((axis,), *idx), value, start)
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
                return self._combine(kind, x, self._shuffle(x, lanes))
            out = _map(out.shape, step, out)
        return out

    def _smem_put(self, op, frag) -> None:
        """Each thread writes its partials: fragment element k to element
        slot/words + k*threads + tid (words: 2 for an int64, else 1)."""
        b = self.b
        base_ptr = self._smem_base(op.dtype)
        first = op.attr("slot") // smem_words(op.dtype)
        for k, idx in enumerate(np.ndindex(frag.shape)):
            word = b.add(L.i32(first + k * self.lay.threads), self.tid)
            b.store(self._to_word(frag[idx]), b.gep(base_ptr, [word]))

    def _smem_fold(self, op, _barrier):
        """Fold the partials of the threads that differ from this one only in the reduced
        axis's warp bits, in warp order (the same order in every thread)."""
        b = self.b
        kind = op.attr("op")
        bits = op.attr("bits")
        threads = self.lay.threads
        shape = self.frag_shape(op.axes)
        base_ptr = self._smem_base(op.dtype)
        slot = op.attr("slot") // smem_words(op.dtype)
        first, count = min(bits), 1 << len(bits)
        cleared = b.and_(self.tid, L.i32(~(((count - 1) << first)) & 0xFFFFFFFF))
        out = np.empty(shape, dtype=object)
        for k, idx in enumerate(np.ndindex(shape)):
            acc = None
            for w in range(count):
                word = b.add(L.i32(slot + k * threads + (w << first)), cleared)
                val = self._from_word(b.load(b.gep(base_ptr, [word])), op.dtype)
                acc = val if acc is None else self._combine(kind, acc, val)
            out[idx] = acc
        return out
