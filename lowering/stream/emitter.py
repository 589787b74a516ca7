"""The emitter of a streamed tile program's loop, shared by its tensor-core
instructions (stream/sm80.py: mma.sync; stream/sm90.py: wgmma).

A block takes `rows` rows of one batch index (16 or 32 per warp) and walks the streamed
axis `keys` at a time. Threads copy the block's resident tiles once (q in the forward;
k and v in the backward's dk/dv kernel), and each step's streamed tiles (k and v; q and
dout) into one of two shared-memory stages (cp.async), so the next step's copies overlap
this step's arithmetic. For attention's forward:

    prologue: copy q, k0, v0; wait; the products' preparation (sm80: q into registers)
    step j:   wait for tile j; bar.sync; copy tile j+1 into the other stage
              scores = q . k_j, then the body's ops, in registers
              acc = round(p) . v_j + acc * alpha   (p goes from accumulator to operand
                                                    registers without shared memory)

The backward's sums are the same loop with other dots: each `dot` over a width axis is
a score (resident . streamed tile), each over the streamed axis a weighted product
(value . streamed tile, added to a carried sum).

Layouts. Every value of the tile program lives in registers in the layout of an mma
accumulator fragment, or a slice of it: lane l of a warp holds, of each 16 rows, rows
l/4 and l/4 + 8 (row slots), and of each 8 columns, columns 2(l%4) and 2(l%4) + 1. A value
over [S, T] (scores) or [S, E] (the accumulator) is indexed (slot, column block, column
pair); over [S] only by slot (a row reduction folds the thread's columns, then the four
lanes of the quad by shuffles); over [T] or [E] only by its column. An op's operands are
read at the projection of its own positions, which is the broadcast. mma.sync's m16n8
accumulator and wgmma's m64nN (each warp of the warpgroup its 16 rows) are both this
layout, and both take the accumulator of two column blocks, packed to 16-bit pairs, as
the A operand of the next product: that is why p never leaves registers.

Masks. A step whose key tile a position mask leaves empty skips its copies and its
arithmetic; one the mask leaves whole (and inside the keys) runs a second copy of the
body without the mask's ops (stream/masks.py decides, per block, by intervals).
"""
from __future__ import annotations

from llvmlite import ir

from ..nvptx import ops as L
from ..nvptx import ptx_mma as P
from ..artifact import CompiledKernel
from ..nvptx.kernel import KernelEmitter, loop, plain_args
from .copy import copy_rows, copy_step
from .masks import TileMask
from .plan import StreamKernel
from .step_ops import StepOps
from ..tileir.tile_stream import loop_body


def stream_ptx(llvm_ir: str, sk: StreamKernel, entry: str) -> str:
    """PTX with the block size stated, so ptxas may give each thread up to 255 registers."""
    from ..nvptx.ptx_text import launch_bounds, llvm_to_ptx
    return launch_bounds(llvm_to_ptx(llvm_ir, sk.target), entry, sk.threads, 1)


def compiled(sk: StreamKernel, entry: str, llvm_ir: str) -> CompiledKernel:
    ptx = stream_ptx(llvm_ir, sk, entry)
    return CompiledKernel(sk.name, entry, sk.target, ptx, tuple(plain_args(sk)), sk.threads,
                          sk.grid, sk.shared_bytes, sk.shared_bytes)


