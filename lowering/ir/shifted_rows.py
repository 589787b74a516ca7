"""Vector accesses to rows that start unaligned: a window shifted back to the alignment.

Rows of N elements with N not a multiple of the layout's vector V start at element
offsets r * N that are not multiples of V, so today every access to them is one element
wide (`thread_rules.vector_for`): a bf16 argmax over GPT-2's 50257-wide rows loads two
bytes at a time. Instead the block's column index is shifted back by the row's *lead*,

    lead(row) = (offset of the row's first element) mod V
    column    = c * (T * V) + t * V + v - lead(row)

so that every vector starts at an offset that is a multiple of V: aligned whenever the
buffer's base is. Columns outside [0, N) are masked as a row's tail always was (an
unsigned compare also catches the negative ones); the layout gets the repeats that cover
N + V - 1 columns. Vectors wholly inside the row stay one instruction; one that straddles
either end is issued as a vector when it is wholly inside at run time and element by
element otherwise (`nvptx/shifted_rows.py`); the CPU executor shifts its indices alike.

Every buffer read or written along the column axis must share the lead: here, all have
the same axes (a softmax's input and output, an argmax's logits). A kernel that also reads
a row broadcast along another axis (a bias), walks an axis in a loop, tiles the row over
blocks, or holds a remapped load, scan, sort or scatter keeps the element-wide accesses.
Off by default until the device shows it at parity or better: PLAIT_SHIFTED_ROWS=1 turns
it on.
"""
from __future__ import annotations

import dataclasses
import os

from ..graph.layout import Layout
from ..tileir.tile import TileProgram

MAX_REPEATS = 64                       # as the layout's bound (graph/layout.py)
# Ops whose accesses follow other indices than the row's plain columns.
_REMAPPING_ATTRS = ("take", "view", "rotate", "blocks")
_OTHER_PATHS = ("scatter_add", "sort")


def enabled() -> bool:
    return os.environ.get("PLAIT_SHIFTED_ROWS", "0") == "1"


def shifted_layout(layout: Layout, tile: TileProgram, sizes: dict[str, int],
                   aligned: bool) -> Layout:
    """`layout` with the column index shifted by each row's lead where `tile` qualifies
    (the module docstring says when), else `layout` unchanged."""
    col = layout.col
    if not (enabled() and aligned and col is not None and col.vector > 1
            and col.tile is None and layout.loop is None):
        return layout
    n = sizes[col.axis]
    if n % col.vector == 0:
        return layout
    along = {b.axes for b in tile.buffers if b.axes and b.axes[-1] == col.axis}
    if len(along) != 1 or any(col.axis in b.axes[:-1] for b in tile.buffers):
        return layout
    for op in tile.ops:
        attrs = dict(op.attrs)
        if op.op in _OTHER_PATHS or any(attrs.get(a) for a in _REMAPPING_ATTRS):
            return layout
        if op.op.startswith("cum") or op.op == "scan":
            return layout
    reps = -(-(n + col.vector - 1) // (col.threads * col.vector))
    if reps > MAX_REPEATS:
        return layout
    return dataclasses.replace(layout, col=dataclasses.replace(col, reps=reps),
                               lead_axes=next(iter(along)))


def lead_pad(layout: Layout) -> int:
    """Columns a shifted row spans beyond its N (0 where nothing is shifted)."""
    return layout.col.vector - 1 if layout.lead_axes else 0
