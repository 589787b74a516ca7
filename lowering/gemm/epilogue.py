"""The epilogue of a tensor-core contraction, one accumulator element at a time, in LLVM.

The ops after the contraction program's loop (its `result`, then bias, activation, scale,
residual, cast) run on each fp32 accumulator where it lies in the thread's fragment. A thread's elements sit at
compile-time offsets from its base row and column, so a value that varies along
fewer axes (a bias along N, a scalar) is computed once per distinct offset and
reused. Reads of other tensors clamp their index into the tensor: an element
outside the output is computed but never stored.
"""
from __future__ import annotations

from llvmlite import ir

from plait.dsl.dtypes import DType

from ..nvptx import ops as L
from ..tileir.tile import register_dtype


class EpilogueEmitter:
    def __init__(self, kernel, index: dict, varying: tuple[str, str]):
        self.k = kernel                 # the kernel emitter: builder, args, sizes
        self.g = kernel.g
        self.index = index              # axis -> this thread's base index (i32)
        self.varying = varying          # the axes whose offsets differ per element (M, N)
        self.ops = {op.id: op for op in self.g.program.ops}
        self.memo: dict = {}
        self.buffers = {buf.name: buf for buf in self.g.buffers}

    def value(self, acc, offsets: dict[str, int]):
        """The storage bits the output takes at this element (acc: its fp32 accumulator)."""
        self.acc = acc
        store = self.g.program.ops[-1]
        return L.encode(self.k.b, self.k.intr, self._value(store.args[0], offsets),
                        self.buffers[store.attr("buffer")].dtype)

    def _value(self, vid: int, offsets):
        op = self.ops[vid]
        if op.op == "result":          # the loop's accumulator: this element's, each call
            return self.acc
        key = (vid,) + tuple(offsets[a] for a in self.varying if a in op.axes)
        if key not in self.memo:
            self.memo[key] = self._compute(op, offsets)
        return self.memo[key]

    def _compute(self, op, offsets):
        b, intr = self.k.b, self.k.intr
        kind = op.op
        if kind == "load":
            return self._load(op, offsets)
        args = [self._value(a, offsets) for a in op.args]
        if kind == "param":
            return self.k.args[("scalar", op.attr("name"))]
        if kind == "const":
            return L.f32(op.attr("value")) if op.dtype == DType.FP32 else \
                ir.Constant(L.REGISTER[op.dtype], int(op.attr("value")))
        if kind == "size":
            size = self.k.size(op.attr("axis"))
            return b.sitofp(size, L.F32) if op.dtype == DType.FP32 else size
        if kind == "iota":
            axis = op.attr("axis")
            return b.add(self.index[axis], L.i32(offsets.get(axis, 0)))
        if kind == "convert":
            src = self.ops.get(op.args[0])
            if src is not None and src.op == "load" and src.dtype != register_dtype(src.dtype):
                return L.decode(b, args[0], src.dtype)
            return L.convert(b, args[0], op.dtype)
        if kind == "round":
            return L.round_to(b, intr, args[0], op.attr("round"))
        return L.elementwise(b, intr, kind, args, op.attr("round"))

    def _load(self, op, offsets):
        """One element of another tensor, its index clamped inside it: the register value
        for fp32 and integer tensors, storage bits for a narrow float (decoded by the
        tile program's `convert`, as the thread backend's loads)."""
        b = self.k.b
        buf = self.buffers[op.attr("buffer")]
        offset = ir.Constant(L.I64, 0)
        for axis in buf.axes:
            size = self.k.size(axis)
            i = self.index[axis]
            if axis in offsets and offsets[axis]:
                i = b.add(i, L.i32(offsets[axis]))
            last = b.sub(size, L.i32(1))
            i = b.select(b.icmp_signed(">", i, last), last, i)
            offset = b.add(b.mul(offset, b.zext(size, L.I64)), b.zext(i, L.I64))
        bits = L.STORAGE_BITS[buf.dtype]
        base = self.k.args[("buffer", buf.name)]
        ptr = b.bitcast(b.gep(base, [b.mul(offset, ir.Constant(L.I64, buf.dtype.itemsize))]),
                        ir.PointerType(bits, 1))
        bits = b.load(ptr)
        # fp32 and integers have no `convert` after their load: decode here.
        return bits if buf.dtype != register_dtype(buf.dtype) else L.decode(b, bits, buf.dtype)
