"""LLVM emission of pair reductions (argmax, argmin): the state is (values, indices), two
fragments folded together by `arg_combine`, the mirror of `cpu.mathfns.arg_combine`.

A mixin of the backend's emitter next to `reduce.ReductionEmitter`: the thread's own
elements (each with its index along the axis, from the layout), a butterfly that
shuffles both words of each pair, and a shared-memory exchange with two slots (values,
then int32 indices). `cpu/arg_reduce.py` is the same program on the CPU.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from plait.dsl.dtypes import DType
from plait.dsl.node import OPS

from ..cpu import mathfns
from . import ops as L
from .reduce import identity

INDEX_IDENTITY = ir.Constant(L.I32, int(mathfns.INDEX_IDENTITY))


def arg_combine(b: ir.IRBuilder, kind: str, a: tuple, c: tuple) -> tuple:
    """Pair c wins over pair a where its value is NaN and a's is not, where it is greater
    (argmax; smaller for argmin), or where the values are equal (or both NaN) and its
    index is smaller."""
    (va, ia), (vc, ic) = a, c
    if va.type in (L.F32,):
        nan_a = b.fcmp_unordered("uno", va, va)
        nan_c = b.fcmp_unordered("uno", vc, vc)
        beyond = b.fcmp_ordered(">" if OPS[kind].combine == "argmax" else "<", vc, va)
        better = b.or_(b.and_(nan_c, b.not_(nan_a)), beyond)
        tie = b.or_(b.and_(nan_a, nan_c), b.fcmp_ordered("==", va, vc))
    else:
        better = b.icmp_signed(">" if OPS[kind].combine == "argmax" else "<", vc, va)
        tie = b.icmp_signed("==", va, vc)
    take = b.or_(better, b.and_(tie, b.icmp_signed("<", ic, ia)))
    return b.select(take, vc, va), b.select(take, ic, ia)


def _fold(b, kind: str, acc: tuple, other: tuple) -> tuple:
    """arg_combine over fragments (object arrays of one shape) of both halves."""
    vals = np.empty(acc[0].shape, dtype=object)
    idxs = np.empty(acc[0].shape, dtype=object)
    for idx in np.ndindex(vals.shape):
        vals[idx], idxs[idx] = arg_combine(b, kind, (acc[0][idx], acc[1][idx]),
                                           (other[0][idx], other[1][idx]))
    return vals, idxs


class PairReductionEmitter:
    def _pair_op(self, op, args):
        if op.op == "reduce_local":
            return self._pair_local(op, args[0])
        if op.op == "reduce_shfl":
            return self._pair_shfl(op, args[0])
        if op.op == "smem_put":
            return self._pair_put(op, args[0])
        if op.op == "smem_fold":
            return self._pair_fold(op)
        return args[0][1]                          # reduce_done: the index

    def _pair_local(self, op, frag) -> tuple:
        b = self.b
        axis, kind, dtype = op.attr("axis"), op.attr("op"), op.attr("value")
        full = np.broadcast_to(frag, self.frag_shape(self.prog.ops[op.args[0]].axes + (axis,)))
        start = identity(kind, dtype)
        vals = np.empty(full.shape, dtype=object)
        idxs = np.empty(full.shape, dtype=object)
        for idx in np.ndindex(full.shape):
            inside = self.in_bounds((axis,), *idx)
            vals[idx] = b.select(inside, L.convert(b, full[idx], dtype), start)
            idxs[idx] = b.select(inside, self.index(axis, *idx), INDEX_IDENTITY)
        m = self.lay.map_of(axis)
        dims = (0,) if m is self.lay.row and m is not None else (1, 2) if m is not None else ()
        for dim in (2, 1, 0):                      # same order as the CPU executor
            if dim in dims and vals.shape[dim] > 1:
                acc = (np.take(vals, [0], axis=dim), np.take(idxs, [0], axis=dim))
                for i in range(1, vals.shape[dim]):
                    acc = _fold(b, kind, acc, (np.take(vals, [i], axis=dim),
                                               np.take(idxs, [i], axis=dim)))
                vals, idxs = acc
        return vals, idxs

    def _pair_shfl(self, op, state) -> tuple:
        for lanes in op.attr("lanes"):
            other = tuple(np.vectorize(lambda x, lanes=lanes: self._shuffle(x, lanes),
                                       otypes=[object])(s) for s in state)
            state = _fold(self.b, op.attr("op"), state, other)
        return state

    def _pair_put(self, op, state) -> None:
        """Values at slot, indices at index_slot: element k of a thread's fragment at
        k * threads + tid of each (as the one-value exchange lays out its slot)."""
        b = self.b
        dtype = op.attr("value")
        for (slot, words), frag, base in (
                ((op.attr("slot"), dtype), state[0], self._smem_base(dtype)),
                ((op.attr("index_slot"), DType.INT32), state[1],
                 self._smem_base(DType.INT32))):
            first = slot // (2 if words.itemsize == 8 else 1)
            for k, idx in enumerate(np.ndindex(frag.shape)):
                word = b.add(L.i32(first + k * self.lay.threads), self.tid)
                b.store(frag[idx], b.gep(base, [word]))

    def _pair_fold(self, op) -> tuple:
        """Fold the warps' pairs in warp order, as the one-value exchange does."""
        b = self.b
        kind, dtype, bits = op.attr("op"), op.attr("value"), op.attr("bits")
        threads = self.lay.threads
        shape = self.frag_shape(op.axes)
        vbase, ibase = self._smem_base(dtype), self._smem_base(DType.INT32)
        vslot = op.attr("slot") // (2 if dtype.itemsize == 8 else 1)
        islot = op.attr("index_slot")
        first, count = min(bits), 1 << len(bits)
        cleared = b.and_(self.tid, L.i32(~((count - 1) << first) & 0xFFFFFFFF))
        vals = np.empty(shape, dtype=object)
        idxs = np.empty(shape, dtype=object)
        for k, idx in enumerate(np.ndindex(shape)):
            acc = None
            for w in range(count):
                at = b.add(L.i32(k * threads + (w << first)), cleared)
                pair = (b.load(b.gep(vbase, [b.add(at, L.i32(vslot))])),
                        b.load(b.gep(ibase, [b.add(at, L.i32(islot))])))
                acc = pair if acc is None else arg_combine(b, kind, acc, pair)
            vals[idx], idxs[idx] = acc
        return vals, idxs
