"""Layouts: how the elements of a value's block tile are spread over a block's threads, or
laid out in shared memory. A layout is part of a value's type (`nodes.Type`).

    Blocked   threads and vector width per axis (the SIMT kernels, epilogue loads)
    Mma       a tensor-core fragment: instruction, role (acc / a / b), warps over the tile
    Shared    a tile in shared memory: axis order, row padding or swizzle, stages
    Slice     a parent layout with one axis reduced away (a row statistic of an accumulator)

`coords(layout, axes, extents)` is each layout's meaning: for every thread of the block, the
block-tile coordinates of its fragment's elements, in fragment order (-1 past the tile).
`addresses(shared, extents)` is a Shared layout's: the element offset of every tile
position. The CPU interpreter checks values against them (a fragment reassembled from its
threads equals the tile) and the emitter will read them; nothing else interprets a layout.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BlockedDim:
    """One axis of a blocked layout: index = base + rep * threads * vector + t * vector + v."""
    axis: str
    reps: int
    threads: int
    vector: int
    shift: int                    # first bit of this axis's thread index within tid

    @property
    def extent(self) -> int:
        return self.reps * self.threads * self.vector


@dataclass(frozen=True)
class Blocked:
    dims: tuple[BlockedDim, ...]  # outer to inner; a thread's fragment is reps x ... x vector
    threads: int                  # threads of the block (those no dim uses replicate)

    def text(self) -> str:
        inner = ", ".join(f"{d.axis}={d.reps}x{d.threads}x{d.vector}" for d in self.dims)
        return f"blocked<{inner}; {self.threads}>"

    def dim(self, axis: str) -> BlockedDim | None:
        return next((d for d in self.dims if d.axis == axis), None)


@dataclass(frozen=True)
class Mma:
    """A tensor-core fragment. Units (warps for mma_sync, warpgroups of 4 warps for wgmma)
    form a `warps` grid over the tile, each covering `unit_tile` (rows, cols); the units
    start at thread `first_thread` (wgmma's consumers follow the producer warpgroup).
    Roles: 'acc' (rows = M, cols = N), 'a' (rows = M, cols = K), 'b' (rows = K, cols = N);
    an operand's K runs over the whole tile, an accumulator's over the unit's part."""
    instruction: str              # 'mma_sync' (m16n8k16) | 'wgmma' (m64nNk16)
    role: str                     # 'acc' | 'a' | 'b'
    rows: str
    cols: str
    warps: tuple[int, int]        # units along rows and along cols
    unit_tile: tuple[int, int]    # rows and cols of the tile one unit covers
    threads: int
    first_thread: int = 0

    @property
    def unit_threads(self) -> int:
        return 128 if self.instruction == "wgmma" else 32

    def text(self) -> str:
        first = f" from {self.first_thread}" if self.first_thread else ""
        return (f"mma<{self.instruction} {self.role} {self.rows}x{self.cols}; units "
                f"{self.warps[0]}x{self.warps[1]} of {self.unit_tile[0]}x{self.unit_tile[1]}"
                f"{first}; {self.threads}>")


@dataclass(frozen=True)
class Shared:
    axes: tuple[str, ...]         # storage order in shared memory, innermost last
    row_elements: int             # elements of one row (padding included)
    swizzle: str = ""             # '' | 'row' (16-byte chunk ^ row % 8) | 'line' (^ the
                                  # 128-byte line % 8: the TMA's 128-byte mode)
    element_bytes: int = 2
    stages: int = 1

    def text(self) -> str:
        sw = f" swizzle-{self.swizzle}" if self.swizzle else ""
        return (f"shared<[{','.join(self.axes)}] row {self.row_elements}{sw} x{self.stages}>")


@dataclass(frozen=True)
class Slice:
    parent: "Layout"
    axis: str                     # the parent's axis this value does not have

    def text(self) -> str:
        return f"slice<{self.axis} of {self.parent.text()}>"


Layout = Blocked | Mma | Shared | Slice


def spread_axes(layout: Layout) -> frozenset[str]:
    """The axes a register layout spreads over threads or fragments (on any other axis a
    block holds one index)."""
    if isinstance(layout, Blocked):
        return frozenset(d.axis for d in layout.dims)
    if isinstance(layout, Mma):
        return frozenset((layout.rows, layout.cols))
    if isinstance(layout, Slice):
        return spread_axes(layout.parent) - {layout.axis}
    return frozenset(layout.axes)


def coords(layout: Layout, axes: tuple[str, ...], extents: dict[str, int]) -> np.ndarray:
    """int array [threads, fragment elements, len(axes)]: the block-tile coordinates of
    each thread's elements along `axes` (-1 where an element lies past the tile)."""
    if isinstance(layout, Slice):
        return _slice_coords(layout, axes, extents)
    if isinstance(layout, Blocked):
        return _blocked_coords(layout, axes, extents)
    if isinstance(layout, Mma):
        return _mma_coords(layout, axes, extents)
    raise TypeError(f"{type(layout).__name__} is not held in registers")


def _blocked_coords(lay: Blocked, axes, extents) -> np.ndarray:
    tid = np.arange(lay.threads)
    per_axis = []
    for a in axes:
        d = lay.dim(a)
        if d is None:     # a value constant along an axis the layout has no dim for
            per_axis.append(np.zeros((lay.threads, 1), int))
            continue
        t = (tid >> d.shift) & (d.threads - 1)
        frag = np.arange(d.reps)[:, None] * d.threads * d.vector + np.arange(d.vector)
        per_axis.append(t[:, None] * d.vector + frag.reshape(1, -1))
    return _product(per_axis, axes, extents)


def _product(per_axis: list[np.ndarray], axes, extents) -> np.ndarray:
    """Coordinates of the outer product of per-axis fragment positions, per thread."""
    threads = per_axis[0].shape[0] if per_axis else 1
    if not per_axis:
        return np.zeros((threads, 1, 0), int)
    grids = np.meshgrid(*[np.arange(p.shape[1]) for p in per_axis], indexing="ij")
    out = np.stack([p[:, g.reshape(-1)] for p, g in zip(per_axis, grids)], axis=-1)
    limit = np.array([extents.get(a, 1) for a in axes])
    return np.where((out < limit).all(-1, keepdims=True), out, -1)


def _mma_lane(role: str, lane: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of one lane's elements in one m16n8k16 instruction tile: the
    accumulator (16 x 8: c0..c3), A (16 x 16: a0..a7) or B (16 k x 8 n: b0..b3).
    Lane l is (group = l // 4, pair = l % 4)."""
    group, pair = lane // 4, lane % 4
    if role == "acc":
        e = np.arange(4)
        return group + 8 * (e // 2), 2 * pair + e % 2
    if role == "a":
        e = np.arange(8)
        return group + 8 * ((e // 2) % 2), 2 * pair + e % 2 + 8 * (e // 4)
    e = np.arange(4)
    return 2 * pair + e % 2 + 8 * (e // 2), np.full(4, group)


def _mma_coords(lay: Mma, axes, extents) -> np.ndarray:
    """Each unit's instruction tiles over its part of the tile: m16 blocks down its rows
    (a wgmma warp holds the 16 rows of its place in the warpgroup), n8 blocks across its
    columns, k16 blocks across an operand's whole K."""
    per_thread = []
    role = lay.role
    for t in range(lay.threads):
        unit = (t - lay.first_thread) // lay.unit_threads
        if t < lay.first_thread or unit >= lay.warps[0] * lay.warps[1]:
            per_thread.append(np.zeros((0, 2), int))
            continue
        r0 = (unit // lay.warps[1]) * lay.unit_tile[0]
        c0 = (unit % lay.warps[1]) * lay.unit_tile[1]
        if lay.instruction == "wgmma":
            r0 += 16 * (((t - lay.first_thread) % 128) // 32)
            m_blocks = [0]
        else:
            m_blocks = range(0, lay.unit_tile[0], 16)
        if role == "a":
            blocks = [(r0 + m, c) for m in m_blocks for c in range(0, extents[lay.cols], 16)]
        elif role == "b":
            blocks = [(k, c0 + n) for k in range(0, extents[lay.rows], 16)
                      for n in range(0, lay.unit_tile[1], 8)]
        else:
            blocks = [(r0 + m, c0 + n) for m in m_blocks for n in range(0, lay.unit_tile[1], 8)]
        row, col = _mma_lane(role, t % 32)
        per_thread.append(np.stack([np.concatenate([br + row for br, _ in blocks]),
                                    np.concatenate([bc + col for _, bc in blocks])], -1))
    width = max(p.shape[0] for p in per_thread)
    out = -np.ones((lay.threads, max(width, 1), 2), int)
    for t, p in enumerate(per_thread):
        out[t, :p.shape[0]] = p
    pos = {lay.rows: out[..., 0], lay.cols: out[..., 1]}
    got = np.stack([pos.get(a, np.where(out[..., 0] >= 0, 0, -1)) for a in axes], -1)
    limit = np.array([extents.get(a, 1) for a in axes])
    inside = ((got >= 0) & (got < limit)).all(-1, keepdims=True)
    return np.where(inside, got, -1)


def _slice_coords(lay: Slice, axes, extents) -> np.ndarray:
    """The parent's coordinates without the sliced axis: every thread holding a position of
    the parent's tile holds the reduced value of its row (duplicates dropped)."""
    parent_axes = tuple(axes) + (lay.axis,)
    full = coords(lay.parent, parent_axes, dict(extents, **{lay.axis: extents.get(lay.axis, 1)}))
    kept = full[..., :len(axes)]
    out = []
    for t in range(kept.shape[0]):
        rows = [tuple(x) for x in kept[t] if (x >= 0).all()]
        out.append(sorted(set(rows)))
    width = max((len(r) for r in out), default=0)
    arr = -np.ones((kept.shape[0], max(width, 1), len(axes)), int)
    for t, rows in enumerate(out):
        if rows:
            arr[t, :len(rows)] = rows
    return arr


def addresses(lay: Shared, extents: dict[str, int]) -> np.ndarray:
    """Element offset in one stage of every tile position, shaped by `lay.axes` in order:
    row-major with `row_elements` per row, then the 16-byte chunk's index XORed with
    row % 8 ('row', the cp.async rings of mma.sync) or with the 128-byte line % 8 ('line',
    the TMA's and wgmma's 128-byte mode), so that 8 rows of one chunk hit 8 banks."""
    rows = int(np.prod([extents[a] for a in lay.axes[:-1]])) if len(lay.axes) > 1 else 1
    cols = extents[lay.axes[-1]]
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    byte = (r * lay.row_elements + c) * lay.element_bytes
    if lay.swizzle == "row":
        byte = byte ^ ((r % 8) << 4)
    elif lay.swizzle == "line":
        byte = byte ^ (((byte // 128) % 8) << 4)
    return (byte // lay.element_bytes).reshape([extents[a] for a in lay.axes])
