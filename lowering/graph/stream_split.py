"""A streamed attention forward whose blocks are too few to fill the GPU, split along its
keys (flash-decoding): decoding's one to sixteen query rows over a long key cache make
one block per head and sequence, each walking every key tile alone.

Each index along a derived axis `<T>_splits<n>` takes one range of `chunk` keys (whole
key tiles): its blocks stream that range as a whole attention would, and store the
range's normalised sum o_c (fp32) and log-sum-exp lse_c (m + log l; -inf for a range
whose keys are all masked). A finish kernel combines them, as written here in the
graph's own ops:

    lse = log(sum(exp(lse_c - m), over=c)) + m      m = max(lse_c), 0 where it is -inf
    out = sum(w_c * o_c, over=c)                    w_c = exp(lse_c - lse), 0 where
                                                    lse_c = -inf (an empty range)

A row whose keys are all masked gets 0, as the unsplit stream gives it, and a saved
log-sum-exp of +inf there (what the backward reads, `tile_stream._logsumexp`).

On by default (PLAIT_STREAM_SPLIT=0 turns it off; on the H100, 2026-12-08, decoding over
T = 4096-131072 ran 1.1-3.6x faster split than not, at 0.86-0.98 of SDPA's best
backend, bench/RESULTS.md): `key_splits` decides from the blocks the kernel would have
against the target's SMs, and a block takes no more query rows than there are
(graph/stream_plans.py).
"""
from __future__ import annotations

import os
from dataclasses import replace

from plait.dsl.dtypes import DType
from plait.dsl.graph import rebuild
from plait.dsl.node import Node, make_attrs
from plait.schedule.kernel_names import FINISH, stage

from ..artifact import Buffer
from .streaming import Stream

SWITCH = "PLAIT_STREAM_SPLIT"
FEW_ROWS = 64          # query rows (decoding, speculative tokens) whose blocks split
MIN_TILES = 8          # key tiles a range walks at least (its prologue is paid per range)
THREADS_AIM = 1024     # threads a split aims to keep resident per SM (half of 2048):
                       # decoding reads k and v once, at the bandwidth that many loads hold


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0"


def key_splits(st: Stream, sizes: dict[str, int], rows: int, keys: int,
               multiprocessors: int) -> int:
    """Ranges of the keys where the blocks are fewer than the SMs, or their query rows
    FEW_ROWS or fewer: enough blocks (of warps of 16 rows) to keep THREADS_AIM threads on
    every SM, each range at least MIN_TILES key tiles; 1 (no split) otherwise, for the
    statistics kernel (no values) and when the switch is off."""
    if not enabled() or st.v is None:
        return 1
    blocks = _ceil(sizes[st.rows], rows)
    for axis in st.batch:
        blocks *= sizes[axis]
    if blocks >= multiprocessors and sizes[st.rows] > FEW_ROWS:
        return 1       # every SM has a block of many rows, whose products keep it busy
                       # (B1 H4 S8192 split in 3 took 6x the output in partials)
    tiles = _ceil(sizes[st.keys], keys)
    want = _ceil(multiprocessors * THREADS_AIM, 2 * rows * blocks)
    return max(1, min(want, tiles // MIN_TILES))


def split_stream(planner, name: str, out: str, st: Stream, splits: int, keys: int,
                 plan_stream) -> None:
    """Plan `st` (whose output is `out`) as `splits` key ranges and a finish kernel.
    `plan_stream(name, out, st, order)` makes a streamed kernel's plan."""
    chunk = _ceil(_ceil(planner.sizes[st.keys], splits), keys) * keys    # whole key tiles
    part = f"{st.keys}_splits{len(planner.derived)}"
    planner.derived.append((part, st.keys, chunk))
    planner.sizes[part] = _ceil(planner.sizes[st.keys], chunk)
    planner.axis_order = (part,) + planner.axis_order
    f32 = DType.FP32
    rows = st.batch + (st.rows,)
    o_name, lse_name = f"{name}.partial", f"{name}.partial_lse"
    o_part = Node(st.total.op, st.total.inputs, (part,) + st.total.axes, f32,
                  st.total.attrs + (("partial", part),), st.total.loc)
    lse_part = Node("logsumexp", (st.logits,), (part,) + rows, f32,
                    make_attrs(axis=st.keys, partial=part), st.total.loc)
    for buf, node in ((o_name, o_part), (lse_name, lse_part)):
        planner.temps.append(Buffer(buf, f32, node.axes, "temp"))
    parted = replace(st, out=o_part, batch=(part,) + st.batch, saved_lse=(lse_name, lse_part),
                     split=(part, chunk))
    planner.kernels.append(plan_stream(name, o_name, parted, planner.axis_order))
    o_in = Node("input", (), o_part.axes, f32, make_attrs(name=o_name), st.total.loc)
    lse_in = Node("input", (), lse_part.axes, f32, make_attrs(name=lse_name), st.total.loc)
    total, lse = _combine(o_in, lse_in, part)
    outputs = {out: st.out}
    swap = {st.total.uid: _cast(total, st.total.dtype)}
    if st.saved_lse is not None:
        saved_name, saved = st.saved_lse
        outputs[saved_name] = saved
        none = _op("eq", (lse, _const(float("-inf"))), lse.axes, DType.BOOL)
        swap[saved.uid] = _cast(_op("where", (none, _const(float("inf")), lse), lse.axes, f32),
                                saved.dtype)
    rest = rebuild(outputs, lambda n, ins: swap.get(n.uid) or (
        n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs, n.loc)))
    finish = stage(name, FINISH)
    planner.plan(finish, rest, planner._finish_schedule(rest, finish))


def _ceil(n: int, d: int) -> int:
    return -(-n // d)


def _combine(o_in: Node, lse_in: Node, part: str) -> tuple[Node, Node]:
    """(sum of the ranges' sums weighted by their share, the log-sum-exp of all keys)."""
    f32 = DType.FP32
    rows = tuple(a for a in lse_in.axes if a != part)
    ninf = _const(float("-inf"))
    m = _op("max", (lse_in,), rows, f32, axis=part)
    m_safe = _op("where", (_op("eq", (m, ninf), rows, DType.BOOL), _const(0.0), m), rows, f32)
    shifted = _op("exp", (_op("sub", (lse_in, m_safe), lse_in.axes, f32),), lse_in.axes, f32)
    lse = _op("add", (_op("log", (_op("sum", (shifted,), rows, f32, axis=part),), rows, f32),
                      m_safe), rows, f32)
    empty = _op("eq", (lse_in, ninf), lse_in.axes, DType.BOOL)
    weight = _op("where", (empty, _const(0.0), _op("exp", (_op("sub", (lse_in, lse),
                                                                 lse_in.axes, f32),),
                                                     lse_in.axes, f32)), lse_in.axes, f32)
    cols = tuple(a for a in o_in.axes if a != part)
    total = _op("sum", (_op("mul", (weight, o_in), o_in.axes, f32),), cols, f32, axis=part)
    return total, lse


def _op(op: str, inputs: tuple, axes: tuple, dtype: DType, **attrs) -> Node:
    return Node(op, inputs, axes, dtype, make_attrs(**attrs))


def _const(value: float) -> Node:
    return Node("const", (), (), DType.FP32, make_attrs(value=value))


def _cast(node: Node, dtype: DType) -> Node:
    return node if dtype == node.dtype else Node("cast", (node,), node.axes, dtype)
