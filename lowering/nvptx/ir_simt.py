"""The SIMT emitter reading its kernel from the IR (`ir/thread_kernel.py`).

The ops of the kernel's top block run in order; its one `for` is the walk over the
looped axis, emitted by the loop machinery of `reduce.py` with each `accumulate` folding
one index into its carried accumulator. The emitter's op handlers (backend.py, reduce.py,
arg_reduce.py, gather.py) see each IR op through `_view`: its name, first result as id,
arguments, axes and dtype of its type, and attributes, which is all they read.

Switched by PLAIT_IR_SIMT=1 (off by default) until the thread-level steps are IR passes;
tests/lowering/test_ir_simt_emit.py checks the PTX equals the emitter of thread programs
byte for byte over the PTX corpus's SIMT kernels.
"""
from __future__ import annotations

import os

from ..ir.nodes import Kernel, Op
from ..tileir.tile import TileOp
from .backend import _Emitter, launch_bounds, llvm_to_ptx


def ir_simt_enabled() -> bool:
    return os.environ.get("PLAIT_IR_SIMT", "0") == "1"


class _KernelView:
    """What the emitter reads of its program, answered from the IR kernel."""

    def __init__(self, k: Kernel, size_args: tuple[str, ...]):
        self.name = k.name
        self.layout = k.attr("simt_layout")
        self.buffers = k.buffers
        self.scalars = k.scalars
        self.size_args = size_args
        self.smem_floats = k.attr("smem_words")
        self.acc_floats = k.attr("acc_words")
        self.stage_floats = k.attr("stage_words")
        self.ops: dict[int, TileOp] = {}       # value id -> the op that defines it

    def buffer(self, name: str):
        return next(b for b in self.buffers if b.name == name)


def _view(k: Kernel, op: Op) -> TileOp:
    if op.results:
        t = k.type_of(op.results[0])
        return TileOp(op.results[0], op.name, op.args, t.axes, t.dtype, op.attrs)
    attrs = tuple((key, v) for key, v in op.attrs if key != "axes")
    return TileOp(-1, op.name, op.args, op.attr("axes", ()), None, attrs)


def emit_ir_llvm(k: Kernel, size_args: tuple[str, ...], entry: str) -> str:
    return str(_IrEmitter(k, _KernelView(k, size_args), entry).module)


def emit_ir_ptx(k: Kernel, size_args: tuple[str, ...], entry: str) -> str:
    ptx = llvm_to_ptx(emit_ir_llvm(k, size_args, entry), k.target)
    lay = k.attr("simt_layout")
    return launch_bounds(ptx, entry, lay.threads, lay.occupancy)


class _IrEmitter(_Emitter):
    def __init__(self, k: Kernel, view: _KernelView, entry: str):
        self.kernel = k
        for op in _every_op(k.body.ops):
            if op.results:
                view.ops[op.results[0]] = _view(k, op)
        super().__init__(view, entry, k.target)

    def _run_program(self, fn) -> None:
        # The loop machinery starts each accumulator at its identity itself.
        starts = {a for op in self.kernel.body.ops if op.name == "for" for a in op.args}
        for op in self.kernel.body.ops:
            if op.results and op.results[0] in starts:
                continue
            if op.name == "for":
                self._walk(op, fn)
                continue
            value = self._op(_view(self.kernel, op))
            if op.results:
                self.values[op.results[0]] = value

    def _walk(self, loop: Op, fn) -> None:
        """The accumulators' `accumulate` ops stand as the loop accumulators the loop
        machinery folds; the `for`'s results are their final values."""
        k = self.kernel
        body = []
        for op in loop.body.ops:
            if op.name == "yield":
                continue
            view = _view(k, op)
            if op.name == "accumulate":     # the carried param is the machinery's phi
                view = TileOp(view.id, "loop_acc", op.args[1:], view.axes, view.dtype,
                              view.attrs)
            body.append(view)
        self._emit_loop(body, fn)
        folded = loop.body.ops[-1].args
        for result, last in zip(loop.results, folded):
            self.values[result] = self.values[last]


def _every_op(ops):
    for op in ops:
        yield op
        if op.body is not None:
            yield from _every_op(op.body.ops)
