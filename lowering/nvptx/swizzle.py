"""Where a 16-byte chunk of a tile's row lives in shared memory under the 128-byte swizzle
every tensor-core path uses: the chunk's place inside its 128-byte line XORed with the
row's index mod 8, so that 8 rows of one chunk fall in 8 distinct bank groups. ldmatrix
reads it without conflicts; it is also wgmma's and the TMA's 128-byte swizzle mode where
the tile starts on a 1024-byte boundary (8 lines)."""
from __future__ import annotations

from . import ops as L

LINE = 128                  # bytes of one swizzle line: 64 16-bit or 128 8-bit elements


def swizzled(b, row, chunk, row_bytes: int):
    """Byte offset of chunk `chunk` (i32) of row `row` (i32) in a tile stored row after
    row, `row_bytes` apart (a multiple of the line)."""
    linear = b.add(b.mul(row, L.i32(row_bytes)), b.shl(chunk, L.i32(4)))
    return b.xor(linear, b.shl(b.and_(row, L.i32(7)), L.i32(4)))


def paneled(b, row, chunk, panel_bytes: int):
    """Byte offset of chunk `chunk` of row `row` in a tile stored as panels one line
    wide (panel p, holding chunks 8p..8p+7 of every row, at p * panel_bytes; its rows a
    line apart): the arrangement wgmma's descriptors and the TMA's boxes address."""
    panel = b.lshr(chunk, L.i32(3))
    within = b.xor(b.and_(chunk, L.i32(7)), b.and_(row, L.i32(7)))
    return b.add(b.mul(panel, L.i32(panel_bytes)),
                 b.add(b.mul(row, L.i32(LINE)), b.shl(within, L.i32(4))))
