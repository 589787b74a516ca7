"""LLVM emission of a split scan's carry-in (`scan_carry`, ir/scan_steps.py says what it
computes; cpu/scan.scan_carry folds in the same order): a loop over the chunks before
this block's (after it, reversed), UNROLL chunks a step. A step issues the loads of its
chunks' totals first, so that they travel together (the fold is a chain: one load at a
time would wait out each one's latency), then folds them in scan order; a chunk past
this block's is masked to the identity. Indices and masks are made before the loop, so
that the values the emitter keeps for later ops are defined where every later op
sees them."""
from __future__ import annotations

import numpy as np

from . import ops as L
from .ptx_memory import asm_load_words, unpack_words

UNROLL = 8      # chunks' totals in flight per thread and fragment position


def scan_carry(e, op):
    """The carry-in state of emitter `e`'s op (one fragment per part)."""
    b, rev, part = e.b, bool(op.attr("reverse")), op.attr("chunks")
    shape = e.frag_shape(op.axes)
    dtypes, ident = e._scan_parts(op)
    bufs = [e.prog.buffer(name) for name in op.attr("carry")]
    others = tuple(a for a in bufs[0].axes if a != part)
    positions = list(np.ndindex(shape))
    masks = {idx: e.in_bounds(others, *idx) for idx in positions}
    for idx in positions:
        for a in others:
            e.index(a, *idx)
    mine = e.block_index[op.attr("axis")]
    first = b.sub(e.size(part), L.i32(1)) if rev else L.i32(0)
    entry = b.block
    head = b.append_basic_block("scan_carry_head")
    body = b.append_basic_block("scan_carry_body")
    done = b.append_basic_block("scan_carry_done")
    b.branch(head)
    b.position_at_end(head)
    chunk = b.phi(L.I32)
    chunk.add_incoming(first, entry)
    acc = {}
    for idx in positions:
        acc[idx] = tuple(b.phi(L.REGISTER[d]) for d in dtypes)
        for phi, i in zip(acc[idx], ident):
            phi.add_incoming(i, entry)
    b.cbranch(b.icmp_signed(">" if rev else "<", chunk, mine), body, done)
    b.position_at_end(body)
    steps = [b.sub(chunk, L.i32(k)) if rev else b.add(chunk, L.i32(k)) for k in range(UNROLL)]
    before = [b.icmp_signed(">" if rev else "<", c, mine) for c in steps]
    loaded = {(idx, k): [_load(e, buf, idx, part, c, b.and_(masks[idx], ok))
                         for buf in bufs]
              for idx in positions for k, (c, ok) in enumerate(zip(steps, before))}
    folded = {}
    for idx in positions:
        state = acc[idx]
        for k, ok in enumerate(before):
            state = e._select(ok, e._scan_combine(op, state, tuple(loaded[idx, k])), state)
        folded[idx] = state
    step = b.sub(chunk, L.i32(UNROLL)) if rev else b.add(chunk, L.i32(UNROLL))
    chunk.add_incoming(step, b.block)
    for idx in positions:
        for phi, value in zip(acc[idx], folded[idx]):
            phi.add_incoming(value, b.block)
    b.branch(head)
    b.position_at_end(done)
    out = tuple(np.empty(shape, dtype=object) for _ in dtypes)
    for idx in positions:
        for part_out, value in zip(out, acc[idx]):
            part_out[idx] = value
    return out


def _load(e, buf, idx, part: str, chunk, mask):
    """Chunk `chunk`'s total in `buf` at fragment position `idx` (0 where masked)."""
    b = e.b
    regs = asm_load_words(b, e.address(buf, *idx, at={part: chunk}), mask, 1, buf.dtype)
    word = unpack_words(b, regs, 1, buf.dtype)[0]
    return L.decode(b, word, buf.dtype) if buf.dtype.is_float else word
