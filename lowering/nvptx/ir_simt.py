"""The SIMT emitter reading its kernel from the thread-level IR (`ir/simt_threads.py`).

The ops of the kernel's top block run in order; its one `for` is the walk over the
looped axis, emitted by the loop machinery of `reduce.py` with each `accumulate` folding
one index into its carried accumulator. The op handlers (backend.py, reduce.py,
arg_reduce.py, gather.py) see each IR op through `ir/thread_view.py`.

The default since 2026-12-07 (PLAIT_IR_SIMT=0 goes back to the thread-program emitter
until that path is deleted): tests/lowering/test_ir_simt_emit.py checks the LLVM IR
equals the thread-program emitter's byte for byte, and the PTX corpus is identical.
"""
from __future__ import annotations

import os

from ..ir.nodes import Kernel, Op
from ..ir.thread_view import KernelView, loop_body, loop_starts, op_view
from .backend import _Emitter
from .ptx_text import launch_bounds, llvm_to_ptx


def ir_simt_enabled() -> bool:
    return os.environ.get("PLAIT_IR_SIMT", "1") != "0"


def emit_ir_llvm(k: Kernel, size_args: tuple[str, ...] | None, entry: str) -> str:
    return str(_IrEmitter(k, KernelView(k, size_args), entry).module)


def emit_ir_ptx(k: Kernel, size_args: tuple[str, ...] | None, entry: str) -> str:
    ptx = llvm_to_ptx(emit_ir_llvm(k, size_args, entry), k.target)
    lay = k.attr("simt_layout")
    return launch_bounds(ptx, entry, lay.threads, lay.occupancy)


class _IrEmitter(_Emitter):
    def __init__(self, k: Kernel, view: KernelView, entry: str):
        self.kernel = k
        super().__init__(view, entry, k.target)

    def _run_program(self, fn) -> None:
        starts = loop_starts(self.kernel)
        for op in self.kernel.body.ops:
            if op.results and op.results[0] in starts:
                continue
            if op.name == "for":
                self._walk(op, fn)
                continue
            value = self._op(op_view(self.kernel, op))
            if op.results:
                self.values[op.results[0]] = value

    def _walk(self, loop: Op, fn) -> None:
        self._emit_loop(loop_body(self.kernel, loop), fn)
        for result, last in zip(loop.results, loop.body.ops[-1].args):
            self.values[result] = self.values[last]
