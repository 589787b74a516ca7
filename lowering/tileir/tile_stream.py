"""Stage 3 for a streamed kernel: the online-softmax loop as a tile program.

The tile IR (`tile.py`) gains what streaming needs: `dot`, a product of two tiles summed
over an axis (optionally added to an accumulator), and a loop over one axis in steps,
carrying values from one step to the next:

    %l = loop axis=T step=64 carry=(%m0, %l0, %acc0)      the body follows, up to `yield`
    %c = carried loop=%l index=0                          a carried value inside the body
    %y = yield %a %b %c loop=%l                           the values the next step gets
    %r = result loop=%l index=0                           a carried value after the loop

The body of attention is the online-softmax identity, with the logits computed by the
algorithm's own ops (scale, masks on index(), soft-capping):

    s = f(dot(q, k_tile))                    m_new = max(m, rowmax(s)), -inf kept
    p = exp(s - m_safe)                      m_safe = m_new, or 0 where m_new = -inf
    alpha = exp(m - m_safe)                  l = l * alpha + rowsum(p)
    acc = dot(round(p), v_tile, acc * alpha)
    out = acc / l after the loop, 0 for a row whose keys are all masked (l = 0)
    lse = m + log(l), when the forward saves it for the backward (+inf where l = 0)

A row whose keys are all masked gives 0 (as the flash kernels of torch's SDPA do), not
the NaN that exp(-inf - -inf) gives the unstreamed softmax.
"""
from __future__ import annotations

from plait.dsl.dtypes import DType
from plait.dsl.node import topo_order

from ..graph.kernel_plan import KernelPlan
from ..graph.policy import ResolvedPolicy
from .tile import TileProgram, _Builder

NEG_INF = float("-inf")


def build_stream_program(plan: KernelPlan, buffers: dict, policy: ResolvedPolicy) -> TileProgram:
    st = plan.stream
    b = _Builder(plan, buffers, policy)
    f32 = DType.FP32
    rows = st.batch + (st.rows,)
    out_axes = rows + (st.cols,)
    step = dict(plan.schedule.stream)[st.keys]
    for name in (st.q, st.k, st.v) if st.v is not None else (st.q, st.k):
        b.use_buffer(name.attr("name"))
    q = b.emit("load", (), st.q.axes, st.q.dtype, buffer=st.q.attr("name"))
    m0 = b.emit("const", (), (), f32, value=NEG_INF)
    zero = b.emit("const", (), (), f32, value=0.0)
    carry = (m0, zero, zero) if st.v is not None else (m0, zero)
    # A split stream's loop walks its index's range of the keys (graph/stream_split.py).
    loop = b.emit("loop", carry, (), f32, axis=st.keys, step=step, split=st.split)
    m = b.emit("carried", (), rows, f32, loop=loop, index=0)
    l_ = b.emit("carried", (), rows, f32, loop=loop, index=1)
    acc = b.emit("carried", (), out_axes, f32, loop=loop, index=2) if st.v is not None else None
    k = b.emit("load", (), st.k.axes, st.k.dtype, buffer=st.k.attr("name"), stream=st.keys)
    scores = b.emit("dot", (q, k), st.scores.axes, f32, over=st.depth)
    b.value[st.scores.uid] = scores
    inside = {n.uid for n in topo_order([st.scores])}
    for n in topo_order([st.logits]):       # the algorithm's own score ops
        if n.uid in inside or n.uid in b.value:
            continue
        if n.op != "input":                  # a mask or bias is read where it is used
            b.value[n.uid] = b._lower(n)
    _mark_index_mask(b, b.value[st.logits.uid], (st.rows, st.keys))
    s_axes = st.scores.axes
    # Keys past the end are -inf: their zero-filled scores must weigh nothing.
    t_at = b.emit("iota", (), (st.keys,), DType.INT32, axis=st.keys)
    t_in = b.emit("lt", (t_at, b.emit("size", (), (), DType.INT32, axis=st.keys)),
                  (st.keys,), DType.BOOL)
    s = b.emit("where", (t_in, b.value[st.logits.uid], b.emit("const", (), (), f32,
                                                              value=NEG_INF)), s_axes, f32,
               mask="edge")
    tile_max = b.emit("max", (s,), rows, f32, axis=st.keys)
    m_new = b.emit("maximum", (m, tile_max), rows, f32)
    ninf = b.emit("const", (), (), f32, value=NEG_INF)
    empty = b.emit("eq", (m_new, ninf), rows, DType.BOOL)
    m_safe = b.emit("where", (empty, zero, m_new), rows, f32)
    p = b.emit("exp", (b.emit("sub", (s, m_safe), s_axes, f32),), s_axes, f32)
    alpha = b.emit("exp", (b.emit("sub", (m, m_safe), rows, f32),), rows, f32)
    l_new = b.emit("add", (b.emit("mul", (l_, alpha), rows, f32),
                           b.emit("sum", (p,), rows, f32, axis=st.keys)), rows, f32)
    if st.v is None:
        return _logsumexp_end(b, plan, buffers, loop, m_new, l_new, rows)
    v = b.emit("load", (), st.v.axes, st.v.dtype, buffer=st.v.attr("name"), stream=st.keys)
    # The weights enter the tensor cores in v's dtype, as the flash kernels round them.
    p_in = b.emit("round", (p,), s_axes, f32, round=st.v.dtype)
    scaled = b.emit("mul", (acc, alpha), out_axes, f32)
    acc_new = b.emit("dot", (p_in, v, scaled), out_axes, f32, over=st.keys)
    b.emit("yield", (m_new, l_new, acc_new), (), f32, loop=loop)
    l_end = b.emit("result", (), rows, f32, loop=loop, index=1)
    acc_end = b.emit("result", (), out_axes, f32, loop=loop, index=2)
    none = b.emit("eq", (l_end, zero), rows, DType.BOOL)
    one = b.emit("const", (), (), f32, value=1.0)
    inv = b.emit("recip", (b.emit("where", (none, one, l_end), rows, f32),), rows, f32)
    out = b.emit("mul", (acc_end, inv), out_axes, f32)
    if st.split is not None:    # a range's sum and log-sum-exp, fp32, for the finish kernel
        m_end = b.emit("result", (), rows, f32, loop=loop, index=0)
        lse = b.emit("add", (b.emit("log", (l_end,), rows, f32), m_end), rows, f32)
        return finish_program(b, plan, buffers, out, lse)   # -inf where l = 0
    stored = (_finish(b, st, out, out_axes),)
    if st.saved_lse is not None:
        m_end = b.emit("result", (), rows, f32, loop=loop, index=0)
        stored += (_logsumexp(b, m_end, l_end, rows),)
    return finish_program(b, plan, buffers, *stored)


