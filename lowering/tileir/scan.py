"""Scans in the thread program: one block walks the whole scanned axis of its rows.

A tile op `cumsum`/`cumprod`/`cummax`/`cummin` (attributes `axis`, `reverse`, `round`),
or a generic `scan` (its combine a program of register ops, scan_combine.py), becomes
thread ops over a tuple state, one fragment per part (one part for the named scans):

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

Elements along an axis are ordered repeat, thread, vector lane (graph/layout.py), so a
repeat is a contiguous chunk and carrying its total is exact. The scanned axis must be one
the block spreads threads over and covers whole: a scan split across blocks, or over the
axis a block walks index by index, is refused by name. `cpu/scan.py` executes these ops
and `nvptx/scan.py` emits them.
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError
from plait.dsl.cumulative import is_scan

from ..graph.layout import Layout
from .scan_combine import named_program, scan_identity_value
from .tile import TileOp

SCAN_STEPS = ("scan_local", "scan_block", "scan_part")      # the thread ops of a scan


def smem_words_of(dtype) -> int:
    return 2 if dtype.itemsize == 8 else 1


def scan_shape(layout: Layout, axis: str):
    """(lane bits, warp bits) of the scanned axis's thread index: bits below 5 of the
    thread id shuffle within a warp, the others go through shared memory."""
    m = layout.map_of(axis)
    bits = tuple(range(m.shift, m.shift + m.threads.bit_length() - 1))
    return tuple(b for b in bits if b < 5), tuple(b for b in bits if b >= 5)


def check_scan_axis(op: TileOp, layout: Layout, kernel: str) -> None:
    axis = op.attr("axis")
    m = layout.map_of(axis)
    if layout.loop is not None and axis == layout.loop.axis:
        raise PlaitError(f"kernel {kernel}: {op.op} over {axis}: the block walks {axis} "
                         "index by index (a grid tile and no threads); a scan needs "
                         f"threads on {axis}: block: {{{axis}: {{threads: ...}}}}")
    if m is None or m.tile is not None:
        raise PlaitError(f"kernel {kernel}: {op.op} over {axis} is split across blocks "
                         f"(or {axis} has no threads); a scan is walked by one block per "
                         f"row: give {axis} threads and no grid tile")


def scan_steps(op: TileOp, layout: Layout, kernel: str) -> tuple[dict, dict, int]:
    """(the attributes every step of scan `op` carries, those of its scan_block, the
    shared words it needs). The steps carry a tuple state (one part for cumsum and the
    others, whose combine is made a one-op program here)."""
    if not is_scan(op.op):
        raise PlaitError(f"expand_scan: {op.op!r} is not a scan")
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
    words = sum((layout.threads // lanes) * per_repeat * smem_words_of(d) + 1
                for d in base["dtypes"])         # + 1: an int64 part is 8-byte aligned
    block = {"lanes": tuple(1 << b for b in range(len(lane_bits))), "warp_bits": warp_bits,
             "slot": 0}
    return base, block, words


def expand_scan(op: TileOp, args, layout: Layout, ops: list[TileOp],
                kernel: str) -> tuple[int, int]:
    """Append the scan's thread ops to `ops`; (the result's id, shared words it needs).
    A named scan's result is its one part."""
    base, block, words = scan_steps(op, layout, kernel)

    def emit(name, args, **attrs):
        merged = dict(base, **attrs) if name != "scan_part" else attrs
        ops.append(TileOp(len(ops), name, tuple(args), op.axes, op.dtype,
                          tuple(sorted((k, v) for k, v in merged.items() if v is not None))))
        return len(ops) - 1

    local = emit("scan_local", args)
    done = emit("scan_block", (local,), **block)
    if op.op != "scan":
        done = emit("scan_part", (done,), index=0, round=op.attr("round"))
    return done, words
