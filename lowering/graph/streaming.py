"""Stage 2 rewrite: a softmax-weighted contraction, streamed along its reduction axis.

Attention written as math,

    s = f(sum(q * k, over=D))                 # scores over [..., S, T]; f: scale, masks
    p = exp(s - max(s, over=T)) / sum(exp(s - max(s, over=T)), over=T)
    out = sum(p * v, over=T)                  # over [..., S, E]

needs the scores only one T tile at a time: by the online-softmax identity, a loop over
T tiles carrying the running max m, sum l and accumulator acc (rescaled by
exp(m_old - m_new) whenever m grows) gives out = acc / l without ever writing s or p.
`find_stream` recognises the shape in an algorithm graph and names the roles of its
axes and nodes; the tile program (`tile_stream.py`) builds the loop from them.

What is taken, for now: q, k and v are inputs of one dtype (bf16 or fp16), stored
[batch..., S, D], [batch..., T, D] and [batch..., T, E] (D and E innermost, rows of
whole 16 bytes; k and v may lack batch axes of q, which grouped-query attention is), the
output [batch..., S, E]; f is elementwise on the scores, scalars,
constants and positions (`index`), so causal, sliding-window and soft-capped scores
stream, and so do scores that read other tensors over the batch axes, S and T (a
per-token segment id for document masks, a key-padding bias, an [S, T] bias). Anything
else is not streamed, and `why_not` says why (the kernel graph
prints it), so the scores go through memory as before.
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.dsl.dtypes import DType
from plait.dsl.node import OPS, Node, topo_order

# The head dimensions a streamed kernel keeps in registers (whole tensor-core k steps).
MAX_HEAD = 256
SCORE_SOURCES = ("param", "const", "size", "iota")
PASS_THROUGH = ("name", "broadcast", "permute")


class NotStreamable(Exception):
    """Why a softmax-weighted contraction is not streamed (printed in the kernel graph)."""


@dataclass(frozen=True)
class Stream:
    """The roles in one streamed softmax-weighted contraction."""
    out: Node                  # the value stored (the T-sum, or a cast/name of it)
    total: Node | None         # sum(p * v, over=T); None for the log-sum-exp alone
    scores: Node               # the contraction sum(q * k, over=D)
    logits: Node               # f(scores): what the softmax normalises
    q: Node
    k: Node
    v: Node | None             # None: a statistics kernel storing the log-sum-exp
    batch: tuple[str, ...]
    rows: str                  # S
    keys: str                  # T, the streamed axis
    depth: str                 # D, contracted by the first product
    cols: str                  # E, the value columns
    # (output name, node) of the softmax's log-sum-exp, written beside the output when the
    # forward saves it for the backward (`autodiff/saving.py`'s "lse")
    saved_lse: tuple[str, Node] | None = None
    # (axis, keys each): the keys split into ranges, one per index along a derived axis
    # (the first of `batch`); each range's normalised sum and log-sum-exp are stored for a
    # finish kernel to combine (graph/stream_split.py)
    split: tuple[str, int] | None = None

    def text(self) -> str:
        batch = f" batch [{','.join(self.batch)}]" if self.batch else ""
        if self.saved_lse is not None:
            batch += f", writing its log-sum-exp to {self.saved_lse[0]}"
        if self.split is not None:
            batch += f", {self.keys} split into ranges of {self.split[1]} along {self.split[0]}"
        if self.v is None:
            return (f"stream {self.keys}: log-sum-exp over {self.keys} of "
                    f"{self.q.attr('name')}.{self.k.attr('name')} (over {self.depth}), rows "
                    f"{self.rows}{batch}")
        return (f"stream {self.keys}: softmax over {self.keys} of "
                f"{self.q.attr('name')}.{self.k.attr('name')} (over {self.depth}) weighting "
                f"{self.v.attr('name')}, rows {self.rows}, columns {self.cols}{batch}")


def _skip(n: Node) -> Node:
    while n.op in PASS_THROUGH:
        n = n.inputs[0]
    return n


def _uncast(n: Node) -> Node:
    """An input behind float casts (v promoted to fp32 by an fp32 bias in the scores): the
    streamed product reads it in its storage dtype, as it reads p rounded to it."""
    while n.op == "cast" and n.dtype.is_float and n.inputs[0].dtype.is_float:
        n = _skip(n.inputs[0])
    return n


def _is(n: Node, op: str, axis: str | None = None) -> bool:
    return n.op == op and (axis is None or n.attr("axis") == axis)


def outer_sum(out: Node) -> Node:
    """The sum behind float casts and permutes that out is; NotStreamable otherwise."""
    total = _skip(out)
    while total.op == "cast" and total.inputs[0].dtype.is_float:
        total = _skip(total.inputs[0])
    if not _is(total, "sum"):
        raise NotStreamable("the output is not a sum")
    return total


def sum_of_product(out: Node) -> tuple[Node, str, Node]:
    """(the sum, its axis, the product summed) of out = sum(a * b, over=X) behind float
    casts and permutes; NotStreamable otherwise."""
    total = outer_sum(out)
    keys = total.attr("axis")
    prod = _skip(total.inputs[0])
    if prod.op != "mul":
        raise NotStreamable(f"the sum over {keys} is not of a product")
    return total, keys, prod


def find_stream(out: Node) -> Stream:
    """The roles of `out` as a streamed softmax-weighted contraction; NotStreamable says
    why it is not one."""
    total, keys, prod = sum_of_product(out)
    p, v = weights_and_value(prod, keys)
    logits = softmax_logits(p, keys)
    scores = _scores_of(logits)
    depth = scores.attr("axis")
    q, k = _operands(scores, keys)
    return _check_axes(Stream(out, total, scores, logits, q, k, v, (), "", keys, depth, ""))


def weights_and_value(prod: Node, keys: str) -> tuple[Node, Node]:
    """(p, v) of the product p * v a softmax-weighted contraction sums: p a division
    (the softmax), v an input behind casts; NotStreamable otherwise."""
    for p, v in (prod.inputs, prod.inputs[::-1]):
        p, v = _skip(p), _uncast(_skip(v))
        if p.op == "div" and v.op == "input":
            return p, v
    raise NotStreamable(f"the sum over {keys} is not of softmax(...) * an input")


def softmax_logits(p: Node, keys: str) -> Node:
    """x where p = exp(x - max(x, over=keys)) / sum(exp(x - max(x, over=keys)), over=keys)
    (the max seen through stop_gradient); NotStreamable otherwise."""
    if p.op != "div":
        raise NotStreamable(f"the weights are not exp(x) / sum(exp(x), over={keys})")
    e, z = (_skip(i) for i in p.inputs)
    if not (_is(z, "sum", keys) and _skip(z.inputs[0]) is e and e.op == "exp"):
        raise NotStreamable(f"the weights are not exp(x) / sum(exp(x), over={keys})")
    diff = _skip(e.inputs[0])
    if diff.op != "sub":
        raise NotStreamable("the exponent is not x - max(x)")
    logits, shift = (_skip(i) for i in diff.inputs)
    if shift.op == "stop_gradient":
        shift = _skip(shift.inputs[0])
    if not (_is(shift, "max", keys) and _skip(shift.inputs[0]) is logits):
        raise NotStreamable(f"the exponent is not x - max(x, over={keys})")
    return logits


def logsumexp_logits(out: Node) -> tuple[Node, str]:
    """(x, axis) where out = log(sum(exp(x - m), over=axis)) + m behind float casts, m the
    max of x over that axis (through stop_gradient); NotStreamable otherwise."""
    n = _skip(out)
    while n.op == "cast" and n.inputs[0].dtype.is_float:
        n = _skip(n.inputs[0])
    if n.op == "add":
        for lg, m in (n.inputs, n.inputs[::-1]):
            lg, m = _skip(lg), _skip(m)
            if m.op == "stop_gradient":
                m = _skip(m.inputs[0])
            if lg.op != "log" or not _is(m, "max"):
                continue
            z = _skip(lg.inputs[0])
            axis = m.attr("axis")
            e = _skip(z.inputs[0]) if _is(z, "sum", axis) else None
            if e is not None and e.op == "exp" and _skip(e.inputs[0]).op == "sub":
                x, shift = (_skip(i) for i in _skip(e.inputs[0]).inputs)
                if shift.op == "stop_gradient":
                    shift = _skip(shift.inputs[0])
                if shift is m and _skip(m.inputs[0]) is x:
                    return x, axis
    raise NotStreamable("not a log-sum-exp")


def find_logsumexp(out: Node, logits: Node, keys: str) -> Stream:
    """The roles of the log-sum-exp over `keys` of `logits` (out, over the other axes,
    is what is stored): a streamed statistics kernel, the online softmax without v."""
    scores = _scores_of(logits)
    q, k = _operands(scores, keys)
    return _check_axes(Stream(out, None, scores, logits, q, k, None, (), "", keys,
                              scores.attr("axis"), ""))


def _scores_of(logits: Node) -> Node:
    """The one contraction the logits are an elementwise function of."""
    nodes = topo_order([logits])
    sums = [n for n in nodes if n.op == "sum"]
    if len(sums) != 1:
        raise NotStreamable(f"the logits hold {len(sums)} sums, not one contraction")
    scores = sums[0]
    inside = {m.uid for m in topo_order([scores])}
    for n in nodes:
        if n.uid in inside or n.op in SCORE_SOURCES or n.op in PASS_THROUGH \
                or n.op == "stop_gradient":
            continue
        if n.op == "input":
            continue               # a mask or bias tensor: its axes are checked below
        if n.op == "blocked" and n.inputs[0].op == "input":
            continue               # a block mask read at the scores' positions
        if n.op not in OPS or OPS[n.op].kind != "elementwise":
            raise NotStreamable(f"the scores pass through {n.op}, which a streamed tile "
                                "does not compute")
    return scores


def _operands(scores: Node, keys: str) -> tuple[Node, Node]:
    prod = _skip(scores.inputs[0])
    if prod.op != "mul":
        raise NotStreamable("the scores are not a sum of a product")
    a, b = (_skip(i) for i in prod.inputs)
    if a.op != "input" or b.op != "input":
        raise NotStreamable("the scores' operands are computed, not inputs")
    if keys in a.axes:
        a, b = b, a
    if keys not in b.axes or keys in a.axes:
        raise NotStreamable(f"exactly one operand of the scores runs along {keys}")
    return a, b


def _check_axes(st: Stream) -> Stream:
    q, k, v, d, t = st.q, st.k, st.v, st.depth, st.keys
    if len(q.axes) < 2 or q.axes[-1] != d:
        raise NotStreamable(f"q is stored [{','.join(q.axes)}]; streaming takes {d} innermost")
    s, batch = q.axes[-2], q.axes[:-2]
    # k and v may lack batch axes of q (grouped-query attention: q over [G, R], k and v
    # over [G], broadcast by name over the R query heads of each group).
    kv_batch = tuple(a for a in batch if a in k.axes)
    want = {"q": batch + (s, d), "k": kv_batch + (t, d)}
    have = {"q": q.axes, "k": k.axes, "the output": st.out.axes}
    e = ""
    if v is None:            # the log-sum-exp alone: stored over the rows
        want["the output"] = batch + (s,)
    else:
        cols = [a for a in v.axes if a not in (t,) + batch]
        if len(cols) != 1:
            raise NotStreamable(f"v has {len(cols)} value axes, not one")
        e = cols[0]
        want.update({"v": kv_batch + (t, e), "the output": batch + (s, e)})
        have["v"] = v.axes
    for name, axes in want.items():
        if have[name] != axes:
            raise NotStreamable(f"{name} is stored [{','.join(have[name])}]; streaming takes "
                                f"[{','.join(axes)}]")
    inside = {m.uid for m in topo_order([st.scores])}
    logits = topo_order([st.logits])
    inside |= {n.inputs[0].uid for n in logits if n.op == "blocked"}   # read at fine axes
    for n in logits:
        if n.op in ("input", "blocked") and n.uid not in inside and \
                not set(n.axes) <= set(batch + (s, t)):
            raise NotStreamable(f"the scores read {n.attr('name')!r} over "
                                f"[{','.join(n.axes)}]; a streamed tile reads tensors over "
                                f"the batch axes, {s} and {t} only")
    dtypes = {q.dtype, k.dtype} | ({v.dtype} if v is not None else set())
    if len(dtypes) != 1 or q.dtype not in (DType.BF16, DType.FP16):
        raise NotStreamable(f"q, k, v are {'/'.join(sorted(str(x) for x in dtypes))}; "
                            "streaming takes bf16 or fp16 for all three")
    return Stream(st.out, st.total, st.scores, st.logits, q, k, v, batch, s, t, d, e)


def check_sizes(st: Stream, sizes: dict[str, int]) -> None:
    """What the sizes must allow: head dimensions in registers, 16-byte rows."""
    for axis in (st.depth, st.cols) if st.v is not None else (st.depth,):
        n = sizes[axis]
        if n > MAX_HEAD:
            raise NotStreamable(f"{axis} = {n}: a streamed tile holds at most {MAX_HEAD}")
        if n % 8:
            raise NotStreamable(f"{axis} = {n}: rows of q, k, v must be whole 16 bytes "
                                "(a multiple of 8 elements) to be streamed")
