"""Stage 4: the thread program — the tile program with a layout, as each thread runs it.

Every value is a per-thread fragment of shape `layout.fragment(axes)`. Tile
reductions become three explicit steps:

    reduce_local  combine the thread's own fragment along the axis (out-of-bounds
                  elements replaced by the reduction's identity)
    reduce_shfl   butterfly exchange over the axis's thread-index bits inside a warp
    barrier, smem_put, barrier, smem_fold
                  the remaining bits (other warps) through shared memory; reductions
                  independent of each other share one such exchange

A reduction over the axis the block walks in a loop is one `loop_acc`: an
accumulator carried through the loop, read after it. With a loop, every op
carries `region`: 'pre' (once, before), 'loop' (per index) or 'post'.

Loads and stores carry `vector` (elements per memory instruction, 1 when the
buffer is not contiguous along the column axis or alignment is not known).
`plait.lowering.cpu.emulate` executes this program and `nvptx.backend` compiles it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.cumulative import is_scan
from plait.dsl.select import is_pair

from ..artifact import Buffer
from ..graph.kernel_plan import REDUCE_OPS
from ..graph.layout import Layout
from ..limits import shared_limit
from ..target import DEFAULT_TARGET
from .rotate_load import rotated_vector
from .scan import expand_scan
from .tile import TileOp, TileProgram


def smem_words(dtype: DType) -> int:
    """4-byte shared-memory words one register value of `dtype` takes (an int64: 2)."""
    return 2 if dtype.itemsize == 8 else 1


@dataclass(frozen=True)
class ThreadProgram:
    name: str
    axes: tuple[str, ...]
    layout: Layout
    buffers: tuple[Buffer, ...]
    scalars: tuple
    ops: tuple[TileOp, ...]
    smem_floats: int              # shared-memory scratch of reductions, in 4-byte words
    acc_floats: int = 0           # loop accumulators kept in shared memory, after it
    stage_floats: int = 0         # rings of rows copied ahead (prefetch_into: shared), last

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"kernel {self.name} has no buffer {name!r}")

    @property
    def shared_bytes(self) -> int:
        return 4 * (self.smem_floats + self.acc_floats + self.stage_floats)

    @property
    def size_args(self) -> tuple[str, ...]:
        """Axes whose extents the kernel takes as int32 arguments, in order."""
        names = set(self.axes)
        for b in self.buffers:
            names.update(b.axes)
        names.update(a for a, _ in self.layout.partial_axes)
        names.update(op.attr("axis") for op in self.ops if op.op == "size")
        return tuple(sorted(names))

    def text(self) -> str:
        lines = [f"thread program {self.name} over [{','.join(self.axes)}]",
                 "  " + self.layout.text(), f"  shared {self.shared_bytes} bytes"]
        for op in self.ops:
            frag = "x".join(str(d) for d in self.layout.fragment(op.axes))
            args = " ".join(f"%{a}" for a in op.args)
            attrs = " ".join(f"{k}={v}" for k, v in op.attrs)
            body = " ".join(x for x in (op.op, args, attrs) if x)
            lines.append(f"  %{op.id} = {body} : {op.dtype}<{frag}>[{','.join(op.axes)}]")
        return "\n".join(lines) + "\n"


PAIR_STEPS = ("reduce_local", "reduce_shfl", "smem_put", "smem_fold", "reduce_done")


def pair_step(op: TileOp) -> bool:
    """Whether a thread-program op is a step of a pair reduction, whose state is (value,
    index): its `value` names the value's dtype (reduce_done keeps the tile op's
    attributes, hence no `op`)."""
    return op.op in PAIR_STEPS and (is_pair(op.attr("op")) or (
        op.op == "reduce_done" and op.attr("value") is not None))


def _thread_bits(layout: Layout, axis: str) -> tuple[int, ...]:
    m = layout.map_of(axis)
    if m is None:
        return ()
    return tuple(range(m.shift, m.shift + m.threads.bit_length() - 1))


def _vector_for(buffer: Buffer, layout: Layout, aligned: bool, sizes: dict[str, int]) -> int:
    """Elements per memory instruction: the layout's vector, split to at most 16 bytes,
    or 1 when rows of this buffer may start unaligned."""
    col = layout.col
    if not aligned or col is None or not buffer.axes or buffer.axes[-1] != col.axis:
        return 1
    vec = col.vector
    while vec > 1 and (vec * buffer.dtype.itemsize > 16 or sizes[col.axis] % vec):
        vec //= 2
    return vec


def build_thread_program(tile: TileProgram, layout: Layout, sizes: dict[str, int],
                         aligned: bool, target: str = DEFAULT_TARGET) -> ThreadProgram:
    ops: list[TileOp] = []
    remap: dict[int, int] = {}
    smem = 0

    def emit(op: TileOp, args, **extra) -> int:
        attrs = tuple(sorted(dict(op.attrs, **extra).items()))
        ops.append(TileOp(len(ops), op.op, tuple(args), op.axes, op.dtype, attrs))
        return len(ops) - 1

    buffers = {b.name: b for b in tile.buffers}
    tile_ops = cluster_reductions(list(tile.ops))
    tile_ops_by_id = {op.id: op for op in tile.ops}
    i = 0
    while i < len(tile_ops):
        op = tile_ops[i]
        args = [remap[a] for a in op.args]
        if op.op in ("load", "store"):
            vec = _vector_for(buffers[op.attr("buffer")], layout, aligned, sizes)
            if op.attr("rotate") is not None:
                vec = rotated_vector(op.attr("rotate"), buffers[op.attr("buffer")], layout,
                                     vec, sizes)
            if op.attr("take") is not None and layout.col is not None and \
                    layout.col.axis in tile_ops_by_id[op.args[0]].axes:
                vec = 1       # the row changes along the vector: one element at a time
            if op.attr("view") is not None:
                vec = 1       # remapped indices: one element at a time
            remap[op.id] = emit(op, args, vector=vec)
        elif op.op in REDUCE_OPS:
            group = [op]
            while (i + len(group) < len(tile_ops)
                   and _same_round(tile_ops[i + len(group)], op, remap, layout)):
                group.append(tile_ops[i + len(group)])
            results, words = _expand_reductions(group, [[remap[a] for a in g.args]
                                                         for g in group], layout, ops)
            for g, r in zip(group, results):
                remap[g.id] = r
            smem = max(smem, words)
            i += len(group)
            continue
        elif is_scan(op.op):
            remap[op.id], words = expand_scan(op, args, layout, ops, tile.name)
            smem = max(smem, words)
        else:
            remap[op.id] = emit(op, args)
        i += 1
    acc_floats = stage_floats = 0
    if layout.loop is not None:
        ops = _place_in_loop(ops, layout.loop.axis, buffers, tile.name)
        limit = shared_limit(target)
        in_shared, words = _accumulators_to_shared(ops, layout, smem)
        # Accumulators too many for shared memory (rows of tens of thousands) stay in
        # registers, where ptxas may spill some to local memory: slower, but it runs.
        if 4 * (smem + words) <= limit:
            ops, acc_floats = in_shared, words
        if layout.prefetch_into == "shared":
            staged, words = _stage_streamed_loads(ops, layout, buffers, smem + acc_floats)
            # A ring that does not fit beside the accumulators leaves the rows in flight
            # in registers instead.
            if 4 * (smem + acc_floats + words) <= limit:
                ops, stage_floats = staged, words
    return ThreadProgram(tile.name, tile.axes, layout, tile.buffers, tile.scalars,
                         tuple(ops), smem, acc_floats, stage_floats)


# Loop accumulators of more elements per thread than this live in shared memory: a
# normalization's dw and db over a whole row would otherwise take most registers and
# leave room for one block per SM.
MAX_REGISTER_ACCUMULATORS = 8


def _accumulators_to_shared(ops: list[TileOp], layout: Layout, scratch: int):
    accs = [op for op in ops if op.op == "loop_acc"]
    per_thread = sum(int(np.prod(layout.fragment(op.axes))) for op in accs)
    if per_thread <= MAX_REGISTER_ACCUMULATORS:
        return ops, 0
    slot, out = -(-scratch // 4) * 4, []     # 16-byte aligned, for vector accesses
    for op in ops:
        if op.op == "loop_acc":
            out.append(op.with_attrs(shared=slot))
            slot += int(np.prod(layout.fragment(op.axes))) * layout.threads * smem_words(op.dtype)
        else:
            out.append(op)
    return out, slot - scratch          # the words past the scratch, padding included


def _stage_streamed_loads(ops: list[TileOp], layout: Layout, buffers, start: int):
    """Give each load the loop streams a ring of prefetch + 1 rows in shared memory
    (attribute `staged`: its first word). Every thread copies its own vectors with
    cp.async and reads back only those, so the ring needs no barrier."""
    slot = -(-start // 4) * 4            # 16-byte aligned
    out = []
    for op in ops:
        buf = buffers[op.attr("buffer")] if op.op == "load" else None
        if buf is None or op.attr("region") != "loop" or layout.loop.axis not in buf.axes \
                or op.attr("rotate") is not None or op.attr("take") is not None \
                or op.attr("view") is not None:
            # a rotated row is read by registers; a taken one needs its index first
            out.append(op)
            continue
        if op.attr("vector") * buf.dtype.itemsize not in (4, 8, 16):
            # cp.async copies 4, 8 or 16 bytes: rows too narrow or misaligned for such
            # vectors (an odd row length) keep their prefetch in registers.
            out.append(op)
            continue
        out.append(op.with_attrs(staged=slot))
        slot += (layout.prefetch + 1) * staged_row_words(layout, buf)
    return out, slot - start


def staged_row_words(layout: Layout, buf: Buffer) -> int:
    """Words one row of `buf` takes in a ring slot: every thread's fragment of it."""
    return int(np.prod(layout.fragment(buf.axes))) * buf.dtype.itemsize // 4 * layout.threads


