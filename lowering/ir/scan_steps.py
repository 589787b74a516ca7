"""Scans in the thread-level IR: one block walks the whole scanned axis of its rows.

A tile op `cumsum`/`cumprod`/`cummax`/`cummin` (attributes `axis`, `reverse`, `round`),
or a generic `scan` (its combine a program of register ops, tileir/scan_combine.py),
becomes thread-level ops over a tuple state, one fragment per part (one part for the named scans):

    scan_local  the thread's own elements: those outside the tensor made the scan's
                identity, then an inclusive scan along the vector lanes (the column axis
                only: a thread's vector is consecutive along it)
    scan_block  per repeat (a chunk of threads x vector consecutive elements), in scan
                order: a Kogge-Stone scan of the threads' totals over the warp's lanes
                (`lanes`: shuffle distances), the warps' totals through shared memory
                (`warp_bits`, `slot`: one word per warp and element, between barriers),
                then each element combined with the prefix of the earlier threads,
                warps and repeats; the running total is carried from repeat to repeat.
    scan_part   one part of the state (`index`), rounded as the policy says.
    scan_carry  a split scan's chunk (graph/scan_split.py): the fold, in scan order, of
                the totals (`carry`: a buffer per part, over [`chunks`, other axes]) of
                the chunks before this block's (after it, reversed), per element of the
                thread's fragment without the scanned axis; scan_block's second argument,
                where its running total starts. With `total` (a split scan's first
                kernel, graph/scan_split.py) scan_block gives the running state after its
                last repeat instead: the chunk's total, over the axes but the scanned one.

Elements along an axis are ordered repeat, thread, vector lane (graph/layout.py), so a
repeat is a contiguous chunk and carrying its total is exact. The scanned axis must be one
the block spreads threads over and covers whole, or a chunk of it with a carry-in; a scan
over the axis a block walks index by index is refused by name. `cpu/scan.py` executes these ops
and `nvptx/scan.py` emits them.
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError
from plait.dsl.cumulative import is_scan

from ..graph.layout import Layout
from ..tileir.scan_combine import named_program, scan_identity_value
from ..tileir.tile import TileOp
from .thread_rules import check_one_block_axis, smem_words, thread_bits

SCAN_STEPS = ("scan_local", "scan_carry", "scan_block", "scan_part")      # the thread ops of a scan


def scan_shape(layout: Layout, axis: str):
    """(lane bits, warp bits) of the scanned axis's thread index: bits below 5 of the
    thread id shuffle within a warp, the others go through shared memory."""
    bits = thread_bits(layout, axis)
    return tuple(b for b in bits if b < 5), tuple(b for b in bits if b >= 5)


def check_scan_axis(op: TileOp, layout: Layout, kernel: str) -> None:
    """Threads on the scanned axis, covering it whole, or a chunk of it (its grid tile)
    in a split scan's kernels (one gives the chunk's total, one starts from a carry-in)."""
    axis = op.attr("axis")
    split = op.attr("carry") is not None or op.attr("total") is not None
    if split and layout.map_of(axis) is not None and \
            (layout.loop is None or layout.loop.axis != axis):
        return
    check_one_block_axis(layout, axis, kernel, f"{op.op} over {axis}", "scan",
                         "a scan is walked by one block per row")


def scan_steps(op: TileOp, layout: Layout, kernel: str) -> tuple[dict, dict, int]:
    """(the attributes every step of scan `op` carries, those of its scan_block, the
    shared words it needs). The steps carry a tuple state (one part for cumsum and the
    others, whose combine is made a one-op program here)."""
    if not is_scan(op.op):
        raise PlaitError(f"scan_steps: {op.op!r} is not a scan")
    check_scan_axis(op, layout, kernel)
    axis = op.attr("axis")
    base = {"op": op.op, "axis": axis, "reverse": op.attr("reverse")}
    lane_bits, warp_bits = scan_shape(layout, axis)
    if op.op == "scan":
        base.update(combine=op.attr("combine"), results=op.attr("results"),
                    init=op.attr("init"), dtypes=op.attr("dtypes"))
    else:
        from_table = named_program(op.op, op.dtype)
        ident = scan_identity_value(op.op, op.dtype)
        base.update(combine=from_table[0], results=from_table[1], init=(ident,),
                    dtypes=(op.dtype,))
    m = layout.map_of(axis)
    lanes = 1 << len(lane_bits)
    # One repeat's threads' totals: a word per warp (along the axis) and per element of
    # the repeat's fragment without the scanned axis, for every other thread bit.
    row, col, vector = layout.fragment(op.axes)
    per_repeat = (col * vector) if m is layout.row else row
    words = sum((layout.threads // lanes) * per_repeat * smem_words(d) + 1
                for d in base["dtypes"])         # + 1: an int64 part is 8-byte aligned
    block = {"lanes": tuple(1 << b for b in range(len(lane_bits))), "warp_bits": warp_bits,
             "slot": 0}
    return base, block, words
