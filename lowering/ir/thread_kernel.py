"""A SIMT kernel at the thread level, in the IR: what the NVPTX emitter reads.

`build.build_kernel` writes a SIMT kernel's tile program with blocked layouts, its
reductions as `reduce` ops. Below it, each reduction is a sequence of thread-level steps
(`reduce_local` in a thread's fragment, `reduce_shfl` across lanes, `barrier` /
`smem_put` / `smem_fold` across warps, `reduce_done`), loads and stores carry their vector
width, and a walked axis is a `for` whose carried values are the accumulators of the
reductions over it (`accumulate`: fold one index in; attribute `shared` when the
accumulator lives in shared memory). Today `tileir/thread.py` makes these steps and
`thread_kernel` writes its program in this form; the emitter (`nvptx/ir_simt.py`) walks
the result. The kernel's thread layout (`graph/layout.Layout`: grid, row and column maps,
loop, prefetch) is the kernel attribute `simt_layout`, its shared-memory words
`smem_words`, `acc_words`, `stage_words`.

Steps that only order others (`barrier`, `smem_put`) give a token value their followers
take as an argument, so program order is data flow here as everywhere in the IR.
"""
from __future__ import annotations

from ..tileir.thread import ThreadProgram
from ..tileir.tile import TileOp
from .layout_simt import SimtLayouts, identity
from .nodes import Builder, Kernel, Type

# Thread-program ops with no value: they take `axes` as an attribute (a scatter adds
# over them).
_NO_RESULT = ("store", "atomic_add", "scatter_add")


def thread_kernel(prog: ThreadProgram, target: str) -> Kernel:
    """The IR of `prog`: its ops in order, its `pre`/`loop`/`post` regions as the ops
    before, inside and after one `for`."""
    layouts = SimtLayouts(prog, {})
    b = Builder()
    value: dict[int, int] = {}
    region = {op.id: op.attr("region", "pre") for op in prog.ops}
    for op in prog.ops:
        if region[op.id] == "pre":
            _one(b, op, layouts, value)
    if prog.layout.loop is not None:
        _walk(b, [op for op in prog.ops if region[op.id] == "loop"], prog, layouts, value)
    for op in prog.ops:
        if region[op.id] == "post":
            _one(b, op, layouts, value)
    attrs = (("acc_words", prog.acc_floats), ("simt_layout", prog.layout),
             ("smem_words", prog.smem_floats), ("stage_words", prog.stage_floats))
    return Kernel(prog.name, target, "simt", tuple(prog.buffers), tuple(prog.scalars),
                  tuple(prog.layout.grid), prog.layout.threads,
                  tuple(sorted(b.types.items())), b.block(), attrs)


def _attrs(op: TileOp) -> dict:
    attrs = dict(op.attrs)
    attrs.pop("region", None)
    return attrs


def _type(op: TileOp, layouts) -> Type:
    return Type(op.axes, op.dtype, layouts.of(op))


def _one(b: Builder, op: TileOp, layouts, value: dict[int, int]) -> None:
    args = tuple(value[a] for a in op.args)
    if op.op in _NO_RESULT:
        b.op(op.op, args, None, axes=op.axes, **_attrs(op))
    else:
        value[op.id] = b.emit(op.op, args, _type(op, layouts), **_attrs(op))


def _walk(b: Builder, body: list[TileOp], prog: ThreadProgram, layouts, value) -> None:
    """The loop region as a `for` over the walked axis: each `loop_acc` a carried value
    starting at its reduction's identity, folded by `accumulate`."""
    accs = [op for op in body if op.op == "loop_acc"]
    starts = tuple(b.emit("const", (), Type((), op.dtype), value=identity(op.attr("op"),
                                                                         op.dtype))
                   for op in accs)
    b.open()
    params = tuple(b.value(_type(op, layouts)) for op in accs)
    carried = dict(zip((op.id for op in accs), params))
    folded = []
    for op in body:
        if op.op == "loop_acc":
            args = (carried[op.id],) + tuple(value[a] for a in op.args)
            value[op.id] = b.emit("accumulate", args, _type(op, layouts), **_attrs(op))
            folded.append(value[op.id])
        else:
            _one(b, op, layouts, value)
    b.op("yield", tuple(folded))
    loop = prog.layout.loop
    for_op = b.for_op(starts, b.close(params), tuple(_type(op, layouts) for op in accs),
                      axis=loop.axis, step=1, span=loop.tile)
    # After the loop, an accumulator's id names its final value.
    for op, result in zip(accs, for_op.results):
        value[op.id] = result
