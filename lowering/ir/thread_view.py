"""A thread-level SIMT kernel (`simt_threads.py`) as its executors read it.

The NVPTX emitter and the CPU executor of SIMT kernels handle one op at a time by its
name, result id, argument ids, axes, dtype and attributes; `op_view` gives them those
of an IR op (the first result's type; a store's axes from its `axes` attribute), and
`KernelView` what they read of the kernel: the thread layout, buffers, scalars, the
size arguments, the shared-memory words, and each value's defining op.
"""
from __future__ import annotations

from plait.dsl.select import is_pair

from ..tileir.tile import TileOp
from .nodes import Kernel, Op

PAIR_STEPS = ("reduce_local", "reduce_shfl", "smem_put", "smem_fold", "reduce_done")


def pair_step(op: TileOp) -> bool:
    """Whether a thread-level op is a step of a pair reduction, whose state is (value,
    index): its `value` names the value's dtype (reduce_done keeps the tile op's
    attributes, hence no `op`)."""
    return op.op in PAIR_STEPS and (is_pair(op.attr("op")) or (
        op.op == "reduce_done" and op.attr("value") is not None))


def op_view(k: Kernel, op: Op) -> TileOp:
    if op.results:
        t = k.type_of(op.results[0])
        return TileOp(op.results[0], op.name, op.args, t.axes, t.dtype, op.attrs)
    attrs = tuple((key, v) for key, v in op.attrs if key != "axes")
    return TileOp(-1, op.name, op.args, op.attr("axes", ()), None, attrs)


def loop_body(k: Kernel, loop: Op) -> list[TileOp]:
    """The ops of the `for` over the walked axis, each `accumulate` seen as the loop
    accumulator it is (its carried value is the executor's own running value)."""
    body = []
    for op in loop.body.ops:
        if op.name == "yield":
            continue
        view = op_view(k, op)
        if op.name == "accumulate":
            view = TileOp(view.id, "loop_acc", op.args[1:], view.axes, view.dtype, view.attrs)
        body.append(view)
    return body


def loop_starts(k: Kernel) -> set[int]:
    """The values a `for` starts its accumulators from: executors start them at the
    reduction's identity themselves."""
    return {a for op in k.body.ops if op.name == "for" for a in op.args}


class KernelView:
    def __init__(self, k: Kernel, size_args: tuple[str, ...] | None = None):
        self.name = k.name
        self.layout = k.attr("simt_layout")
        self.buffers = k.buffers
        self.scalars = k.scalars
        self.size_args = size_args if size_args is not None else k.attr("size_args")
        self.smem_words = k.attr("smem_words")
        self.acc_words = k.attr("acc_words")
        self.stage_words = k.attr("stage_words")
        self.ops: dict[int, TileOp] = {}       # value id -> the op that defines it
        self.in_order: list[TileOp] = []       # every op, loop bodies where they stand
        for op in _every(k.body.ops):
            self.in_order.append(op_view(k, op))
            for i, r in enumerate(op.results):   # a `for` defines one value per accumulator
                t = k.type_of(r)
                self.ops[r] = self.in_order[-1] if i == 0 else \
                    TileOp(r, op.name, op.args, t.axes, t.dtype, op.attrs)

    @property
    def shared_bytes(self) -> int:
        return 4 * (self.smem_words + self.acc_words + self.stage_words)

    def buffer(self, name: str):
        return next(b for b in self.buffers if b.name == name)


def _every(ops):
    for op in ops:
        yield op
        if op.body is not None:
            yield from _every(op.body.ops)
