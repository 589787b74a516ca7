"""The products of a streamed kernel's step on wgmma (sm_90a), a warpgroup's 64 rows at
a time, and the arrangement of tiles in shared memory they read.

`em` is the kernel emitter (stream/sm90.py). Values are dicts keyed by register position
as in stream/emitter.py: wgmma's m64nN accumulator gives each warp of the warpgroup its
16 rows in the layout of mma.sync's m16n8 accumulator, so slot h of a warp is its rows
8h + lane/4 and the step's other ops are unchanged. Two products:

    scores:   a resident (rows x width) times a streamed tile (keys x width), transposed:
              both operands read from shared memory, k-major (m64n<keys>k16 per 16 of
              the width)
    weighted: a [rows, keys] value, its accumulator registers packed to 16-bit pairs as
              the A operand (wgmma's register A is mma.sync's A fragment per warp), times
              a streamed tile (keys x width) read n-major from shared memory
              (m64n<width>k16 per 16 keys)

Tiles in shared memory are panels of 64 columns (128 bytes of 16-bit elements): panel
p of a tile of n rows starts at p * n * 128, its rows 128 bytes apart, each 16-byte
chunk's place in its row XORed with row % 8. That is wgmma's 128-byte swizzle, whose
8-row groups are 1024 bytes apart (the descriptors' stride): a k-major operand advances
32 bytes a step of 16 along its row and a panel every 4 steps; an n-major one 16 rows
(2048 bytes) a step, its 64-column panels n * 128 bytes apart (the descriptors' lead).
Every tile starts 1024-aligned (the plan's tiles are whole 8-row groups of whole panels).
"""
from __future__ import annotations

from ..nvptx import ops as L
from ..nvptx import ptx_async as A
from ..nvptx.swizzle import LINE
from ..nvptx.swizzle import paneled as panels

GROUP = 8 * LINE               # an 8-row swizzle group
KINDS = {"bf16": "bf16", "fp16": "f16"}


def paneled(b, row, chunk, n_rows: int):
    """Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `n_rows` rows stored
    as 64-column panels."""
    return panels(b, row, chunk, n_rows * LINE)


def _kind(em, t) -> str:
    return KINDS[em.buffers[t.name].dtype.short]


def scores(em, a, c) -> dict:
    """a . c_j: this warpgroup's 64 rows of resident a against the step's keys of c."""
    b, sk = em.b, em.sk
    a_tile = b.add(b.add(em.base, L.i32(sk.resident_offset(a.name))),
                   b.mul(em.group_row, L.i32(LINE)))
    c_tile = b.add(em.stage_base, L.i32(sk.stage_offset(c.name)))
    acc = [L.f32(0.0)] * (sk.keys // 2)
    A.wgmma_fence(b)
    for kk in range(a.pad // 16):
        panel, step = divmod(kk, 4)
        da = A.smem_descriptor(b, b.add(a_tile, L.i32(panel * sk.rows * LINE + 32 * step)),
                               16, GROUP)
        dc = A.smem_descriptor(b, b.add(c_tile, L.i32(panel * sk.keys * LINE + 32 * step)),
                               16, GROUP)
        acc = A.wgmma(b, acc, da, dc, sk.keys, 16, _kind(em, a), _kind(em, c), False, False)
    A.wgmma_commit(b)
    acc = A.wgmma_wait(b, acc, 0)
    return {(h, (j, e)): acc[4 * j + 2 * h + e]
            for j in range(sk.keys // 8) for h in (0, 1) for e in (0, 1)}


def weighted(em, p: dict, acc: dict, t) -> dict:
    """round(p) . t_j + acc: p's registers (rounded to t's dtype) as the A operand."""
    b, sk = em.b, em.sk
    dtype = em.buffers[t.name].dtype
    out = [acc[(h, (je, e))] for je in range(t.pad // 8) for h in (0, 1) for e in (0, 1)]
    # Every A word is written before the fence, which orders them before the products.
    words = [[word for jb in (2 * kk, 2 * kk + 1) for h in (0, 1) for word in
              L.encode_pairs(b, [p[(h, (jb, 0))], p[(h, (jb, 1))]], dtype)]
             for kk in range(sk.keys // 16)]
    t_tile = b.add(em.stage_base, L.i32(sk.stage_offset(t.name)))
    A.wgmma_fence(b)
    for kk, a in enumerate(words):
        dt = A.smem_descriptor(b, b.add(t_tile, L.i32(16 * kk * LINE)), sk.keys * LINE, GROUP)
        out = A.wgmma_registers_a(b, out, a, dt, t.pad, _kind(em, t), True)
    A.wgmma_commit(b)
    out = A.wgmma_wait(b, out, 0)
    return {(h, (je, e)): out[4 * je + 2 * h + e]
            for je in range(t.pad // 8) for h in (0, 1) for e in (0, 1)}
