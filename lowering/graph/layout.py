"""How a kernel's tile is spread over the threads of a block.

A block spreads threads over at most two axes: the *column* axis (the
kernel's innermost, contiguous one) and one *row* axis. It may also *loop*
over one gridded axis whose tile has no threads (index by index, accumulating
reductions over it in registers). Every other axis is gridded with tile 1. Thread t is (row thread tr, column thread tc) with
t = tr * Tc + tc, so column threads are adjacent lanes of a warp. Each thread
holds a fragment of shape (Rr, Rc, V):

    row index    = block_row_base + r * Tr + tr
    column index = block_col_base + c * (Tc * V) + tc * V + v

so that each warp touches Tc * V consecutive elements per step (coalesced,
V-wide vector accesses).
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.schedule.model import AxisBlock, KernelSchedule, Schedule
from plait.schedule.errors import kernel_error
from plait.schedule.target_checks import occupancy_problem
from plait.schedule.thread_load import check_thread_load

from ..target import DEFAULT_TARGET, get_target


@dataclass(frozen=True)
class AxisMap:
    axis: str
    tile: int | None      # grid tile, or None when the block covers the whole axis
    extent: int           # elements of the axis one block covers
    threads: int
    vector: int
    reps: int             # fragment length along the axis (in vectors)
    shift: int            # first bit of this axis's thread index within tid


@dataclass(frozen=True)
class Layout:
    row: AxisMap | None
    col: AxisMap | None
    grid: tuple[tuple[str, int], ...]    # gridded axes, last varies fastest
    threads: int
    partial_axes: tuple[tuple[str, str], ...] = ()   # derived axis -> the gridded axis
    occupancy: int | None = None                      # blocks per SM to leave room for
    loop: AxisMap | None = None                       # the axis a block walks index by index
    cache_hints: bool = True
    prefetch: int = 1                                 # loop steps whose loads run ahead
    prefetch_into: str = "registers"                  # or "shared": a cp.async ring
    lead_axes: tuple[str, ...] = ()   # rows shifted to their alignment: whose (ir/shifted_rows.py)

    def map_of(self, axis: str) -> AxisMap | None:
        for m in (self.row, self.col):
            if m is not None and m.axis == axis:
                return m
        return None

    def fragment(self, axes) -> tuple[int, int, int]:
        row = self.row.reps if self.row is not None and self.row.axis in axes else 1
        col = self.col is not None and self.col.axis in axes
        return (row, self.col.reps if col else 1, self.col.vector if col else 1)

    def text(self) -> str:
        parts = []
        for kind, m in (("row", self.row), ("col", self.col)):
            if m is not None:
                parts.append(f"{kind} {m.axis}: extent {m.extent} = {m.reps} reps x "
                             f"{m.threads} threads x {m.vector} vector")
        grid = ", ".join(f"{a}:{t}" for a, t in self.grid) or "-"
        occ = f" occupancy={self.occupancy}" if self.occupancy else ""
        if self.loop is not None:
            parts.append(f"loop {self.loop.axis}: {self.loop.tile} per block")
        if self.lead_axes:
            parts.append(f"rows shifted to the alignment of [{','.join(self.lead_axes)}]")
        return f"layout threads={self.threads}{occ} grid({grid}) " + "; ".join(parts)


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _log2(n: int) -> int:
    return n.bit_length() - 1


def effective_grid(axes: tuple[str, ...], ks: KernelSchedule) -> dict[str, int]:
    """Gridded axes and their tiles: what the schedule grids, plus every axis other than
    the innermost that the block does not spread threads over (tile 1)."""
    grid = {a: t for a, t in ks.grid if a in axes}
    block = dict(ks.block)
    for a in axes[:-1]:
        if a not in grid and block.get(a, AxisBlock()).threads == 1:
            grid[a] = 1
    return grid


def make_layout(name: str, axes: tuple[str, ...], ks: KernelSchedule, sizes: dict[str, int],
                partial_axes: dict[str, str], schedule: Schedule | None = None,
                target=None) -> Layout:
    """The layout of kernel `name` over `axes` under schedule `ks` for these sizes, on
    `target` (its target-table entry; the default target's without).
    `schedule` (whence `ks` came) only places schedule errors at their file and line:
    what is refused here depends on the sizes or on the kernel's cut, which validation
    does not know."""
    target = target or get_target(DEFAULT_TARGET)

    def refuse(key: str, message: str):
        raise kernel_error(schedule, name, key, message)
    grid = effective_grid(axes, ks)
    block = {a: b for a, b in ks.block if a in axes}
    col_axis = axes[-1] if axes else None
    # A gridded axis with a tile but no threads is walked by the block, one index at a time.
    loops = [a for a in axes[:-1] if a not in block and grid[a] > 1]
    if len(loops) > 1:
        refuse("grid", f"a block walks at most one axis in a loop, but "
               f"{', '.join(loops)} have grid tiles > 1 and no threads")
    loop = AxisMap(loops[0], grid[loops[0]], grid[loops[0]], 1, 1, grid[loops[0]], 0) \
        if loops else None
    row_candidates = [a for a in axes[:-1] if a in block and a not in loops]
    if len(row_candidates) > 1:
        refuse("block", f"a block may cover more than one element of at most two axes, "
               f"but {', '.join(row_candidates)} and {col_axis} all have more; grid the "
               f"others with tile 1 (grid: {{{row_candidates[0]}: 1}})")
    maps = {}
    shift = 0
    for axis in ([col_axis] if col_axis else []) + row_candidates:
        ab = block.get(axis, AxisBlock())
        if axis != col_axis and ab.vector != 1:
            refuse(f"block.{axis}", f"only the innermost axis {col_axis} can be "
                   f"vectorized, not {axis}")
        if not _pow2(ab.threads) or not _pow2(ab.vector):
            refuse(f"block.{axis}", f"threads and vector along {axis} must be powers "
                   f"of two (got {ab.threads} and {ab.vector})")
        tile = grid.get(axis)
        extent = tile if tile is not None else sizes[axis]
        step = ab.threads * ab.vector
        if tile is not None and tile % step:
            refuse(f"grid.{axis}", f"grid tile {tile} of {axis} is not a multiple of "
                   f"threads x vector = {step}")
        if tile is not None and tile > sizes[axis]:
            # One block covers the whole axis: its threads hold what the axis has, in
            # whole steps, not the tile (a tile of 64 over 1 index unrolled 64 times).
            extent = -(-sizes[axis] // step) * step
        reps = -(-extent // step)
        if reps > 64:
            refuse(f"block.{axis}", f"each thread would hold {reps} vectors along "
                   f"{axis} (extent {extent}); give {axis} more threads or grid it")
        maps[axis] = AxisMap(axis, tile, extent, ab.threads, ab.vector, reps, shift)
        shift += _log2(ab.threads)
    # A kernel over no axes (an output of constants and scalars) has nothing to spread:
    # one warp computes the value, every lane the same, and their stores agree.
    threads = 1 << shift if maps else target.warp
    if threads < target.warp or threads > target.threads_per_block:
        refuse("block", f"{threads} threads per block over its axes {', '.join(axes)}; "
               f"{target.name} takes {target.warp} to {target.threads_per_block} (schedule "
               f"block: {ks.to_dict().get('block')}, grid: {ks.to_dict().get('grid')})")
    if ks.warps is not None and ks.warps * target.warp != threads:
        refuse("warps", f"warps {ks.warps} disagrees with {threads} threads")
    # Elements per thread over all axes, and the rows a walking block prefetches into
    # registers (prefetch_into: shared keeps them out of registers).
    held = {m.axis: m.reps * m.vector for m in maps.values()}
    ahead = 1 if ks.prefetch is None else ks.prefetch
    check_thread_load(name, {a: held[a] for a in axes if a in held},
                      1 + ahead if loop is not None and ks.prefetch_into != "shared" else 1,
                      schedule)
    gridded = tuple((a, grid[a]) for a in axes if a in grid)
    row = maps.get(row_candidates[0]) if row_candidates else None
    too_many = occupancy_problem(target, ks.occupancy, threads)
    if too_many:
        refuse("occupancy", too_many)
    if ks.prefetch_into == "shared" and ks.prefetch == 0:
        refuse("prefetch", "prefetch_into: shared needs prefetch of 1 or more")
    return Layout(row, maps.get(col_axis), gridded, threads, tuple(partial_axes.items()),
                  ks.occupancy, loop, ks.cache_hints,
                  1 if ks.prefetch is None else ks.prefetch, ks.prefetch_into or "registers")
