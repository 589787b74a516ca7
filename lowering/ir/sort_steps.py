"""A sort in a SIMT kernel: one block sorts each row with a bitonic network in shared
memory. The thread-level IR (`ir/simt_threads.py`) writes a tile op `sort` (attributes
`axis`, `descending`; results: the values in their register dtype, the int32 indices) as

    sort_block  the thread's fragment in; every element's (key, index) pair out, sorted
                (attributes: `axis`, `descending`, `width` the network's power of two,
                `slot` its first shared word). Steps: a barrier; every position of the
                network written, the row's elements as (value, its position), the rest
                (positions from the axis's extent up to `width`) as sentinels whose index
                is their position, so that they sort after every element; a barrier; for
                each stage (k = 2, 4, ..., width) and pass (j = k/2, ..., 1), each thread
                compares and swaps its pairs (i, i ^ j) for i with bit j clear, ascending
                where bit k of i is clear, then a barrier; each thread reads its positions.
    sort_part   part `index` of the sorted state: 0 the values, 1 the indices.

A topk's sort reads only its first k positions: `sort_block` then has `chunk`, the power
of two at or above k (below `width`), and runs fewer steps. The stages k = 2, ..., chunk
sort every run of `chunk` positions the same way (the last stage's direction is not
alternated); then each round halves the runs that count: with span s = 2 chunk, 4 chunk,
..., width, the run at c s (sorted) and the run at c s + s/2 (sorted) give position
c s + i the better of the pair (c s + i, c s + s/2 + chunk - 1 - i), a bitonic run that
holds the best `chunk` of both, which the passes j = chunk/2, ..., 1 sort (each pair
(i, i ^ j) in order, a barrier after each). Positions 0..chunk-1 end sorted; the rest
hold leftovers, never read. About width log(chunk) compares instead of width log^2(width).

The order is total (no two (key, index) pairs are equal), so any correct network gives
the one result: the stable sort. `precedes(a, b)`: a sentinel (index >= extent) follows
every element and sentinels go by index; NaN follows every number ascending and precedes
it descending (NaNs go by index); numbers go by value (ascending or descending), equal
values by index. `cpu/sort.py` runs the same network on the CPU, `nvptx/sort.py` emits it.

A block holds one row of the sorted axis: the axis's threads and repeats cover it whole,
and no other axis is spread over the block's threads or repeats (refused by name).
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError
from plait.dsl.sort import SORT_MAX_EXTENT

from ..graph.layout import Layout
from .thread_rules import check_one_block_axis

SORT_STEPS = ("sort_block", "sort_part")       # the thread ops of a sort


def network_width(layout: Layout, axis: str) -> int:
    """The bitonic network's size: the power of two at or above the positions the block's
    threads hold (repeats x threads x vector; fixed by the fragment, not the size)."""
    m = layout.map_of(axis)
    held = m.reps * m.threads * m.vector
    return 1 << max(held - 1, 0).bit_length()


def sort_steps(layout: Layout, axis: str, kernel: str,
               keep: int | None = None) -> tuple[dict, int]:
    """(the attributes of `sort_block` but its slot, shared words it needs): one word
    for each key and one for each index of the network. `keep` (a topk's k): only the
    first k positions are read, so the network keeps the best `chunk` (see above)."""
    check_one_block_axis(layout, axis, kernel, f"sort over {axis}", "sort",
                         "a row is sorted by one block")
    m = layout.map_of(axis)
    other = layout.col if m is layout.row else layout.row
    if other is not None and other.extent > 1:
        raise PlaitError(f"kernel {kernel}: sort over {axis} beside {other.axis} spread over "
                         f"the block ({other.extent} of it per block); a block sorts one row: "
                         f"give {other.axis} a grid tile of 1 and no threads")
    width = network_width(layout, axis)
    if width > SORT_MAX_EXTENT:
        raise PlaitError(f"kernel {kernel}: sort over {axis}: the block's threads hold "
                         f"{m.reps * m.threads * m.vector} positions, more than a network "
                         f"of {SORT_MAX_EXTENT} holds: give {axis} fewer threads")
    chunk = 1 << max(keep - 1, 0).bit_length() if keep is not None else width
    return {"axis": axis, "width": width, **({"chunk": chunk} if chunk < width else {})}, \
        2 * width
