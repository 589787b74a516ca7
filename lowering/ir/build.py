"""The one builder: every kernel the pipeline lowers, in the IR, with the layouts its path
gives its values today.

`build_kernel(plan)` takes what `pipeline.lower` planned for one kernel (a SIMT kernel's
thread layout, a GemmProgram or a StreamKernel) and writes its tile program as IR ops, turning the flat
`loop ... yield` of loop programs into a `for` with a body, and giving each value a layout
(`layout_simt.py`, `layout_tc.py`). A SIMT kernel that walks an axis index by index gets
that walk as a `for` too, its reductions over the axis carried through it.
"""
from __future__ import annotations

from plait.dsl.dtypes import DType
from plait.dsl.cumulative import is_scan
from plait.dsl.select import is_pair

from ..gemm.plan import GemmProgram
from ..graph.layout import Layout
from ..graph.kernel_plan import REDUCE_OPS
from ..stream.plan import StreamKernel
from ..target import get_target
from ..tileir.tile import TileOp, TileProgram
from ..tileir.tile_stream import loop_body
from .layout_simt import SimtLayouts, simt_loop
from .layout_tc import GemmLayouts, StreamLayouts
from .nodes import Builder, Kernel, Type
from .simt_order import cluster_reductions
from . import simt_reload

def build_kernel(plan, tile: TileProgram, target: str, sizes: dict[str, int]) -> Kernel:
    """The tile-level IR of one kernel: `plan` what `pipeline.lower` planned for it (for a
    SIMT kernel, its thread layout), `tile` its tile program, `sizes` every axis's extent
    (derived ones included)."""
    if isinstance(plan, Layout):
        layouts, path = SimtLayouts(tile, plan), "simt"
    elif isinstance(plan, GemmProgram):
        tile, layouts, path = plan.program, GemmLayouts(plan, sizes), "gemm"
    elif isinstance(plan, StreamKernel):
        tile, layouts, path = plan.tile, StreamLayouts(plan, sizes), "stream"
    else:
        raise TypeError(f"no IR builder for {type(plan).__name__}")
    b = Builder()
    ops = list(tile.ops)
    attrs = tuple(layouts.attrs)
    if path == "simt":      # reductions level by level, as the thread-level pass groups them
        ops = cluster_reductions(ops)
        if simt_reload.enabled() and simt_reload.would_spill(ops, plan, get_target(target)):
            reloaded = simt_reload.reload_rows(ops, plan)
            # The emitter makes such a kernel's loads where they are read (nvptx/pulled.py).
            attrs += (("rows_reloaded", True),) if reloaded != ops else ()
            ops = reloaded
    if getattr(layouts, "walk", None) is not None:
        ops = simt_loop(ops, layouts.walk, layouts)
    translate(b, ops, layouts, {})
    source = tile if path == "simt" else plan     # what names the buffers and scalars
    return Kernel(source.name, target, path, tuple(source.buffers), tuple(source.scalars),
                  tuple(layouts.grid), layouts.threads, tuple(sorted(b.types.items())),
                  b.block(), attrs)


def translate(b: Builder, ops: list[TileOp], layouts, value: dict[int, int]) -> None:
    """Append `ops` (a tile program's, or a loop body's) to `b`; `value` maps tile op ids
    to IR values and grows as ops are written."""
    i = 0
    while i < len(ops):
        op = ops[i]
        if op.op == "loop":
            body, yielded = loop_body(ops, op.id)
            _for(b, op, body, yielded, ops, layouts, value)
            i = ops.index(yielded) + 1
            continue
        if op.op != "result":       # a loop's results are its `for`'s, mapped by _for
            _one(b, op, layouts, value)
        i += 1


def _type(op: TileOp, layouts) -> Type:
    return Type(op.axes, op.dtype, layouts.of(op))


