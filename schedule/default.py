"""The built-in schedule for a kernel no schedule file covers.

    >>> default_kernel_schedule(("M", "N"), {"N"}, itemsize=2, sizes={"M": 4096, "N": 8192})
    KernelSchedule(grid=(('M', 1),), block=(('N', AxisBlock(threads=256, vector=8)),), warps=None, reduction=None, save=(), occupancy=None, cache_hints=False, contraction=None, prefetch=None, prefetch_into=None, stream=None)
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from .model import AxisBlock, KernelSchedule

DEFAULT_THREADS = 256
MIN_THREADS, MAX_THREADS = 32, 1024
PASSES_PER_THREAD = 4      # a row reduction: each thread takes 4 vectors of the row
MAX_ROW_PASSES = 32        # past 32 vectors per thread a row is split across blocks
ELEMENTWISE_UNROLL = 2     # an elementwise block covers 2 vectors per thread
COLUMN_ROWS, COLUMN_ROW_THREADS, COLUMN_THREADS = 64, 4, 64
LOOP_ROWS = 64             # rows a block walks when sizes are unknown
LOOP_BLOCKS = 256          # else about two blocks per SM of an H100/H200 (132 SMs)


def vector_width(itemsize: int) -> int:
    """Elements per 16-byte access: 16 for 1-byte types, else capped at 8."""
    width = max(1, 16 // itemsize)
    return width if itemsize == 1 else min(width, 8)


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def default_kernel_schedule(axes: tuple[str, ...], reduce_axes: Iterable[str], itemsize: int,
                            sizes: Mapping[str, int] | None = None) -> KernelSchedule:
    """A schedule for a kernel over `axes` (canonical order, last = contiguous).

    `reduce_axes` are the axes summed (or maxed) inside the kernel; `itemsize`
    the widest element stored, in bytes; `sizes` the axis sizes when known.
    Every block reads 16 bytes per access (`vector_width`). Three shapes:

    - row reduction (the innermost axis is reduced, e.g. layernorm's mean over
      N): one block per row, tile 1 on every other axis; threads on the row so
      that each takes about 4 vectors: clamp(next_pow2(ceil(N / (4*vector))),
      32, 1024), or 256 when N is unknown.
    - column reduction (an outer axis R is reduced and the innermost is not,
      e.g. dw = sum over M of dy*xhat): a block takes 64 rows of R and a strip of
      64*vector columns, with 4 x 64 threads; the partial sums over R's tiles
      are finished in a second kernel.
    - row statistics and a sum over rows together (a normalization's backward):
      the row-reduction block, walking ceil(R / 256) rows of R in a loop (64
      when R is unknown), so the sums over R accumulate in registers.
    - elementwise (nothing reduced on the innermost axis): 256 threads along
      it, 2 vectors each, so grid tile = 256*vector*2; tile 1 elsewhere.

        >>> default_kernel_schedule(("M", "N"), {"M"}, itemsize=4).to_dict()
        {'grid': {'M': 64, 'N': 256}, 'block': {'M': {'threads': 4}, 'N': {'threads': 64, 'vector': 4}}}
        >>> default_kernel_schedule(("M", "N"), set(), itemsize=2).to_dict()
        {'grid': {'M': 1, 'N': 4096}, 'block': {'N': {'threads': 256, 'vector': 8}}}
    """
    axes = tuple(axes)
    if not axes:
        return KernelSchedule()  # a kernel of scalars: nothing to spread
    reduced = set(reduce_axes)
    inner, outer = axes[-1], axes[:-1]
    vector = vector_width(itemsize)
    rows = [a for a in outer if a in reduced]
    if rows and inner not in reduced:
        row = rows[-1]  # the reduced axis nearest the contiguous one
        grid = [(a, COLUMN_ROWS if a == row else 1) for a in outer]
        grid.append((inner, COLUMN_THREADS * vector))
        block = ((row, AxisBlock(COLUMN_ROW_THREADS)), (inner, AxisBlock(COLUMN_THREADS, vector)))
        return KernelSchedule(grid=tuple(grid), block=block)
    if rows and inner in reduced:
        # Row statistics and a sum over rows (a normalization's backward): each block
        # walks LOOP_ROWS rows one at a time, accumulating the column sums in registers.
        row = rows[-1]
        count = LOOP_ROWS
        if sizes and row in sizes:
            count = max(1, -(-sizes[row] // LOOP_BLOCKS))
        base = default_kernel_schedule(axes, {inner}, itemsize, sizes)
        return KernelSchedule(grid=tuple((a, count if a == row else t) for a, t in base.grid),
                              block=base.block)
    if inner in reduced:
        threads = DEFAULT_THREADS
        grid = tuple((a, 1) for a in outer)
        if sizes and inner in sizes:
            per_pass = vector * PASSES_PER_THREAD
            threads = min(max(next_pow2(-(-sizes[inner] // per_pass)), MIN_THREADS), MAX_THREADS)
            if sizes[inner] > threads * vector * MAX_ROW_PASSES:
                # A row longer than a block can hold in registers: blocks take strips of
                # it and a second kernel finishes the reduction over the strips.
                grid += ((inner, threads * vector * PASSES_PER_THREAD),)
        return KernelSchedule(grid=grid, block=((inner, AxisBlock(threads, vector)),))
    tile = DEFAULT_THREADS * vector * ELEMENTWISE_UNROLL
    narrow = _narrow_rows(inner, outer, vector, sizes)
    if narrow is not None:
        return narrow
    return KernelSchedule(grid=tuple((a, 1) for a in outer) + ((inner, tile),),
                          block=((inner, AxisBlock(DEFAULT_THREADS, vector)),))


def _narrow_rows(inner: str, outer: tuple, vector: int, sizes) -> KernelSchedule | None:
    """An elementwise block over several rows when the contiguous axis is too short for
    256 threads (a rotary [B, H, S, 128] in bf16 needs 16 threads a row): the threads
    that one row leaves over take further rows of the nearest outer axis longer than 1,
    so that every thread has work. None where the axis is long enough or sizes unknown."""
    if not sizes or inner not in sizes:
        return None
    lanes = next_pow2(-(-sizes[inner] // vector))
    if lanes * 2 > DEFAULT_THREADS:
        return None
    row = next((a for a in reversed(outer) if sizes.get(a, 1) > 1), None)
    if row is None:
        return None
    # as many rows as fill 256 threads, fewer for a short axis (but a warp at least)
    rows = min(DEFAULT_THREADS // lanes, max(next_pow2(sizes[row]), -(-32 // lanes)))
    grid = tuple((a, rows * ELEMENTWISE_UNROLL if a == row else 1) for a in outer)
    return KernelSchedule(grid=grid + ((inner, lanes * vector),),
                          block=((row, AxisBlock(rows)), (inner, AxisBlock(lanes, vector))))
