"""Where each element of a thread's fragment lies: the block and thread indices, an
element's index along each axis (shifted back by the row's lead where rows are shifted to
their alignment, nvptx/shifted_rows.py), whether it is inside the tensor, which thread
owns a stored element, and its address. A mixin of the generic emitter (backend.py)."""
from __future__ import annotations

from llvmlite import ir

from . import ops as L
from . import shifted_rows as shifted
from .fragments import mask_and as _mask_and
from .memo import per_emitter


class IndexEmitter:
    def sreg(self, name: str):
        return self.intr.call(self.b, f"llvm.nvvm.read.ptx.sreg.{name}", L.I32, [])

    def size(self, axis: str):
        return self.args[("size", axis)]

    def _setup_indices(self) -> None:
        b = self.b
        self.tid = self.sreg("tid.x")
        self.block_index: dict[str, ir.Value] = {}
        grid = self.lay.grid
        outer = grid
        linear = self.sreg("ctaid.x")
        if len(grid) > 1:
            # artifact.split_grid: the innermost axis on x, the others over y and z
            self.block_index[grid[-1][0]] = linear
            outer = grid[:-1]
            linear = b.add(self.sreg("ctaid.y"), b.mul(self.sreg("ctaid.z"),
                                                        self.sreg("nctaid.y")))
        for k, (axis, tile) in enumerate(reversed(outer)):
            if k == len(outer) - 1:      # the outermost axis: what is left is its index
                self.block_index[axis] = linear
                if len(grid) > 1:        # z rounds up: the blocks past the end leave
                    past = b.icmp_unsigned(">=", linear, self._blocks_along(axis, tile))
                    with b.if_then(past, likely=False):
                        b.ret_void()
                break
            count = self._blocks_along(axis, tile)
            following = b.udiv(linear, count)
            self.block_index[axis] = b.sub(linear, b.mul(following, count))
            linear = following
        self.thread_index = {}
        for m in (self.lay.row, self.lay.col):
            if m is not None:
                self.thread_index[m.axis] = b.and_(b.lshr(self.tid, L.i32(m.shift)),
                                                   L.i32(m.threads - 1))
        self.partial = dict(self.lay.partial_axes)

    def _blocks_along(self, axis: str, tile: int):
        return self.b.udiv(self.b.add(self.size(axis), L.i32(tile - 1)), L.i32(tile))

    def base(self, axis: str):
        tile = dict(self.lay.grid).get(axis)
        if tile is None:
            return L.i32(0)
        return self.b.mul(self.block_index[axis], L.i32(tile))

    @per_emitter
    def index(self, axis: str, r: int, c: int, v: int, ahead=0):
        """Element index along `axis` of fragment element (r, c, v) of this thread.

        `ahead` picks the index of the walked axis: k the k-th after the current one
        (prefetching), ("first", k) the k-th before the loop starts; either stops at the
        block's last index."""
        b = self.b
        if axis in self.partial:
            return self.block_index[self.partial[axis]]
        if self.lay.loop is not None and axis == self.lay.loop.axis:
            if isinstance(ahead, tuple):
                step = L.i32(ahead[1])
            else:
                step = b.add(self.loop_index, L.i32(ahead)) if ahead else self.loop_index
            if ahead and ahead != ("first", 0):
                last = b.sub(self.loop_count, L.i32(1))
                step = b.select(b.icmp_unsigned("<", step, self.loop_count), step, last)
            return b.add(self.base(axis), step)
        m = self.lay.map_of(axis)
        if m is None:
            return self.base(axis)
        if m is self.lay.row:
            return b.add(self.base(axis), b.add(L.i32(r * m.threads), self.thread_index[axis]))
        offset = b.add(L.i32(c * m.threads * m.vector + v),
                       b.mul(self.thread_index[axis], L.i32(m.vector)))
        if self.lay.lead_axes:          # may go below 0: in_bounds' unsigned compare masks it
            offset = b.sub(offset, shifted.lead(self, r))
        return b.add(self.base(axis), offset)

    def always_in_bounds(self, axis: str, r: int, c: int, v: int) -> bool:
        """True when no thread's element (r, c, v) can lie past the axis's end: the block
        covers the whole axis (its extent is known when compiling) or the axis is gridded
        with one element per block."""
        if axis in self.partial:
            return True
        if self.lay.loop is not None and axis == self.lay.loop.axis:
            return True                  # the loop stops at the axis's end (`loop_count`)
        m = self.lay.map_of(axis)
        if m is None:
            return True
        if m.tile is not None:
            return False
        if m is self.lay.row:
            return r * m.threads + m.threads - 1 < m.extent
        if self.lay.lead_axes:
            return shifted.column_inside(self, c, v)
        return c * m.threads * m.vector + (m.threads - 1) * m.vector + v < m.extent

    @per_emitter
    def in_bounds(self, axes: tuple, r: int, c: int, v: int, ahead=0):
        b = self.b
        masks = [b.icmp_unsigned("<", self.index(a, r, c, v, ahead), self.size(a))
                 for a in axes if not self.always_in_bounds(a, r, c, v)]
        return _mask_and(b, masks)

    @per_emitter
    def owner(self, axes: tuple):
        b = self.b
        masks = [b.icmp_unsigned("==", self.thread_index[m.axis], L.i32(0))
                 for m in (self.lay.row, self.lay.col)
                 if m is not None and m.axis not in axes and m.threads > 1]
        return _mask_and(b, masks)

    def offset(self, buf, r, c, v, ahead=0, at=None):
        """Element offset (i64) of fragment element (r, c, v) in a row-major buffer;
        `at` overrides the index along some axes (a rotated load's source)."""
        b = self.b
        total = ir.Constant(L.I64, 0)
        for i, axis in enumerate(buf.axes):
            stride = ir.Constant(L.I64, 1)
            for later in buf.axes[i + 1:]:
                stride = b.mul(stride, b.zext(self.size(later), L.I64))
            index = at[axis] if at and axis in at else self.index(axis, r, c, v, ahead)
            total = b.add(total, b.mul(b.zext(index, L.I64), stride))
        return total

    def address(self, buf, r, c, v, ahead=0, at=None):
        ptr = self.args[("buffer", buf.name)]
        byte = self.b.mul(self.offset(buf, r, c, v, ahead, at),
                          ir.Constant(L.I64, buf.dtype.itemsize))
        return self.b.ptrtoint(self.b.gep(ptr, [byte]), L.I64)