_ORDER = {"pre": 0, "loop": 1, "post": 2}


def _place_in_loop(ops: list[TileOp], axis: str, buffers, name: str) -> list[TileOp]:
    """Split the program around the loop over `axis`: what does not vary with it runs
    once before (`pre`), per-index work runs in the loop, and what reads the loop's
    accumulators runs after (`post`). Op ids are renumbered in the new order."""
    place: dict[int, str] = {}
    ready: dict[int, str] = {}
    for op in ops:
        after = max((ready[a] for a in op.args), key=_ORDER.get, default="pre")
        touches = axis in op.axes or (op.op in ("load", "store") and op.attr("view") is None
                                      and axis in buffers[op.attr("buffer")].axes)
        where = "loop" if touches or op.op == "loop_acc" else after
        if where == "loop" and after == "post":
            raise PlaitError(f"kernel {name}: a value computed after the loop over {axis} is "
                             f"needed inside it; schedule {axis} with threads or tile 1")
        place[op.id] = where
        ready[op.id] = "post" if op.op == "loop_acc" else where
    ordered = sorted(ops, key=lambda o: (_ORDER[place[o.id]], o.id))
    new_id = {o.id: i for i, o in enumerate(ordered)}
    return [TileOp(new_id[o.id], o.op, tuple(new_id[a] for a in o.args), o.axes, o.dtype,
                   tuple(sorted(dict(o.attrs, region=place[o.id]).items())))
            for o in ordered]


