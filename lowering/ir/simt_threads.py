"""Pass: a SIMT kernel from its tile-level IR (`build.build_kernel`) to its thread-level
IR, the form that `nvptx/backend.py` emits and `cpu/emulate.run_thread_kernel` runs.

- Loads and stores get their vector width: the layout's, split to at most 16 bytes, 1 where
  rows may start unaligned, halved for a rotated half, 1 for a take whose row changes along
  the vector.
- A reduce over a spread axis becomes `reduce_local` (the thread's own fragment), then
  `reduce_shfl` over the axis's lanes within a warp, then (threads of the axis in other
  warps) a `barrier`, `smem_put`, `barrier`, `smem_fold`, and `reduce_done`. Consecutive
  reduces over one axis that do not read each other share one exchange (the builder
  orders a kernel's reductions level by level, `simt_order.cluster_reductions`).
- In the `for` over a walked axis, a reduce over that axis and the combine folding it into
  its carried value become one `accumulate`; accumulators of more than
  MAX_REGISTER_ACCUMULATORS elements per thread move to shared memory where they fit, and
  with `prefetch_into: shared` the rows the loop streams get a cp.async ring.
- The kernel's attributes give the thread layout (`simt_layout`), the shared-memory words
  of each use (`smem_words` for exchanges, `acc_words`, `stage_words`) and the axes whose
  extents are kernel arguments (`size_args`).

Steps that only order others (`barrier`, `smem_put`) give a token value that their
followers take as an argument, so program order is data flow here as everywhere in the IR.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.select import is_pair

from ..graph.layout import Layout
from ..limits import shared_limit
from ..tileir.tile import TileOp
from ..tileir.rotate_load import rotated_vector
from .scan_steps import scan_steps
from .sort_steps import sort_steps
from .layout_simt import blocked_dims
from .layouts import Blocked
from .nodes import Block, Builder, Kernel, Op, Type
from .thread_rules import (MAX_REGISTER_ACCUMULATORS, smem_words, staged_row_words,
                           thread_bits, vector_for)


def thread_level(k: Kernel, layout: Layout, axes: tuple[str, ...], sizes: dict[str, int],
                 aligned: bool) -> Kernel:
    """The thread-level IR of SIMT kernel `k` (tile level, blocked layouts) spread by
    `layout`; `axes` are the kernel's axes, `sizes` every axis's extent."""
    p = _Lowering(k, layout, sizes, aligned)
    p.block(k.body.ops)
    body = p.b.block()
    acc_words = stage_words = 0
    if layout.loop is not None:
        limit = shared_limit(k.target)
        placed, words = _accumulators_to_shared(body, p.b.types, layout, p.smem)
        # Too many for shared memory (rows of tens of thousands), they stay in registers,
        # where ptxas may spill some: slower, but it runs.
        if 4 * (p.smem + words) <= limit:
            body, acc_words = placed, words
        if layout.prefetch_into == "shared":
            staged, words = _stage_streamed_loads(body, k, layout, p.smem + acc_words)
            # A ring that does not fit beside the accumulators keeps rows in registers.
            if 4 * (p.smem + acc_words + words) <= limit:
                body, stage_words = staged, words
    names = set(axes) | {a for b in k.buffers for a in b.axes}
    names |= {a for a, _ in layout.partial_axes}
    names |= {op.attr("axis") for op in _every(body.ops) if op.name == "size"}
    attrs = tuple(k.attrs) + (("acc_words", acc_words), ("simt_layout", layout),
             ("size_args", tuple(sorted(names))), ("smem_words", p.smem),
             ("stage_words", stage_words))
    return Kernel(k.name, k.target, "simt", k.buffers, k.scalars, tuple(layout.grid),
                  layout.threads, tuple(sorted(p.b.types.items())), body, attrs)


class _Lowering:
    def __init__(self, k: Kernel, layout: Layout, sizes, aligned: bool):
        self.k, self.lay, self.sizes, self.aligned = k, layout, sizes, aligned
        self.b = Builder()
        self.value: dict[int, int] = {}
        self.smem = 0
        # the iotas argmax's reduce takes: the emitter forms the index itself
        self.pair_iotas = {op.args[1] for op in _every(k.body.ops)
                           if op.name == "reduce" and len(op.args) == 2}

    def type(self, axes, dtype: DType) -> Type:
        kept = tuple(d for d in blocked_dims(self.lay) if d.axis in axes)
        lay = Blocked(kept, self.lay.threads) if axes and kept else None
        return Type(tuple(axes), dtype, lay)

    def block(self, ops, walk: str | None = None) -> None:
        ops = [op for op in ops if not (op.name == "iota" and op.results[0] in self.pair_iotas)]
        folded = {}                  # a walked reduce's combine -> the reduce
        i = 0
        while i < len(ops):
            op = ops[i]
            if op.name == "for":
                self.walk(op)
            elif op.name == "reduce" and op.attr("axis") == walk:
                folded[self._combine_of(op, ops)] = op
            elif op.results and op.results[0] in folded:
                self.accumulate(op, folded[op.results[0]])
            elif op.name == "reduce":
                group = [op]
                while i + len(group) < len(ops) and self._same_round(ops[i + len(group)], op):
                    group.append(ops[i + len(group)])
                self.reductions(group)
                i += len(group)
                continue
            elif op.name == "scan":
                self.scan(op)
            elif op.name == "sort":
                self.sort(op)
            elif op.name == "yield":
                self.b.op("yield", tuple(self.value[a] for a in op.args))
            else:
                self.copy(op)
            i += 1

    def _same_round(self, candidate: Op, first: Op) -> bool:
        return (candidate.name == "reduce" and candidate.attr("axis") == first.attr("axis")
                and candidate.attr("partial") == first.attr("partial")
                and all(a in self.value for a in candidate.args[:1]))

    @staticmethod
    def _combine_of(reduce: Op, ops) -> int:
        user = next(op for op in ops if reduce.results[0] in op.args)
        return user.results[0]

    def copy(self, op: Op) -> None:
        attrs = dict(op.attrs)
        args = tuple(self.value[a] for a in op.args)
        if op.name in ("load", "store"):
            attrs["vector"] = self.vector(op)
        if not op.results:
            if "over" in attrs:
                attrs["axes"] = attrs.pop("over")
            self.b.op(op.name, args, None, **attrs)
            return
        t = self.k.type_of(op.results[0])
        self.value[op.results[0]] = self.b.emit(op.name, args, self.type(t.axes, t.dtype),
                                                **attrs)

    def vector(self, op: Op) -> int:
        buf = self.k.buffer(op.attr("buffer"))
        vec = vector_for(buf, self.lay, self.aligned, self.sizes)
        if op.attr("rotate") is not None:
            vec = rotated_vector(op.attr("rotate"), buf, self.lay, vec, self.sizes)
        if op.attr("take") is not None and self.lay.col is not None and (
                self.lay.col.axis in self.k.type_of(op.args[0]).axes or
                self.lay.col.axis not in self.k.type_of(op.results[0]).axes):
            # the row changes along the vector, or the result has no vector (the table's
            # column axis is the one taken): one element at a time
            vec = 1
        if op.attr("view") is not None:
            vec = 1            # remapped indices: one element at a time
        return vec

    def walk(self, loop: Op) -> None:
        """The `for` over the walked axis, its carried values the accumulators."""
        self.b.open()
        split = loop.attr("split")
        params = []
        for p in loop.body.params:
            t = self.k.type_of(p)
            axes = tuple(a for a in t.axes if split is None or a != split[0])
            params.append(self.b.value(self.type(axes, t.dtype)))
            self.value[p] = params[-1]
        self.block(loop.body.ops, walk=loop.attr("axis"))
        body = self.b.close(tuple(params))
        results = tuple(self.b.types[p] for p in params)
        made = self.b.for_op(tuple(self.value[a] for a in loop.args), body, results,
                             axis=loop.attr("axis"), step=1, span=self.lay.loop.tile)
        for r, new in zip(loop.results, made.results):
            self.value[r] = new

    def accumulate(self, combine: Op, reduce: Op) -> None:
        kind = reduce.attr("combine")
        if is_pair(kind):
            axis = reduce.attr("axis")
            raise PlaitError(f"{kind} over {axis}: the block walks {axis} index by index "
                             "(a grid tile and no threads), and a (value, index) loop "
                             f"accumulator is not lowered yet; give {axis} threads instead")
        param = next(a for a in combine.args if a != reduce.results[0])
        t = self.b.types[self.value[param]]
        self.value[combine.results[0]] = self.b.emit(
            "accumulate", (self.value[param], self.value[reduce.args[0]]), t,
            axis=reduce.attr("axis"), op=kind)

    def scan(self, op: Op) -> None:
        """A scan along a spread axis: `scan_local` in each thread's fragment, then
        `scan_block` over lanes, warps and repeats (`scan_steps.py` says how), and
        `scan_part` reading each part of its state off it (a named scan's is rounded).
        A split scan's chunk starts from its `scan_carry`; with `total` (its first
        kernel) the block's last running state is the result, over the chunk axis."""
        named = isinstance(op.attr("combine"), str)
        t = self.k.type_of(op.results[0])
        axis, total = op.attr("axis"), op.attr("total")
        axes = tuple(axis if a == total else a for a in t.axes)    # the scanned fragment
        attrs = tuple((key, v) for key, v in op.attrs if not (named and key == "combine"))
        tile_op = TileOp(-1, op.attr("combine") if named else "scan", (), axes, t.dtype,
                         attrs)
        base, block, words = scan_steps(tile_op, self.lay, self.k.name)
        self.smem = max(self.smem, words)
        state = self.type(axes, t.dtype)
        local = self.b.emit("scan_local", tuple(self.value[a] for a in op.args), state,
                            **base)
        carried = (local,)
        others = tuple(a for a in axes if a != axis)
        if op.attr("carry") is not None:      # a chunk of a split scan: its carry-in first
            carried += (self.b.emit("scan_carry", (), self.type(others, t.dtype), **base,
                                    carry=op.attr("carry"), chunks=op.attr("chunks")),)
        if total is not None:
            done = self.b.emit("scan_block", carried, self.type(others, t.dtype), **base,
                               **block, total=True)
        else:
            done = self.b.emit("scan_block", carried, state, **base, **block)
        for i, r in enumerate(op.results):
            rt = self.k.type_of(r)
            kept = tuple(a for a in rt.axes if a != total)
            self.value[r] = self.b.emit("scan_part", (done,), self.type(kept, rt.dtype),
                                        index=i, round=op.attr("round") if named else None)

    def sort(self, op: Op) -> None:
        """A sort along a spread axis: `sort_block` (the bitonic network in shared memory,
        `ir/sort_steps.py` says how), then `sort_part` for the values and the indices."""
        t = self.k.type_of(op.results[0])
        attrs, words = sort_steps(self.lay, op.attr("axis"), self.k.name, op.attr("keep"))
        self.smem = max(self.smem, words)
        done = self.b.emit("sort_block", tuple(self.value[a] for a in op.args),
                           self.type(t.axes, t.dtype),
                           descending=op.attr("descending"), slot=0, **attrs)
        for i, r in enumerate(op.results):
            rt = self.k.type_of(r)
            self.value[r] = self.b.emit("sort_part", (done,), self.type(rt.axes, rt.dtype),
                                        index=i)

    def reductions(self, group: list[Op]) -> None:
        """Reduces over one axis lowered together; their results share one exchange."""
        first = group[0]
        axis = first.attr("axis")

        def shape(op: Op) -> tuple[tuple[str, ...], DType, DType | None]:
            index = self.k.type_of(op.results[-1])     # a pair's result: the index
            held = self.k.type_of(op.results[0]).dtype if len(op.results) == 2 else None
            axes = tuple(a for a in index.axes if a != op.attr("partial"))
            return axes, index.dtype, held

        def step(name, args, op, **attrs) -> int:
            axes, dtype, held = shape(op)
            base = {"op": op.attr("combine"), "axis": axis, "value": held, **attrs}
            return self.b.emit(name, args, self.type(axes, dtype), **base)

        values = [step("reduce_local", (self.value[op.args[0]],), op) for op in group]
        bits = thread_bits(self.lay, axis)
        warp_bits = tuple(x for x in bits if x < 5)
        smem_bits = tuple(x for x in bits if x >= 5)
        if warp_bits:
            values = [step("reduce_shfl", (v,), op, lanes=tuple(1 << x for x in warp_bits))
                      for v, op in zip(values, group)]
        if smem_bits:
            # One exchange for the group: a barrier (earlier readers are done), every
            # thread's partials in, a barrier, each thread folds its warps' partials.
            token = step("barrier", tuple(values), first)
            words, slots = 0, []
            for v, op in zip(values, group):
                axes, dtype, held = shape(op)
                per_thread = int(np.prod(self.lay.fragment(axes)))
                slot = words
                words += self.lay.threads * per_thread * smem_words(held or dtype)
                index_slot = None
                if held is not None:      # two slots: the values, then the int32 indices
                    index_slot, words = words, words + self.lay.threads * per_thread
                slots.append((slot, index_slot))
                token = step("smem_put", (v, token), op, slot=slot, index_slot=index_slot)
            after = step("barrier", (token,), first)
            values = [step("smem_fold", (after,), op, slot=slot, index_slot=index_slot,
                           bits=smem_bits) for op, (slot, index_slot) in zip(group, slots)]
            self.smem = max(self.smem, words)
        for v, op in zip(values, group):
            t = self.k.type_of(op.results[-1])
            held = shape(op)[2]
            self.value[op.results[-1]] = self.b.emit(
                "reduce_done", (v,), self.type(t.axes, t.dtype), axis=axis,
                op=op.attr("combine"), partial=op.attr("partial"), round=op.attr("round"),
                value=held)


