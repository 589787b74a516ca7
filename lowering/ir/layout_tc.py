"""Layouts of the values of kernels on tensor cores: a contraction (GEMM) and a streamed
kernel, as their paths hold them today.

GEMM: the operands' tiles stream through a ring of shared-memory stages (swizzled by line
for the TMA and wgmma, by row for mma.sync's ldmatrix); the accumulator and the epilogue
live in the instruction's accumulator fragments, a value over only M or only N in a slice
of them. wgmma reads both operands from shared memory; mma.sync first converts them to its
A and B fragments (`convert_layout`, which ldmatrix does).

Streamed: the residents (q) sit in shared memory once per block and the streamed tiles
(k, v) in two stages; the scores and the output accumulator are m16n8 accumulators split by
rows over the warps, row statistics a slice of the scores, and the softmax's weights move
from the scores' accumulator layout to an A fragment in registers. Batch axes and folded
axes have one index per block (no layout dim).
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError

from ..gemm.plan import GemmProgram
from ..gemm.tiles import warp_grid
from ..stream.plan import STAGES, StreamKernel
from ..tileir.tile import TileOp
from .layouts import Blocked, BlockedDim, Mma, Shared, Slice
from .nodes import Type


class GemmLayouts:
    def __init__(self, g: GemmProgram, sizes: dict[str, int]):
        self.g = g
        self.grid = g.grid
        self.threads = g.threads
        self.attrs = (("consumers", g.consumers), ("instruction", g.instruction),
                      ("shared_bytes", g.shared_bytes), ("stages", g.stages),
                      ("tile", (g.tile_m, g.tile_n, g.tile_k)))
        if g.instruction == "wgmma":
            units, unit, first = (g.consumers, 1), (64, g.tile_n), 128
        else:
            wm, wn = warp_grid(g.tile_m, g.tile_n, g.consumers)
            units, unit, first = (wm, wn), (g.tile_m // wm, g.tile_n // wn), 0
        self._mma = lambda role, rows, cols: Mma(g.instruction, role, rows, cols,  # noqa: E731
                                                 units, unit, g.threads, first)
        self.acc = self._mma("acc", g.m, g.n)

    def of(self, op: TileOp):
        g = self.g
        if op.op == "load" and op.attr("stream") == g.k:
            tile = {g.m: g.tile_m, g.n: g.tile_n, g.k: g.tile_k}
            axes = tuple(a for a in op.axes if a in tile)
            swizzle = "line" if g.instruction == "wgmma" else "row"
            return Shared(axes, tile[axes[-1]], swizzle, op.dtype.itemsize, g.stages)
        return _acc_or_slice(set(op.axes), self.acc, g.m, g.n)

    def operand(self, b, value: int, role: str, op: TileOp) -> int:
        """wgmma reads its operands where they are; mma.sync converts them to fragments."""
        if self.g.instruction == "wgmma":
            return value
        t = b.types[value]
        rows, cols = (self.g.m, self.g.k) if role == "a" else (self.g.k, self.g.n)
        return b.emit("convert_layout", (value,),
                      Type(t.axes, t.dtype, self._mma(role, rows, cols)))


class StreamLayouts:
    def __init__(self, sk: StreamKernel, sizes: dict[str, int]):
        self.sk = sk
        self.sizes = sizes
        self.grid = sk.grid
        self.threads = sk.threads
        self.attrs = (("keys", sk.keys), ("rows", sk.rows), ("shared_bytes", sk.shared_bytes),
                      ("stages", STAGES), ("warps", sk.warps))
        self.tiles = {t.name: (t, STAGES if t in sk.streamed else 1)
                      for t in sk.residents + sk.streamed}

    def mma(self, role: str, rows: str, cols: str) -> Mma:
        sk = self.sk       # a B operand: every warp reads the whole tile
        return Mma("mma_sync", role, rows, cols, (sk.warps, 1),
                   (sk.rows_per_warp, self._extent(cols)), sk.threads)

    def _extent(self, axis: str) -> int:
        sk = self.sk
        if axis == sk.keys_axis:
            return sk.keys
        if axis == sk.rows_axis:
            return sk.rows
        return sk.pad(axis) if axis in dict(sk.widths) else self.sizes[axis]

    def of(self, op: TileOp):
        sk = self.sk
        if op.op == "load" and op.attr("buffer") in self.tiles:
            t, stages = self.tiles[op.attr("buffer")]
            return Shared((t.axis, t.width_axis), t.pad, "row", 2, stages)
        axes = set(op.axes) - set(sk.batch) - set(sk.folded)
        rows, keys = sk.rows_axis, sk.keys_axis
        if not axes:
            return None
        if rows in axes:
            other = sorted(axes - {rows})
            if len(other) > 1:
                raise PlaitError(f"kernel {sk.name}: a value over {sorted(axes)} has no "
                                 "layout in a streamed kernel")
            if not other:
                return Slice(self.mma("acc", rows, keys), keys)
            return self.mma("acc", rows, other[0])
        if axes == {keys}:
            return Slice(self.mma("acc", rows, keys), rows)
        # Over the keys and a width, or a width alone: the scattered sums and the
        # per-column values, which the block's threads share out row by row.
        return blocked_over(tuple(a for a in op.axes if a in axes),
                            {a: self._extent(a) for a in axes}, sk.threads)

    def operand(self, b, value: int, role: str, op: TileOp) -> int:
        """Each product reads its A from registers and its B through ldmatrix."""
        t = b.types[value]
        over = op.attr("over")
        other = [a for a in t.axes if a not in (over,) + tuple(self.sk.batch)
                 + tuple(self.sk.folded)]
        if len(other) != 1:
            raise PlaitError(f"kernel {self.sk.name}: a product operand over {t.axes}")
        rows, cols = (other[0], over) if role == "a" else (over, other[0])
        return b.emit("convert_layout", (value,), Type(t.axes, t.dtype,
                                                       self.mma(role, rows, cols)))


def _acc_or_slice(axes: set, acc: Mma, m: str, n: str):
    if {m, n} <= axes:
        return acc
    if m in axes:
        return Slice(acc, n)
    if n in axes:
        return Slice(acc, m)
    return None


def blocked_over(axes: tuple[str, ...], extents: dict[str, int], threads: int) -> Blocked:
    """Threads spread innermost axis first (up to a power of two covering it), repeats
    along each axis for the rest."""
    dims, left, shift = [], threads, 0
    for a in reversed(axes):
        t = 1
        while t < left and t < extents[a]:
            t *= 2
        dims.append(BlockedDim(a, -(-extents[a] // t), t, 1, shift))
        shift += t.bit_length() - 1
        left //= t
    return Blocked(tuple(reversed(dims)), threads)
