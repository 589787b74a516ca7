"""What a SIMT kernel's thread layout decides for its thread-level ops: how many elements
one memory instruction moves, which thread-index bits spread an axis, and how many 4-byte
shared-memory words a value takes. The thread-level pass (`simt_threads.py`) applies
them; the emitter and the CPU executor read the same rules where they lay out shared memory.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError

from ..artifact import Buffer
from ..graph.layout import Layout

# Loop accumulators of more elements per thread than this live in shared memory: a
# normalization's dw and db over a whole row would otherwise take most registers and
# leave room for one block per SM.
MAX_REGISTER_ACCUMULATORS = 8


def smem_words(dtype: DType) -> int:
    """4-byte shared-memory words one register value of `dtype` takes (an int64: 2)."""
    return 2 if dtype.itemsize == 8 else 1


def thread_bits(layout: Layout, axis: str) -> tuple[int, ...]:
    """The bits of the thread index that spread `axis` (none when no threads do)."""
    m = layout.map_of(axis)
    if m is None:
        return ()
    return tuple(range(m.shift, m.shift + m.threads.bit_length() - 1))


def vector_for(buffer: Buffer, layout: Layout, aligned: bool, sizes: dict[str, int]) -> int:
    """Elements per memory instruction: the layout's vector, split to at most 16 bytes,
    or 1 when rows of this buffer may start unaligned."""
    col = layout.col
    if not aligned or col is None or not buffer.axes or buffer.axes[-1] != col.axis:
        return 1
    vec = col.vector
    # rows shifted to their alignment (ir/shifted_rows.py) start at multiples of vec
    shifted = layout.lead_axes == buffer.axes
    while vec > 1 and (vec * buffer.dtype.itemsize > 16 or (sizes[col.axis] % vec
                                                            and not shifted)):
        vec //= 2
    return vec


def check_one_block_axis(layout: Layout, axis: str, kernel: str, what: str, kind: str,
                         walked_by: str) -> None:
    """`what` (e.g. "cumsum over N"), a `kind` of op (scan, sort), needs `axis` spread over
    the block's threads and covered whole by one block; `walked_by` says why, in the error
    ("a scan is walked by one block per row")."""
    m = layout.map_of(axis)
    if layout.loop is not None and axis == layout.loop.axis:
        raise PlaitError(f"kernel {kernel}: {what}: the block walks {axis} index by index "
                         f"(a grid tile and no threads); a {kind} needs threads on {axis}: "
                         f"block: {{{axis}: {{threads: ...}}}}")
    if m is None or m.tile is not None:
        raise PlaitError(f"kernel {kernel}: {what} is split across blocks (or {axis} has "
                         f"no threads); {walked_by}: give {axis} threads and no grid tile")


def staged_row_words(layout: Layout, buf: Buffer) -> int:
    """Words one row of `buf` takes in a ring slot: every thread's fragment of it."""
    return int(np.prod(layout.fragment(buf.axes))) * buf.dtype.itemsize // 4 * layout.threads