def _every(ops):
    for op in ops:
        yield op
        if op.body is not None:
            yield from _every(op.body.ops)


def _map_loop(body: Block, fn) -> Block:
    """`body` with each op inside its `for` replaced by fn(op)."""
    ops = []
    for op in body.ops:
        if op.name == "for":
            inner = Block(op.body.params, tuple(fn(o) for o in op.body.ops))
            op = Op(op.name, op.results, op.args, op.attrs, inner)
        ops.append(op)
    return Block(body.params, tuple(ops))


def _set(op: Op, **attrs) -> Op:
    return Op(op.name, op.results, op.args, tuple(sorted(dict(op.attrs, **attrs).items())),
              op.body)


def _accumulators_to_shared(body: Block, types, layout: Layout, scratch: int):
    """Accumulators of more than MAX_REGISTER_ACCUMULATORS elements per thread get shared
    slots after the exchange scratch (16-byte aligned, for vector accesses)."""
    accs = [op for op in _every(body.ops) if op.name == "accumulate"]
    per_thread = sum(int(np.prod(layout.fragment(types[op.results[0]].axes))) for op in accs)
    if per_thread <= MAX_REGISTER_ACCUMULATORS:
        return body, 0
    slot = -(-scratch // 4) * 4
    slots = {}
    for op in accs:
        t = types[op.results[0]]
        slots[op.results[0]] = slot
        slot += int(np.prod(layout.fragment(t.axes))) * layout.threads * smem_words(t.dtype)
    placed = _map_loop(body, lambda op: _set(op, shared=slots[op.results[0]])
                       if op.name == "accumulate" else op)
    return placed, slot - scratch


def _stage_streamed_loads(body: Block, k: Kernel, layout: Layout, start: int):
    """Each load the loop streams gets a ring of prefetch + 1 rows in shared memory
    (`staged`: its first word). Every thread copies its own vectors with cp.async and reads
    back only those, so the ring needs no barrier."""
    slot = -(-start // 4) * 4
    first = slot

    def stage(op: Op) -> Op:
        nonlocal slot
        if op.name != "load":
            return op
        buf = k.buffer(op.attr("buffer"))
        if layout.loop.axis not in buf.axes or op.attr("rotate") is not None \
                or op.attr("take") is not None or op.attr("view") is not None:
            # a rotated row is read by registers; a taken or viewed one needs its indices
            return op
        if op.attr("vector") * buf.dtype.itemsize not in (4, 8, 16):
            return op          # cp.async copies 4, 8 or 16 bytes
        staged = _set(op, staged=slot)
        slot += (layout.prefetch + 1) * staged_row_words(layout, buf)
        return staged

    staged = _map_loop(body, stage)
    return staged, slot - first
