"""Layouts of a SIMT kernel's values, and its index-by-index walk as a loop.

A SIMT kernel spreads one blocked layout over at most a row and a column axis
(`graph/layout.py`); a value over some of the kernel's axes holds that layout restricted
to them (the threads of a missing axis hold copies). An axis the block walks index by
index (`Layout.loop`) becomes a loop in the tile-IR vocabulary (`loop`, `carried`,
`yield`, `result`), which `build.translate` turns into a `for`: what does not vary along
the axis runs before it, a reduction over the axis is carried through it (its running
value combined with each index's), and what reads such a reduction runs after it.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.node import OPS

from ..graph.kernel_plan import REDUCE_OPS
from ..graph.layout import Layout
from ..tileir.tile import TileOp, TileProgram
from .layouts import Blocked, BlockedDim


def blocked_dims(lay) -> tuple[BlockedDim, ...]:
    """The row and column maps of a SIMT kernel's thread layout (`graph/layout.py`)."""
    return tuple(BlockedDim(m.axis, m.reps, m.threads, m.vector, m.shift)
                 for m in (lay.row, lay.col) if m is not None)


class SimtLayouts:
    """The layouts of tile program `tile` spread by thread layout `lay`. The shared memory
    a SIMT kernel needs is the thread-level pass's to say (its exchanges, accumulators
    and rings), so the tile level carries no such attribute."""
    def __init__(self, tile: TileProgram, lay: Layout):
        self.buffers = {b.name: b for b in tile.buffers}
        self.blocked = Blocked(blocked_dims(lay), lay.threads)
        self.grid = lay.grid
        self.threads = lay.threads
        self.walk = lay.loop
        self.partial = dict(lay.partial_axes)
        self.attrs = ()
        self.name = tile.name

    def of(self, op: TileOp):
        kept = tuple(d for d in self.blocked.dims if d.axis in op.axes)
        if not op.axes or not kept:
            return None
        return Blocked(kept, self.blocked.threads)

    def operand(self, b, value, role, op):
        raise PlaitError(f"kernel {self.name}: a product on tensor cores in a SIMT kernel")


_ORDER = {"pre": 0, "loop": 1, "post": 2}


def simt_loop(ops: list[TileOp], walk, layouts: SimtLayouts) -> list[TileOp]:
    """`ops` with the walk over `walk.axis` written as a loop (see the module's doc)."""
    axis = walk.axis
    place, ready = {}, {}
    for op in ops:
        after = max((ready[a] for a in op.args), key=_ORDER.get, default="pre")
        touches = axis in op.axes or (op.op in ("load", "store", "atomic_add", "scatter_add")
                                      and op.attr("view") is None
                                      and axis in layouts.buffers[op.attr("buffer")].axes)
        carried = op.op in REDUCE_OPS and op.attr("axis") == axis
        where = "loop" if touches or carried else after
        if where == "loop" and after == "post":
            raise PlaitError(f"kernel {layouts.name}: a value computed after the loop over "
                             f"{axis} is needed inside it; schedule {axis} with threads or "
                             "tile 1")
        place[op.id] = where
        ready[op.id] = "post" if carried else where
    reductions = [op for op in ops if op.op in REDUCE_OPS and op.attr("axis") == axis]
    next_id = iter(range(max((o.id for o in ops), default=0) + 1, 1 << 30))
    made = lambda name, args, axes, dtype, **attrs: TileOp(  # noqa: E731
        next(next_id), name, tuple(args), tuple(axes), dtype,
        tuple(sorted((k, v) for k, v in attrs.items() if v is not None)))
    pre = [op for op in ops if place[op.id] == "pre"]
    inits = [made("const", (), (), r.dtype, value=identity(r.op, r.dtype))
             for r in reductions]
    partials = {r.attr("partial") for r in reductions} - {None}
    if len(partials) > 1:
        raise PlaitError(f"kernel {layouts.name}: reductions over {axis} into different "
                         f"partial axes {sorted(partials)}")
    split = (partials.pop(), walk.tile) if partials else None
    span = walk.tile if split is None and dict(layouts.grid).get(axis) else None
    loop = made("loop", [i.id for i in inits], (), DType.FP32, axis=axis, step=1,
                split=split, span=span)
    body, results = [], {}
    carried = {r.id: made("carried", (), r.axes, r.dtype, loop=loop.id, index=i)
               for i, r in enumerate(reductions)}
    body += carried.values()
    yielded = {}
    for op in ops:
        if place[op.id] != "loop":
            continue
        if op.id in carried:      # this index's value folded into the running one
            step = TileOp(op.id, op.op, op.args, op.axes, op.dtype,
                          tuple((k, v) for k, v in op.attrs if k not in ("partial", "round")))
            both = made(OPS[op.op].combine, (carried[op.id].id, op.id), op.axes, op.dtype)
            body += [step, both]
            yielded[op.id] = both.id
        else:
            body.append(op)
    end = made("yield", [yielded[r.id] for r in reductions], (), DType.FP32, loop=loop.id)
    # After the loop, in program order: each reduction's result where the reduction
    # stood, the ops that read them after it.
    post = []
    index = {r.id: i for i, r in enumerate(reductions)}
    for op in ops:
        if op.id in index:
            res = made("result", (), op.axes, op.dtype, loop=loop.id, index=index[op.id])
            results[op.id] = res.id
            post.append(res)
            if op.attr("round") is not None:
                post.append(made("round", (res.id,), op.axes, op.dtype, round=op.attr("round")))
                results[op.id] = post[-1].id
        elif place[op.id] == "post":
            post.append(_renamed(op, results))
    return pre + inits + [loop] + body + [end] + post


def _renamed(op: TileOp, results: dict[int, int]) -> TileOp:
    return TileOp(op.id, op.op, tuple(results.get(a, a) for a in op.args), op.axes,
                  op.dtype, op.attrs)


def identity(kind: str, dtype: DType):
    """A running reduction's start: 0 for sum, the lowest or highest value for max or min
    (an integer has no infinity)."""
    name = OPS[kind].identity
    if name == "zero":
        return 0.0 if dtype.is_float else 0
    if dtype.is_float:
        return float("-inf") if name == "lowest" else float("inf")
    info = np.iinfo(dtype.numpy) if dtype != DType.BOOL else None
    if info is None:
        return name == "highest"
    return int(info.min if name == "lowest" else info.max)