def _logsumexp_end(b: _Builder, plan: KernelPlan, buffers: dict, loop: int, m_new: int,
                   l_new: int, rows) -> TileProgram:
    """The statistics kernel's end: the log-sum-exp stored."""
    b.emit("yield", (m_new, l_new), (), DType.FP32, loop=loop)
    m_end = b.emit("result", (), rows, DType.FP32, loop=loop, index=0)
    l_end = b.emit("result", (), rows, DType.FP32, loop=loop, index=1)
    return finish_program(b, plan, buffers, _logsumexp(b, m_end, l_end, rows))


def _logsumexp(b: _Builder, m_end: int, l_end: int, rows) -> int:
    """lse = m + log(l) after the loop; +inf for a row whose keys are all masked (l = 0),
    so that the backward's exp(x - lse) weighs each of them 0, not NaN."""
    f32 = DType.FP32
    none = b.emit("eq", (l_end, b.emit("const", (), (), f32, value=0.0)), rows, DType.BOOL)
    lse = b.emit("add", (b.emit("log", (l_end,), rows, f32), m_end), rows, f32)
    return b.emit("where", (none, b.emit("const", (), (), f32, value=float("inf")), lse),
                  rows, f32)


def finish_program(b: _Builder, plan: KernelPlan, buffers: dict, *values: int) -> TileProgram:
    """Store each value into the plan's output of the same position; the program."""
    for (name, _), value in zip(plan.outputs, values):
        b.use_buffer(name)
        b.emit("store", (value,), buffers[name].axes, buffers[name].dtype, buffer=name)
    ordered = [n for n in b.used_buffers if buffers[n].role == "input"] + \
              [n for n in b.used_buffers if buffers[n].role != "input"]
    return TileProgram(plan.name, plan.axes, plan.schedule.grid,
                       tuple(buffers[n] for n in ordered), tuple(sorted(b.scalars.items())),
                       tuple(b.ops))


def _mark_index_mask(b: _Builder, vid: int, tile_axes: tuple) -> None:
    """Mark the logits' last op `mask=index` when it is where(cond, s, -inf) with cond a
    function of positions and of int32 or bool inputs along at most one of the tile's axes
    (rows, keys) or a block mask of them (`blocked`): causal, sliding window, prefix, document ids
    per token, block-sparse. A backend may then skip
    the key tiles where cond is false throughout, and the arithmetic where it is true
    (stream/masks.py); an input over both axes (an [S, T] mask) is not a tile's bound."""
    op = b.ops[vid]
    if op.op != "where":
        return
    other = b.ops[op.args[2]]
    if other.op != "const" or other.attr("value") != NEG_INF:
        return
    pending, seen = [op.args[0]], set()
    while pending:
        arg = b.ops[pending.pop()]
        if arg.id in seen:
            continue
        seen.add(arg.id)
        if arg.op == "load" and arg.dtype in (DType.INT32, DType.BOOL) and (
                len(set(arg.axes) & set(tile_axes)) <= 1 or arg.attr("blocks")):
            continue               # document ids, block masks: bounded per tile
        if arg.op in ("dot", "load") or arg.dtype == DType.FP32 and arg.op not in (
                "const", "param", "size", "convert"):
            return                 # depends on the scores or on float arithmetic
        pending.extend(arg.args)
    b.ops[vid] = op.with_attrs(mask="index")


def _finish(b: _Builder, st, value: int, axes) -> int:
    """The casts between the T-sum and the stored output, rounded as the policy says."""
    chain = []
    n = st.out
    while n is not st.total:
        chain.append(n)
        n = n.inputs[0]
    b.value[st.total.uid] = value
    rounding = b._round_for(st.total)
    if rounding is not None:
        b.value[st.total.uid] = b.emit("round", (value,), axes, DType.FP32, round=rounding)
    for n in reversed(chain):
        b.value[n.uid] = b._lower(n)
    return b.value[st.out.uid]


def loop_body(ops, loop_id: int) -> tuple[list, object]:
    """(the ops of loop `loop_id`'s body, its yield op)."""
    body, inside = [], False
    for op in ops:
        if op.id == loop_id:
            inside = True
            continue
        if inside:
            if op.op == "yield" and op.attr("loop") == loop_id:
                return body, op
            body.append(op)
    raise ValueError(f"loop %{loop_id} has no yield")
