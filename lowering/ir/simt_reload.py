"""Reload instead of hold: a SIMT kernel whose rows outgrow the registers reads them again.

A softmax holds its row from the load until its last reduction is done, so every element
a thread loaded stays in a register across two block-wide exchanges. Over a vocabulary
row (50257 elements on 1024 threads: 56 a thread, under a cap of 64 registers) that
spills, and the spills go through L1 and L2 anyway. Here a value that is used after a
reduction that follows it is computed again after that reduction, from its loads (the
row comes back from L1 or L2) and the elementwise ops between; only what the reductions
made (a row's max and sum) is held. A value that cannot be recomputed (a load of a
buffer the kernel writes, a random number, a gather) is held as before.

Off by default until the device shows it faster: PLAIT_RELOAD_ROWS=1 turns it on for the
kernels whose held rows `would_spill`.
"""
from __future__ import annotations

import os

from plait.dsl.node import OPS

from ..graph.kernel_plan import REDUCE_OPS
from ..graph.layout import Layout
from ..target import Target
from ..tileir.tile import TileOp

SWITCH = "PLAIT_RELOAD_ROWS"
# ptxas (sm_90a, 13.0) spilled every softmax, log_softmax and their backward that held more
# than 3/4 of a thread's registers across a reduction (56 of 64, 64 of 64, 200 of 255, 104 of
# 128), and none that held at most that (48 of 64, 160 of 255, 96 of 128): the rest go to
# addresses, indices, exchanges and the loads ptxas hoists.
HELD_SHARE = 0.75
# Tile-level ops that compute an element from elements at the same position only.
_TILE_ELEMENTWISE = {"convert", "recip", "const"}
_KEEP = {"philox"}           # recomputing is exact, but costs more than holding


def enabled() -> bool:
    return os.environ.get(SWITCH, "0") == "1"


def _recomputable(op: TileOp, written: set[str]) -> bool:
    if op.op == "load":      # a plain load of a buffer no store of this kernel changes
        return not op.args and {k for k, _ in op.attrs} == {"buffer"} \
            and op.attr("buffer") not in written
    if op.op in _TILE_ELEMENTWISE:
        return True
    d = OPS.get(op.op)
    return d is not None and d.kind == "elementwise" and op.op not in _KEEP


def _epochs(ops: list[TileOp]) -> dict[int, int]:
    """Each op's epoch: how many reductions come before it in `ops`."""
    epoch, seen = {}, 0
    for op in ops:
        epoch[op.id] = seen
        seen += op.op in REDUCE_OPS
    return epoch


def held_words(ops: list[TileOp], lay: Layout) -> int:
    """The most 32-bit registers a thread spends on values held across a reduction: at
    each reduction, every value over the column axis made before it and used after it."""
    if lay.col is None:
        return 0
    per_axis = {m.axis: m.reps * m.vector for m in (lay.row, lay.col) if m is not None}
    epoch, by_id = _epochs(ops), {op.id: op for op in ops}
    last_use: dict[int, int] = {}
    for op in ops:
        for a in op.args:
            last_use[a] = max(last_use.get(a, 0), epoch[op.id])

    def words(op: TileOp) -> int:
        n = 2 if op.dtype.itemsize == 8 else 1
        for a in op.axes:
            n *= per_axis.get(a, 1)
        return n
    most = 0
    for boundary in range(1, max(epoch.values(), default=0) + 1):
        most = max(most, sum(words(by_id[i]) for i, used in last_use.items()
                             if lay.col.axis in by_id[i].axes
                             and epoch[i] < boundary <= used))
    return most


def would_spill(ops: list[TileOp], lay: Layout, target: Target) -> bool:
    """Whether the values held across reductions overflow a thread's share of `target`'s
    register file at this block size (and occupancy, where the schedule asks for one)."""
    blocks = lay.occupancy or 1
    share = target.registers_per_sm // (lay.threads * blocks)
    budget = HELD_SHARE * min(target.registers_per_thread, share)
    return held_words(ops, lay) > budget


def reload_rows(ops: list[TileOp], lay: Layout) -> list[TileOp]:
    """`ops` with every value over the column axis that a later epoch reads computed
    again in that epoch, where it can be (see the module's docstring)."""
    if lay.col is None or lay.loop is not None or not any(o.op in REDUCE_OPS for o in ops):
        return ops
    column = lay.col.axis
    written = {o.attr("buffer") for o in ops if o.op == "store"}
    by_id = {op.id: op for op in ops}
    epoch = _epochs(ops)
    fresh = max(by_id) + 1
    again: dict[tuple[int, int], int] = {}      # (value, epoch) -> its copy in that epoch
    out: list[TileOp] = []

    def in_epoch(value: int, e: int) -> int:
        nonlocal fresh
        op = by_id[value]
        if epoch[value] == e or column not in op.axes or not _recomputable(op, written):
            return value
        if (value, e) not in again:
            args = tuple(in_epoch(a, e) for a in op.args)
            copy = TileOp(fresh, op.op, args, op.axes, op.dtype, op.attrs)
            fresh += 1
            by_id[copy.id], epoch[copy.id] = copy, e
            out.append(copy)
            again[(value, e)] = copy.id
        return again[(value, e)]

    for op in ops:
        args = tuple(in_epoch(a, epoch[op.id]) for a in op.args)
        out.append(op if args == op.args else
                   TileOp(op.id, op.op, args, op.axes, op.dtype, op.attrs))
    return _without_dead(out, written)


def _without_dead(ops: list[TileOp], written: set[str]) -> list[TileOp]:
    """`ops` less the pure ones nothing reads any more (an original whose every user now
    reads its copy: a load left in its first epoch would still be issued there)."""
    used: set[int] = set()
    kept = []
    for op in reversed(ops):
        if op.id in used or not _recomputable(op, written):
            kept.append(op)
            used.update(op.args)
    return kept[::-1]
