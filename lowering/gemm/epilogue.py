"""The epilogue of a tensor-core contraction, one accumulator element at a time, in LLVM.

The ops after the contraction program's loop (its `result`, then bias, activation, scale,
residual, cast) run on each fp32 accumulator where it lies in the thread's fragment. A thread's elements sit at
compile-time offsets from its base row and column, so a value that varies along
fewer axes (a bias along N, a scalar) is computed once per distinct offset and
reused. Reads of other tensors clamp their index into the tensor: an element
outside the output is computed but never stored.
"""
from __future__ import annotations

from ..nvptx import ops as L
from ..nvptx.elements import clamped_element, scalar_op


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
        if op.op == "load":
            return self._load(op, offsets)
        args = [self._value(a, offsets) for a in op.args]
        return scalar_op(self.k.b, self.k.intr, op, args,
                         source=self.ops.get(op.args[0]) if op.args else None,
                         scalar=lambda name: self.k.args[("scalar", name)], size=self.k.size,
                         position=lambda axis: self._position(axis, offsets))

    def _position(self, axis: str, offsets):
        """This element's index along `axis` (the thread's base plus its offset)."""
        if offsets.get(axis):
            return self.k.b.add(self.index[axis], L.i32(offsets[axis]))
        return self.index[axis]

    def _load(self, op, offsets):
        """One element of another tensor, its index clamped inside it (the register
        value, or a narrow float's storage bits for the tile program's `convert`)."""
        buf = self.buffers[op.attr("buffer")]
        return clamped_element(self.k.b, self.k.args[("buffer", buf.name)], buf,
                               lambda axis: self._position(axis, offsets), self.k.size)
