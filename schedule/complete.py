"""A partial schedule completed from the default: 'the default, except these keys'.

A schedule (or a `kernels:` entry) may give only some keys of a kernel: `grid:` alone,
`block:` alone, `occupancy:` alone. The keys it leaves out come from the kernel's built-in
schedule (`default.py`), fitted to what it gives, so that the two agree:

- a given grid keeps the default block, with threads x vector along each axis cut to
  divide the given tile (a tile of 64 takes 64 x 1 or 16 x 4, never 256 x 8), and the
  contiguous axis given more threads where a whole warp would be missing;
- a given block keeps the default grid, with the tile of each axis it spreads threads
  over made a multiple of threads x vector (the nearest below, at least one step);
- given warps set the block's thread count where the block is the default's.

    >>> from .model import AxisBlock
    >>> default = KernelSchedule(grid=(("M", 1), ("N", 4096)),
    ...                          block=(("N", AxisBlock(256, 8)),))
    >>> complete(default, KernelSchedule(grid=(("N", 64),)), ("M", "N")).to_dict()
    {'grid': {'N': 64}, 'block': {'N': {'threads': 32, 'vector': 2}}}
    >>> complete(default, KernelSchedule(block=(("N", AxisBlock(64)),)), ("M", "N")).to_dict()
    {'grid': {'M': 1, 'N': 4096}, 'block': {'N': {'threads': 64}}}
"""
from __future__ import annotations

from dataclasses import replace

from .model import WAVE, AxisBlock, KernelSchedule

WARP = 32
MAX_REPS = 64      # vectors per thread along one axis (the layout's bound)


def complete(default: KernelSchedule, given: KernelSchedule, axes: tuple[str, ...],
             threads_per_sm: int | None = None) -> KernelSchedule:
    """`given` (what the schedule says for this kernel over `axes`) with every key it
    leaves out taken from `default`, fitted to the keys it gives. `threads_per_sm` (the
    target's) caps a default block so that a given occupancy fits an SM."""
    block = tuple((a, b) for a, b in given.block if a in axes)
    if block and _threads(block) < WARP:
        block = ()        # a block for axes this kernel mostly lacks: not for this kernel
    given = replace(given, block=block)
    ks = default.merged(given)
    if not given.block:
        most = None
        if threads_per_sm and isinstance(given.occupancy, int) and given.occupancy > 0:
            most = _pow2_dividing(1 << 20, threads_per_sm // given.occupancy)
        grid = dict(given.grid)       # the tiles the block must divide (a default's bend)
        ks = replace(ks, block=_fit_block(ks.block, grid, axes, given.warps, most))
    if not given.grid:
        ks = replace(ks, grid=_fit_grid(ks.grid, dict(ks.block)))
    return ks


def _threads(block) -> int:
    total = 1
    for _, ab in block:
        total *= ab.threads
    return total


def _pow2_dividing(n: int, cap: int) -> int:
    """The largest power of two that divides `n` and is at most `cap` (1 at least)."""
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


def _fit_block(block, grid: dict, axes: tuple[str, ...], warps: int | None,
               most: int | None) -> tuple:
    """The default block cut to the given grid tiles, and to `warps` (or at most `most`
    threads) where given."""
    fitted = []
    for axis, ab in block:
        tile = grid.get(axis)
        if tile == WAVE:
            continue                      # a walked axis has no threads
        if isinstance(tile, int):
            vector = _pow2_dividing(tile, ab.vector)
            ab = AxisBlock(_pow2_dividing(tile // vector, ab.threads), vector)
        fitted.append((axis, ab))
    total = _threads(fitted)
    want = warps * WARP if warps else \
        (max(WARP, most) if most is not None and total > most else None)
    if not axes or total == want or (want is None and total >= WARP):
        return tuple(fitted)
    # Too few threads, or not the number wanted: the contiguous axis takes what its tile
    # allows, and the nearest axis that has room (the block's row axis first) the rest.
    want, inner = want or WARP, axes[-1]
    vector = dict(fitted).get(inner, AxisBlock()).vector
    tile = grid.get(inner)
    # The default's row threads stay where the contiguous axis can take the rest: a
    # column reduction broadcast back needs its rows spread over threads, not walked.
    kept = _threads([(a, b) for a, b in fitted if a != inner])
    kept = kept if want % kept == 0 else 1
    cols = want // kept
    if isinstance(tile, int):
        vector = _pow2_dividing(tile, vector)
        cols = _pow2_dividing(tile // vector, cols)
        while cols < want // kept and vector > 1:     # narrower vectors before more rows
            vector //= 2
            cols = _pow2_dividing(tile // vector, want // kept)
    rows = want // cols
    out = [(inner, AxisBlock(cols, vector))]
    if rows > 1:
        own_row = [a for a, _ in fitted if a != inner]
        room = [a for a in own_row + [a for a in reversed(axes[:-1]) if a not in own_row]
                if grid.get(a) is None or (isinstance(grid[a], int) and grid[a] % rows == 0)]
        if not room:
            return tuple(fitted)          # no fit: the layout says why, at the grid key
        out.insert(0, (room[0], AxisBlock(rows)))
    return tuple(out)


def _fit_grid(grid, block: dict) -> tuple:
    """The default grid with each tile over threads made a multiple of threads x vector."""
    fitted = []
    for axis, tile in grid:
        ab = block.get(axis)
        if ab is not None and isinstance(tile, int):
            step = ab.threads * ab.vector
            tile = step * min(MAX_REPS, max(1, tile // step))
        fitted.append((axis, tile))
    return tuple(fitted)