class StreamEmitter(StepOps, KernelEmitter):
    """The loop of a streamed kernel, its copies, masks and register layout; a subclass
    per tensor-core instruction gives the products and what they need (`SMEM_ALIGN`,
    `place`, `landed`, `prepare_products`, `scores`, `weighted`, `WARP_BRANCHES`)."""
    SMEM_ALIGN = 128
    # Whether a step's arithmetic may branch per warp on its rows' mask status (an
    # instruction that a warpgroup issues together may not).
    WARP_BRANCHES = True

    def __init__(self, sk: StreamKernel, entry: str):
        super().__init__(sk, entry, (), self.SMEM_ALIGN)
        self.sk = sk
        self.tiles = {t.name for t in sk.residents + sk.streamed}
        self.ops = {op.id: op for op in sk.tile.ops}
        self.buffers = {buf.name: buf for buf in sk.tile.buffers}
        self._body()

    # ---- positions ----------------------------------------------------------------------
    def _blocks(self, axis: str) -> int:
        """Column blocks of 8 a value along `axis` has (the padded tile)."""
        sk = self.sk
        return sk.keys // 8 if axis == sk.keys_axis else sk.pad(axis) // 8

    def _col_axis(self, axes) -> str | None:
        sk = self.sk
        for axis in (sk.keys_axis,) + tuple(a for a, _ in sk.widths):
            if axis in axes:
                return axis
        return None

    def positions(self, axes) -> list[tuple]:
        """The keys of a value's registers: (half or None, (block, pair) or None)."""
        halves = range(2 * self.sk.row_blocks) if self.sk.rows_axis in axes else (None,)
        col = self._col_axis(axes)
        cols = [(j, e) for j in range(self._blocks(col)) for e in (0, 1)] if col else [None]
        return [(h, c) for h in halves for c in cols]

    def project(self, key, axes):
        half, col = key
        return (half if self.sk.rows_axis in axes else None,
                col if self._col_axis(axes) else None)

    def index_of(self, axis: str, key):
        """The position along `axis` of register `key` (i32)."""
        b, sk = self.b, self.sk
        half, col = key
        if axis == sk.rows_axis:
            return b.add(self.row_base, L.i32(8 * half))
        if axis == sk.keys_axis or axis in dict(sk.widths):
            j, e = col
            start = self.key0 if axis == sk.keys_axis else L.i32(0)
            return b.add(start, b.add(self.lane_col, L.i32(8 * j + e)))
        if axis in self.fold_at:
            return self.fold_at[axis]
        return self.batch_index()[axis]

    def batch_index(self) -> dict:
        if self._batch is None:
            b, rest, out = self.b, self.batch_linear, {}
            for axis in reversed(self.sk.batch):
                out[axis] = b.urem(rest, self.size(axis))
                rest = b.udiv(rest, self.size(axis))
            self._batch = out
        return self._batch

    # ---- the kernel ---------------------------------------------------------------------
    def _body(self) -> None:
        sk, b = self.sk, self.b
        self.base = b.trunc(b.ptrtoint(self.smem, L.I64), L.I32)
        self.tid = self.sreg("tid.x")
        self.lane = b.and_(self.tid, L.i32(31))
        warp = self.warp = b.lshr(self.tid, L.i32(5))
        pid = self.sreg("ctaid.x")
        row_blocks = b.sdiv(b.add(self.size(sk.rows_axis), L.i32(sk.rows - 1)), L.i32(sk.rows))
        self.batch_linear = b.udiv(pid, row_blocks)
        self.m0 = b.mul(b.urem(pid, row_blocks), L.i32(sk.rows))
        self.row_base = b.add(b.add(self.m0, b.mul(warp, L.i32(sk.rows_per_warp))),
                              b.lshr(self.lane, L.i32(2)))
        self.lane_col = b.shl(b.and_(self.lane, L.i32(3)), L.i32(1))
        self.warp_row = b.mul(warp, L.i32(sk.rows_per_warp))
        self.key0 = L.i32(0)
        self.fold_at = {}           # a folded axis: this step's position along it
        self.masked = True
        self._batch = None
        self.batch_index()          # computed here, where every branch below sees it
        self.offsets = {}   # where this batch index's matrix of each tensor starts (elements)
        for t in sk.residents + sk.streamed:
            self.offsets[t.name] = self._matrix_at(t.name, t.axis, t.width)
        for name in sk.outs:
            last = self.buffers[name].axes[-1]
            self.offsets[name] = self._matrix_at(name, sk.rows_axis, dict(sk.widths).get(last, 1))
        for name in sk.scattered:         # [batch, keys, width]: added into per step
            self.offsets[name] = self._matrix_at(name, sk.keys_axis,
                                                 sk.width(self.buffers[name].axes[-1]))
        ops = list(sk.tile.ops)
        loop_op = next(op for op in ops if op.op == "loop")
        body, yielded = loop_body(ops, loop_op.id)
        in_body = {op.id for op in body} | {yielded.id, loop_op.id}
        self.values: dict[int, dict] = {}
        before = [op for op in ops if op.id < loop_op.id]
        after = [op for op in ops if op.id > loop_op.id and op.id not in in_body]
        for op in before:
            self._emit(op)
        self.key_steps = b.sdiv(b.add(self.size(sk.keys_axis), L.i32(sk.keys - 1)),
                                L.i32(sk.keys))
        self.split = loop_op.attr("split")
        for t in sk.residents:
            copy_rows(self, t.name, sk.rows_axis, self.m0, sk.rows, t.width, t.pad,
                      b.add(self.base, L.i32(sk.resident_offset(t.name))))
        self.masks = TileMask(self, self.ops)
        self.index_mask = next((op.args[0] for op in body if op.attr("mask") == "index"),
                               None)
        # The block's rows and this warp's: the same every step, so the bounds of a mask
        # input along the rows (a query's document id) are taken once, here.
        self.row_boxes = {warp: (first, b.add(first, L.i32(count - 1)), count)
                          for warp, first, count in (
                              (False, self.m0, sk.rows),
                              (True, b.add(self.m0, self.warp_row), sk.rows_per_warp))}
        if self.index_mask is not None:
            for warp, (lo, hi, count) in self.row_boxes.items():
                self.masks.hoist(self.index_mask, {sk.rows_axis: (lo, hi)},
                                 {sk.rows_axis: count}, level=warp)
        self._key_range()
        # Steps start..end; without folded axes step j is key tile j, in stage j % 2.
        start, end = self.key_first, b.add(self.key_first, self.key_span)
        if sk.folded:               # the loop walks the folded axes x the key tiles
            start, end = L.i32(0), self.key_span
            for axis in sk.folded:
                end = b.mul(end, self.size(axis))
        fold0, key_step0 = self._split_step(start)
        with b.if_then(b.and_(b.icmp_signed("<", start, end),
                              b.not_(self._tile_status(key_step0)[1]))):
            self._stream_from(fold0)
            copy_step(self, key_step0, b.and_(start, L.i32(1)))
        P.cp_async_commit(b)
        P.cp_async_wait(b, 0)
        self.landed()
        P.barrier(b)
        self.prepare_products()
        carried_keys = []
        init = []
        for i, arg in enumerate(loop_op.args):
            op = self._carried_op(body, loop_op.id, i)
            keys = self.positions(op.axes)
            carried_keys.append((op, keys))
            init += [self._scalar(arg)] * len(keys)

        def step(j, flat):
            stage = b.and_(j, L.i32(1))
            P.cp_async_wait(b, 0)           # this thread's copies of step j landed
            self.landed()
            P.barrier(b)                    # everyone's did, and step j-1 is done with
            nxt = b.add(j, L.i32(1))        # the other stage, which is refilled now
            ahead = b.icmp_signed("<", nxt, end)
            fold, key_step = self._split_step(j)
            nxt_fold, nxt_key_step = self._split_step(nxt)
            with b.if_then(b.and_(ahead, b.not_(self._tile_status(nxt_key_step)[1]))):
                self._stream_from(nxt_fold)
                copy_step(self, nxt_key_step, b.sub(L.i32(1), stage))
            P.cp_async_commit(b)
            self.key0 = b.mul(key_step, L.i32(sk.keys))
            self.fold_at = fold
            self.stage_base = b.add(b.add(self.base, L.i32(sk.resident_bytes)),
                                    b.mul(stage, L.i32(sk.stage_bytes)))
            # A scattered sum's product spans the warps (a barrier in the body): then the
            # whole block takes one branch.
            whole, empty = self._tile_status(key_step,
                                             warp=self.WARP_BRANCHES and not sk.scattered)
            return self._branches(flat, whole, empty, body, yielded, carried_keys)
        final = loop(b, self.fn, end, init, step, start)
        P.cp_async_wait(b, 0)
        self.results = []
        at = 0
        for op, keys in carried_keys:
            self.results.append(dict(zip(keys, final[at:at + len(keys)])))
            at += len(keys)
        for op in after:
            self._emit(op)
        b.ret_void()

    def _key_range(self) -> None:
        """The key tiles the loop visits, key_first up to key_first + key_span: with a
        position mask, those from the block's first tile the mask does not leave empty to
        its last (stream.masks; the empty ones between are skipped step by step), else
        all of them; in a split stream, only those of the block's range."""
        b, sk = self.b, self.sk
        first, end = L.i32(0), self.key_steps
        if self.split is not None:        # this block's range of a split stream
            part, chunk = self.split
            first = b.mul(self.batch_index()[part], L.i32(chunk // sk.keys))
            end = b.add(first, L.i32(chunk // sk.keys))
            end = b.select(b.icmp_signed("<", end, self.key_steps), end, self.key_steps)
        if self.index_mask is not None:
            row0, last_row, count = self.row_boxes[False]
            lo, hi = self.masks.tile_range(self.index_mask, {sk.rows_axis: (row0, last_row)},
                                           {sk.rows_axis: count}, sk.keys_axis, sk.keys,
                                           self.key_steps, level=False)
            if self.split is None:
                first, end = lo, hi
            else:
                first = b.select(b.icmp_signed(">", lo, first), lo, first)
                end = b.select(b.icmp_signed("<", hi, end), hi, end)
        elif self.split is None:          # every tile: a span that needs no clamp
            self.key_first, self.key_span = first, end
            return
        span = b.sub(end, first)
        self.key_first = b.select(b.icmp_signed(">", span, L.i32(0)), first, L.i32(0))
        self.key_span = b.select(b.icmp_signed(">", span, L.i32(0)), span, L.i32(0))

    def _split_step(self, j) -> tuple[dict, object]:
        """({folded axis: position}, key tile) of loop step j: the folded axes outermost,
        each with the key tiles from key_first (without folded axes step j is tile j)."""
        if not self.sk.folded:
            return {}, j
        b = self.b
        span = b.select(b.icmp_signed(">", self.key_span, L.i32(0)), self.key_span, L.i32(1))
        rest, fold = b.udiv(j, span), {}
        key_step = b.add(self.key_first, b.urem(j, span))
        for axis in reversed(self.sk.folded):
            fold[axis] = b.urem(rest, self.size(axis))
            rest = b.udiv(rest, self.size(axis))
        return fold, key_step

    def _stream_from(self, fold: dict) -> None:
        """The streamed tensors' offsets at these positions along the folded axes (what
        the copies that follow read)."""
        if fold:
            for t in self.sk.streamed:
                self.offsets[t.name] = self._matrix_at(t.name, t.axis, t.width, fold)

    def _tile_status(self, j, warp: bool = False) -> tuple:
        """(i1 the key tile j needs no mask, i1 its keys are all masked): the position
        mask over the block's rows (the same in every thread: what the copies follow) or,
        with `warp`, over this warp's rows (what its arithmetic follows; the step's body
        has no barrier), and the tile's keys (stream.masks); and whether the tile ends
        inside the keys."""
        b, sk = self.b, self.sk
        first, last_row, count = self.row_boxes[warp]
        key0 = b.mul(j, L.i32(sk.keys))
        last = b.add(key0, L.i32(sk.keys - 1))
        inside = b.icmp_signed("<=", b.add(key0, L.i32(sk.keys)), self.size(sk.keys_axis))
        if self.index_mask is None:
            return inside, ir.Constant(L.I1, 0)
        box = {sk.rows_axis: (first, last_row), sk.keys_axis: (key0, last)}
        true, false = self.masks.status(self.index_mask, box,
                                        {sk.rows_axis: count, sk.keys_axis: sk.keys},
                                        level=warp)
        return b.and_(inside, true), false

    def _branches(self, flat, whole, empty, body, yielded, carried_keys) -> list:
        """The body twice, chosen per tile: without the masks where the tile is whole, with
        them where it is not; a tile whose keys are all masked changes nothing."""
        b = self.b
        merge = self.fn.append_basic_block("tile_done")
        compute = self.fn.append_basic_block("tile")
        incoming = [(flat, b.block)]
        b.cbranch(empty, merge, compute)
        b.position_at_end(compute)
        fast_block = self.fn.append_basic_block("tile_whole")
        full_block = self.fn.append_basic_block("tile_masked")
        b.cbranch(whole, fast_block, full_block)
        for block, masked in ((fast_block, False), (full_block, True)):
            b.position_at_end(block)
            incoming.append((self._step_body(flat, body, yielded, carried_keys, masked),
                             b.block))
            b.branch(merge)
        b.position_at_end(merge)
        out = []
        for i, value in enumerate(flat):
            phi = b.phi(value.type)
            for values, block in incoming:
                phi.add_incoming(values[i], block)
            out.append(phi)
        return out

    def _step_body(self, flat, body, yielded, carried_keys, masked: bool) -> list:
        at = 0
        for op, keys in carried_keys:
            self.values[op.id] = dict(zip(keys, flat[at:at + len(keys)]))
            at += len(keys)
        self.masked = masked
        for op in body:
            if op.op != "carried":
                self._emit(op)
        out = []
        for (op, keys), value in zip(carried_keys, yielded.args):
            vals = self.values[value]
            out += [vals[self.project(k, self.ops[value].axes)] for k in keys]
        return out

    def _matrix_at(self, name: str, rows_axis: str, width: int, fold: dict | None = None):
        """Element offset (i64) of this block's batch index's [rows, width] matrix of a
        tensor, over the batch axes it has (all of the block's, or fewer: the query heads
        of a group share its k and v) and, for a streamed one, the folded axes at `fold`."""
        b, sk = self.b, self.sk
        fold = fold or {}
        axes = [a for a in self.buffers[name].axes if a in sk.batch or a in fold]
        if list(axes) == list(sk.batch):
            linear = b.zext(self.batch_linear, L.I64)
        else:
            linear = ir.Constant(L.I64, 0)
            for axis in axes:
                at = fold[axis] if axis in fold else self.batch_index()[axis]
                linear = b.add(b.mul(linear, b.zext(self.size(axis), L.I64)),
                               b.zext(at, L.I64))
        rows = b.zext(self.size(rows_axis), L.I64)
        return b.mul(linear, b.mul(rows, ir.Constant(L.I64, width)))

    # ---- what a subclass gives ----------------------------------------------------------
    def landed(self) -> None:
        """After this thread's copies landed, before the barrier that publishes them."""

    def prepare_products(self) -> None:
        """After the prologue's copies are visible to every thread."""

    def place(self, row, chunk, n_rows: int, padded: int):
        """Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `n_rows` rows
        of `padded` 16-bit elements."""
        raise NotImplementedError

    def scores(self, a, c) -> dict:
        raise NotImplementedError

    def weighted(self, p: dict, acc: dict, t) -> dict:
        raise NotImplementedError

    @staticmethod
    def _carried_op(body, loop_id: int, index: int):
        return next(op for op in body if op.op == "carried" and op.attr("loop") == loop_id
                    and op.attr("index") == index)