def _for(b: Builder, loop: TileOp, body, yielded: TileOp, ops, layouts, value) -> None:
    carried = sorted((o for o in body if o.op == "carried" and o.attr("loop") == loop.id),
                     key=lambda o: o.attr("index"))
    b.open()
    params = []
    for c in carried:
        params.append(b.value(_type(c, layouts)))
        value[c.id] = params[-1]
    translate(b, [o for o in body if o.op != "carried" or o.attr("loop") != loop.id],
              layouts, value)
    b.op("yield", tuple(value[a] for a in yielded.args))
    block = b.close(tuple(params))
    attrs = {k: v for k, v in loop.attrs}
    for_op = b.for_op(tuple(value[a] for a in loop.args), block,
                      tuple(_type(c, layouts) for c in carried), **attrs)
    for o in ops:
        if o.op == "result" and o.attr("loop") == loop.id:
            value[o.id] = for_op.results[o.attr("index")]


def _one(b: Builder, op: TileOp, layouts, value: dict[int, int]) -> None:
    args = tuple(value[a] for a in op.args)
    attrs = dict(op.attrs)
    attrs.pop("region", None)
    if op.op == "dot":
        a, bb = (layouts.operand(b, args[i], role, op) for i, role in ((0, "a"), (1, "b")))
        args = (a, bb) + args[2:]
    if op.op == "scatter_add":      # no result to carry its axes: it adds over these
        attrs["over"] = op.axes
    if op.op in REDUCE_OPS and is_pair(op.op):
        value[op.id] = _pair_reduce(b, op, args, layouts, attrs)
    elif op.op in REDUCE_OPS:
        value[op.id] = b.emit("reduce", args, _type(op, layouts), combine=op.op, **attrs)
    elif op.op == "scan_part":      # one part of a generic scan's state, rounded
        part = value[op.args[0]][op.attr("index")]
        value[op.id] = part if op.attr("round") is None else \
            b.emit("round", (part,), _type(op, layouts), round=op.attr("round"))
    elif op.op == "scan":           # a tuple state: one result per part
        types = tuple(Type(op.axes, d, layouts.of(op)) for d in op.attr("dtypes"))
        value[op.id] = b.op("scan", args, types, **attrs).results
    elif op.op == "sort":           # a sorted row: (values, int32 indices)
        types = (_type(op, layouts), Type(op.axes, DType.INT32, layouts.of(op)))
        value[op.id] = b.op("sort", args, types, **attrs).results
    elif op.op == "sort_part":
        value[op.id] = value[op.args[0]][op.attr("index")]
    elif is_scan(op.op):           # keeps its axis: a scan along it, one block per row
        value[op.id] = b.emit("scan", args, _type(op, layouts), combine=op.op, **attrs)
    elif op.op in ("store", "atomic_add", "scatter_add", "barrier"):
        b.op(op.op, args, None, **attrs)
    else:
        value[op.id] = b.emit(op.op, args, _type(op, layouts), **attrs)


def _pair_reduce(b: Builder, op: TileOp, args, layouts, attrs) -> int:
    """argmax as one reduce of a tuple state: args (value, iota of the axis), results
    (the extreme value, its first index); the tile program keeps the index."""
    axis = op.attr("axis")
    source = TileOp(op.id, "iota", (), (axis,), DType.INT32, (("axis", axis),))
    iota = b.emit("iota", (), _type(source, layouts), axis=axis)
    held = attrs.pop("value")
    results = (Type(op.axes, held, layouts.of(op)), _type(op, layouts))
    return b.op("reduce", args + (iota,), results, combine=op.op, **attrs).results[1]


def build_program(threads, tiles, target: str, sizes: dict[str, int]) -> tuple[Kernel, ...]:
    """The tile-level IR of every kernel `pipeline.lower` made: `threads` and `tiles` as in
    its `Lowered` (a SIMT kernel's tile level is rebuilt from the thread layout its
    thread-level kernel keeps), `sizes` every axis's extent."""
    return tuple(build_kernel(t.attr("simt_layout") if isinstance(t, Kernel) else t, tile,
                              target, sizes) for t, tile in zip(threads, tiles))