def _same_round(candidate: TileOp, first: TileOp, remap, layout: Layout) -> bool:
    """Reductions that can share one round of shuffles and one shared-memory exchange."""
    return (candidate.op in REDUCE_OPS
            and candidate.attr("axis") == first.attr("axis")
            and candidate.attr("partial") == first.attr("partial")
            and (layout.loop is None or first.attr("axis") != layout.loop.axis)
            and all(a in remap for a in candidate.args))


def cluster_reductions(ops: list[TileOp]) -> list[TileOp]:
    """Reorder so that reductions independent of each other stand together.

    An op's level counts the reductions on its longest path from the inputs. Ops run
    level by level, each level's reductions last, so the derived LayerNorm backward
    reduces sum(dy*w*xc) and sum(xc*xc) in one round (one exchange, two barriers)
    instead of two. Loads keep the place of their first user (registers).
    """
    level: dict[int, int] = {}
    for op in ops:
        level[op.id] = max((level[a] + (ops[a].op in REDUCE_OPS) for a in op.args),
                           default=0)
    users: dict[int, list[int]] = {}
    for op in ops:
        for a in op.args:
            users.setdefault(a, []).append(op.id)
    for op in ops:
        if op.op == "load" and op.id in users:
            level[op.id] = min(level[u] for u in users[op.id])
    # A converted load follows its load.
    for op in ops:
        if op.op == "convert" and op.args and ops[op.args[0]].op == "load":
            level[op.id] = level[op.args[0]]
    order = sorted(ops, key=lambda o: (level[o.id], o.op in REDUCE_OPS, o.id))
    return order


