"""Stage 3 for a kernel of streamed sums: a loop of dots carrying only the sums.

    residents (per block):  a_i over [rows, width]          the rows' side of each score
    loop over keys:         c_i, b_j tiles over [keys, width] (and folded axes: R x keys)
        s_i = dot(a_i, c_i)                                 the score contractions
        w_j = the weight's ops on them (exp(x - lse), masks on index(), row terms)
        w_j = where(key inside, w_j, 0)                     mask=edge
        acc_j = dot(round(w_j), b_j, acc_j)
        atomic_add(dot(round(w_k), r_k, over=rows))     a sum over the rows (scattered)
    out_j = acc_j, through the casts to its output

A scattered sum (`sums_merge.py`: dq in the dk/dv kernel) is a dot over the block's rows
with a resident r_k, added per key tile into its fp32 buffer; its weight is zeroed on
rows past the end, whose zero-filled tiles give weights that need not be finite.

A position mask on the logits (causal) is marked `mask=index`, as in the forward's
loop, when every weight is a multiple of a softmax over those logits: a tile where the
mask is false throughout adds nothing and may be skipped.
"""
from __future__ import annotations

from plait.dsl.dtypes import DType
from plait.dsl.node import Node, topo_order

from ..graph.kernel_plan import KernelPlan
from ..graph.policy import ResolvedPolicy
from ..graph.streaming import _skip, _uncast
from .tile import TileProgram, _Builder
from .tile_stream import _finish, _mark_index_mask, finish_program


def build_sums_program(plan: KernelPlan, buffers: dict, policy: ResolvedPolicy) -> TileProgram:
    ss = plan.stream
    b = _Builder(plan, buffers, policy)
    f32 = DType.FP32
    step = dict(plan.schedule.stream)[ss.keys]
    for t in ss.residents + ss.streamed:
        b.use_buffer(t.attr("name"))
    tiles = {}                  # by tensor name: a term's node for it may be another
    for t in ss.residents:
        tiles[t.attr("name")] = b.value[t.uid] = b.emit("load", (), t.axes, t.dtype,
                                                         buffer=t.attr("name"))
    zero = b.emit("const", (), (), f32, value=0.0)
    # A folded axis (grouped query heads) is walked by the loop too: R x the key tiles.
    folded = {"fold": ss.folded} if ss.folded else {}
    loop = b.emit("loop", (zero,) * len(ss.terms), (), f32, axis=ss.keys, step=step, **folded)
    accs = [b.emit("carried", (), t.total.axes, f32, loop=loop, index=i)
            for i, t in enumerate(ss.terms)]
    for t in ss.streamed:
        tiles[t.attr("name")] = b.value[t.uid] = b.emit(
            "load", (), t.axes, t.dtype, buffer=t.attr("name"), stream=ss.keys)
    for s in ss.scores:
        a, c = (_operand(i) for i in _product(s).inputs)
        if ss.keys in a.axes:
            a, c = c, a
        b.value[s.uid] = b.emit("dot", (tiles[a.attr("name")], tiles[c.attr("name")]),
                                s.axes, f32, over=s.attr("axis"))
    inside = {n.uid for s in ss.scores for n in topo_order([s])}
    for t in ss.terms + ss.scattered:
        for n in topo_order([t.weight]):
            if n.uid in inside or n.uid in b.value:
                continue
            if n.op != "input":              # inputs are loaded where used
                b.value[n.uid] = b._lower(n)
    logits = _masked_logits(ss)
    if logits is not None:
        _mark_index_mask(b, b.value[logits.uid], (ss.rows, ss.keys))
    key_at = b.emit("iota", (), (ss.keys,), DType.INT32, axis=ss.keys)
    key_in = b.emit("lt", (key_at, b.emit("size", (), (), DType.INT32, axis=ss.keys)),
                    (ss.keys,), DType.BOOL)
    rounded = {}                # weight uid -> its masked, rounded tile (terms share it)

    def weight_in(t) -> int:
        if (t.weight.uid, t.operand.dtype) not in rounded:
            w = b.emit("where", (key_in, b.value[t.weight.uid], zero), t.weight.axes, f32,
                       mask="edge")
            # The weights enter the tensor cores in the operand's dtype.
            rounded[t.weight.uid, t.operand.dtype] = b.emit("round", (w,), t.weight.axes, f32,
                                                            round=t.operand.dtype)
        return rounded[t.weight.uid, t.operand.dtype]
    ins = [weight_in(t) for t in ss.terms]
    parts = []
    if ss.scattered:
        row_at = b.emit("iota", (), (ss.rows,), DType.INT32, axis=ss.rows)
        row_in = b.emit("lt", (row_at, b.emit("size", (), (), DType.INT32, axis=ss.rows)),
                        (ss.rows,), DType.BOOL)
    for t in ss.scattered:      # before the other dots: its weight may leave registers
        b.use_buffer(t.name)
        w = b.emit("where", (row_in, weight_in(t), zero), t.weight.axes, f32)
        parts.append(b.emit("dot", (w, tiles[t.operand.attr("name")]), t.total.axes, f32,
                            over=ss.rows))
    new = [b.emit("dot", (w, tiles[t.operand.attr("name")], acc), t.total.axes, f32,
                  over=ss.keys) for t, w, acc in zip(ss.terms, ins, accs)]
    for t, part in zip(ss.scattered, parts):
        b.emit("atomic_add", (part,), t.total.axes, f32, buffer=t.name)
    b.emit("yield", tuple(new), (), f32, loop=loop)
    outs = []
    for i, t in enumerate(ss.terms):
        total = b.emit("result", (), t.total.axes, f32, loop=loop, index=i)
        outs.append(_finish(b, t, total, t.total.axes))
    return finish_program(b, plan, buffers, *outs)


def _product(s: Node) -> Node:
    return _skip(s.inputs[0])


def _operand(n: Node) -> Node:
    return _uncast(_skip(n))


def _masked_logits(ss) -> Node | None:
    """The logits x of the weights' softmax exp(x - lse) (the stager's) when every weight vanishes where
    exp(x - lse) does (a product with it, or a `where` choosing it or 0), else None."""
    exps = {e.uid: e for e in ss.softmax}
    if not exps:
        return None
    if len({e.inputs[0].inputs[0].uid for e in exps.values()}) != 1:
        return None
    if not all(_vanishes(t.weight, exps) for t in ss.terms + ss.scattered):
        return None
    return next(iter(exps.values())).inputs[0].inputs[0]


def _vanishes(n: Node, exps: dict) -> bool:
    if n.uid in exps:
        return True
    if n.op in ("cast", "name", "broadcast", "permute", "neg"):
        return _vanishes(n.inputs[0], exps)
    if n.op == "mul":
        return any(_vanishes(i, exps) for i in n.inputs)
    if n.op == "div":
        return _vanishes(n.inputs[0], exps)
    if n.op == "where":
        other = n.inputs[2]
        while other.op == "broadcast":
            other = other.inputs[0]
        return _vanishes(n.inputs[1], exps) and (
            _vanishes(other, exps) or other.op == "const" and other.attr("value") == 0)
    return False
