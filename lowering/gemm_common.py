"""LLVM helpers both contraction backends share: a phi-carried loop and the block's tile.

Kept apart from the backends so that sm_80 and sm_90a walk the output tiles in the
same order (the order `gemm_emulate.tile_of` runs on the CPU).
"""
from __future__ import annotations

from llvmlite import ir

from . import ops_llvm as L


def loop(b: ir.IRBuilder, fn, count, carried: list, body) -> list:
    """for i in range(count): carried = body(i, carried); returns the final carried values."""
    head, work, done = (fn.append_basic_block(n) for n in ("loop", "body", "done"))
    start = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(L.I32)
    i.add_incoming(L.i32(0), start)
    phis = []
    for v in carried:
        p = b.phi(v.type)
        p.add_incoming(v, start)
        phis.append(p)
    b.cbranch(b.icmp_signed("<", i, count), work, done)
    b.position_at_end(work)
    new = body(i, phis)
    i.add_incoming(b.add(i, L.i32(1)), b.block)
    for p, v in zip(phis, new):
        p.add_incoming(v, b.block)
    b.branch(head)
    b.position_at_end(done)
    return phis


def tile_coordinates(k, pid=None) -> tuple:
    """Tile `pid` (default: this block's index) -> (first row m0, first column n0,
    {batch axis: index}), rows grouped `raster` at a time (the same mapping as
    `gemm_emulate.tile_of`). `k` is the kernel emitter: it has `.g`, `.b`, `.sreg(name)`
    and `.size(axis)`."""
    g, b = k.g, k.b
    grid_m = b.sdiv(b.add(k.size(g.m), L.i32(g.tile_m - 1)), L.i32(g.tile_m))
    grid_n = b.sdiv(b.add(k.size(g.n), L.i32(g.tile_n - 1)), L.i32(g.tile_n))
    pid = k.sreg("ctaid.x") if pid is None else pid
    per_batch = b.mul(grid_m, grid_n)
    batch = b.udiv(pid, per_batch)
    pid = b.urem(pid, per_batch)
    width = b.mul(L.i32(g.raster), grid_n)
    first = b.mul(b.udiv(pid, width), L.i32(g.raster))
    left = b.sub(grid_m, first)
    rows = b.select(b.icmp_signed("<", left, L.i32(g.raster)), left, L.i32(g.raster))
    within = b.urem(pid, width)
    m0 = b.mul(b.add(first, b.urem(within, rows)), L.i32(g.tile_m))
    n0 = b.mul(b.udiv(within, rows), L.i32(g.tile_n))
    batch_index = {}
    for axis in reversed(g.outer_axes):  # the last batch axis varies fastest
        batch_index[axis] = b.urem(batch, k.size(axis))
        batch = b.udiv(batch, k.size(axis))
    return m0, n0, batch_index