def _expand_reductions(group: list[TileOp], group_args, layout: Layout,
                       ops: list[TileOp]) -> tuple[list[int], int]:
    """Lower reductions over one axis together; returns their result ids and the
    shared-memory words the exchange needs."""
    first = group[0]
    axis = first.attr("axis")

    def keep(op: TileOp) -> tuple[str, ...]:
        # Each reduction of the group keeps its own axes: reductions over one axis of
        # values of different ranks ([B,M] and [B,M,N] over M) share a round.
        return tuple(a for a in op.axes if a != op.attr("partial"))

    def emit(name, args, op, **attrs) -> int:
        # a pair reduction's steps carry (value, index): `value` is the value's dtype
        base = {"op": op.op, "axis": axis, "value": op.attr("value")}
        base.update(attrs)
        ops.append(TileOp(len(ops), name, tuple(args), keep(op), op.dtype,
                          tuple(sorted((k, v) for k, v in base.items() if v is not None))))
        return len(ops) - 1

    if layout.loop is not None and axis == layout.loop.axis:
        if any(is_pair(op.op) for op in group):
            raise PlaitError(f"{first.op} over {axis}: the block walks {axis} index by index "
                             "(a grid tile and no threads), and a (value, index) loop "
                             f"accumulator is not lowered yet; give {axis} threads instead")
        value = emit("loop_acc", group_args[0][:1], first)
        ops.append(TileOp(len(ops), "reduce_done", (value,), first.axes, first.dtype,
                          first.attrs))
        return [len(ops) - 1], 0
    values = [emit("reduce_local", args[:1], op) for op, args in zip(group, group_args)]
    bits = _thread_bits(layout, axis)
    warp_bits = tuple(b for b in bits if b < 5)
    smem_bits = tuple(b for b in bits if b >= 5)
    if warp_bits:
        values = [emit("reduce_shfl", (v,), op, lanes=tuple(1 << b for b in warp_bits))
                  for v, op in zip(values, group)]
    words = 0
    if smem_bits:
        # One exchange for the whole group: a barrier (earlier readers are done), every
        # thread's partials in, a barrier, each thread folds its warps' partials.
        before = emit("barrier", values, first)
        slots = []
        for v, op in zip(values, group):
            per_thread = int(np.prod(layout.fragment(keep(op))))
            held = op.attr("value") or op.dtype      # a pair's value slot: its value's
            slot, words = words, words + layout.threads * per_thread * smem_words(held)
            index_slot = None
            if is_pair(op.op):     # two slots: the values, then the int32 indices
                index_slot, words = words, words + layout.threads * per_thread
            slots.append((slot, index_slot))
            emit("smem_put", (v, before), op, slot=slot, index_slot=index_slot)
        after = emit("barrier", [len(ops) - 1], first)
        values = [emit("smem_fold", (after,), op, slot=slot, index_slot=index_slot,
                       bits=smem_bits) for op, (slot, index_slot) in zip(group, slots)]
    results = []
    for v, op in zip(values, group):
        # The reduced value, with the partial axis (if any) and the op's rounding.
        ops.append(TileOp(len(ops), "reduce_done", (v,), op.axes, op.dtype, op.attrs))
        results.append(len(ops) - 1)
    return results, words


def refuse_sort(prog: ThreadProgram) -> None:
    """The thread-program path (PLAIT_IR_SIMT=0) has no sort: its ops stay tile ops here,
    which only the thread-level IR lowers (`ir/simt_threads.py`)."""
    if any(op.op == "sort" for op in prog.ops):
        raise PlaitError(f"kernel {prog.name}: sort is lowered through the thread-level IR "
                         "only; unset PLAIT_IR_SIMT=0 (the thread-program path has no sort)")
