"""The ops of a streamed step on register elements (stream/emitter.py's emitter mixes this
in): each value is a dict from register position (row slot, column block and pair) to an
LLVM value, in the layout the module docstring of emitter.py describes. Products go to
the emitter's instruction (`scores`, `weighted`), one element's arithmetic to
nvptx/elements.py; here are the loads of other tensors (their index clamped inside), the
row reductions (the thread's columns, then its quad by shuffles) and the stores
(adjacent column pairs as one)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..cpu import mathfns
from ..nvptx import ops as L
from ..nvptx.elements import clamped_element, scalar_op
from ..nvptx.ptx_memory import asm_store
from .mma import scatter, to_scratch


class StepOps:
    """Needs the emitter's builder (`b`, `intr`, `args`, `size`), its program (`sk`, `ops`,
    `buffers`, `tiles`, `values`, `results`, `masked`), its step (`m0`, `key0`) and its
    register layout (`positions`, `project`, `index_of`, `_col_axis`, `row_base`, `lane`,
    `lane_col`, `offsets`)."""

    def _scalar(self, vid: int):
        (value,) = self.values[vid].values()
        return value

    # ---- the ops ------------------------------------------------------------------------------
    def _emit(self, op) -> None:
        sk = self.sk
        kind = op.op
        if kind == "load" and op.attr("buffer") not in self.tiles:
            loaded = {}             # registers reading one element share its load
            self.values[op.id] = {key: self._load_element(op, key, loaded)
                                  for key in self.positions(op.axes)}
            return
        if kind in ("load", "carried", "yield"):
            return                          # tiles are staged by the loop; carried by phis
        if kind == "result":
            self.values[op.id] = self.results[op.attr("index")]
            return
        if kind == "atomic_add":
            dot = self.ops[op.args[0]]
            scatter(self, self._operand_of(dot.args[1]), op.attr("buffer"))
            return
        if kind == "dot":
            if op.attr("over") == sk.rows_axis:   # a scattered sum: its weights wait in
                to_scratch(self, self.values[op.args[0]],   # shared memory for its
                           self._operand_of(op.args[1]))     # atomic_add's product
                return
            if op.attr("over") == sk.keys_axis:
                self.values[op.id] = self.weighted(self.values[op.args[0]],
                                                   self.values[op.args[2]],
                                                   self._operand_of(op.args[1]))
            else:
                self.values[op.id] = self.scores(self._operand_of(op.args[0]),
                                                 self._operand_of(op.args[1]))
            return
        if op.attr("mask") is not None and not self.masked:
            self.values[op.id] = self.values[op.args[1]]   # the tile is whole: no mask
            return
        if kind in mathfns.REDUCE_COMBINE and op.attr("axis") is not None:
            self.values[op.id] = self._row_reduce(op)
            return
        if kind == "store":
            self._store(op)
            return
        out = {}
        for key in self.positions(op.axes):
            args = [self.values[a][self.project(key, self.ops[a].axes)] for a in op.args]
            out[key] = self._elementwise(op, args, key)
        self.values[op.id] = out

    def _operand_of(self, vid: int):
        return self.sk.operand(self.ops[vid].attr("buffer"))

    def _load_element(self, op, key, loaded: dict):
        """One element of a mask or bias tensor at register position `key`, its index
        clamped inside the tensor (a position past the end is computed, never used): the
        register value, or a narrow float's storage bits, which the program's `convert`
        decodes. `loaded` holds the elements read so far, by index."""
        buf = self.buffers[op.attr("buffer")]
        fine = dict(op.attr("blocks") or ())
        at = {axis: self._block_of(fine[axis], key, op.attr("block"), loaded) if axis in fine
              else self.index_of(axis, key) for axis in buf.axes}
        index = tuple(id(at[axis]) for axis in buf.axes)
        if index not in loaded:
            loaded[index] = self.element(buf.name, at)
        return loaded[index]

    def _block_of(self, axis: str, key, size: int, memo: dict):
        """The block (of `size` positions) along `axis` that register `key` lies in: the
        same for the whole tile where the tile is cut from one block (the block's rows
        from m0, a multiple of the rows; a step's keys from key0), else per register."""
        b, sk = self.b, self.sk
        if axis == sk.rows_axis and size % sk.rows == 0:
            start = self.m0
        elif axis == sk.keys_axis and size % sk.keys == 0:
            start = self.key0
        else:
            return b.sdiv(self.index_of(axis, key), L.i32(size))
        if ("block", axis) not in memo:
            memo["block", axis] = b.sdiv(start, L.i32(size))
        return memo["block", axis]

    def element(self, name: str, at: dict):
        """The element of input `name` at positions `at` (axis: i32), clamped inside it:
        the register value, or a narrow float's storage bits."""
        return clamped_element(self.b, self.args[("buffer", name)], self.buffers[name],
                               at.__getitem__, self.size)

    def _elementwise(self, op, args, key):
        b, intr = self.b, self.intr
        shifted = self.ops[op.args[0]] if op.op == "exp" and op.args else None
        if shifted is not None and shifted.op == "sub" and op.attr("round") is None:
            # exp(s - m) as ex2(s * log2(e) - m * log2(e)): one fma per score, and the
            # row's m * log2(e) once (the online softmax's inner loop is bound by these).
            s, m = (self.values[a][self.project(key, self.ops[a].axes)] for a in shifted.args)
            log2e = L.f32(mathfns.LOG2E)
            neg = b.fmul(m, L.f32(-mathfns.LOG2E))
            return L.ex2(b, intr.call(b, "llvm.fma.f32", L.F32, [s, log2e, neg]))
        return scalar_op(b, intr, op, args,
                         source=self.ops[op.args[0]] if op.args else None,
                         scalar=lambda name: self.args[("scalar", name)], size=self.size,
                         position=lambda axis: self.index_of(axis, key))

    def _row_reduce(self, op) -> dict:
        """Fold a value's columns into each of the thread's two rows: its own registers
        (positions past the end of the axis skipped), then the quad's four lanes."""
        b, intr = self.b, self.intr
        src = self.values[op.args[0]]
        combine = mathfns.REDUCE_COMBINE[op.op]          # the op table's, as everywhere
        axis = op.attr("axis")
        out = {}
        for half in range(2 * self.sk.row_blocks):
            acc = None
            for key, value in src.items():
                if key[0] != half:
                    continue
                if self.masked:             # a whole tile has no keys past the end
                    inside = b.icmp_signed("<", self.index_of(axis, key), self.size(axis))
                    identity = L.f32(float(mathfns.reduce_identity(op.op, np.float32)))
                    value = b.select(inside, value, identity)
                acc = value if acc is None else L.binary(b, intr, combine, acc, value)
            for lanes in (1, 2):
                other = intr.call(b, "llvm.nvvm.shfl.sync.bfly.f32", L.F32,
                                  [L.i32(0xFFFFFFFF), acc, L.i32(lanes), L.i32(0x1F)])
                acc = L.binary(b, intr, combine, acc, other)
            out[(half, None)] = acc
        return out

    def _store(self, op) -> None:
        """Pairs of adjacent columns go out as one store, inside rows only; a value over
        the rows alone (a log-sum-exp) from the first lane of each quad."""
        b, intr, sk = self.b, self.intr, self.sk
        buf = self.buffers[op.attr("buffer")]
        values = self.values[op.args[0]]
        base = self.args[("buffer", buf.name)]
        src_axes = self.ops[op.args[0]].axes
        col_axis = self._col_axis(src_axes)
        width = sk.width(col_axis) if col_axis else 1
        first_lane = b.icmp_signed("==", b.and_(self.lane, L.i32(3)), L.i32(0))
        for half in range(2 * sk.row_blocks):
            row = b.add(self.row_base, L.i32(8 * half))
            row_in = b.icmp_signed("<", row, self.size(sk.rows_axis))
            row_at = b.add(self.offsets[buf.name],
                           b.mul(b.zext(row, L.I64), ir.Constant(L.I64, width)))
            if col_axis is None:
                bits = [L.encode(b, intr, values[self.project((half, None), src_axes)],
                                 buf.dtype)]
                ptr = b.gep(base, [b.mul(row_at, ir.Constant(L.I64, buf.dtype.itemsize))])
                asm_store(b, b.ptrtoint(ptr, L.I64), b.and_(row_in, first_lane), bits,
                          buf.dtype)
                continue
            for je in range(sk.pad(col_axis) // 8):
                col = b.add(self.lane_col, L.i32(8 * je))
                inside = b.and_(row_in, b.icmp_signed("<", col, L.i32(width)))
                bits = [L.encode(b, intr, values[self.project((half, (je, e)), src_axes)],
                                 buf.dtype) for e in (0, 1)]
                element = b.add(row_at, b.zext(col, L.I64))
                ptr = b.gep(base, [b.mul(element, ir.Constant(L.I64, buf.dtype.itemsize))])
                asm_store(b, b.ptrtoint(ptr, L.I64), inside, bits, buf.dtype)
