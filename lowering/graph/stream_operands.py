"""Stage 2: computed q and k of a softmax-weighted contraction, cut out so it streams.

A streamed kernel reads q and k from memory (`streaming.py`). Attention with rotary
embeddings written inside the algorithm, `sum(rope(q) * rope(k), over=D)`, has computed
operands; each becomes a temporary stored as streaming reads it (`[batch..., S, D]`,
`[batch..., T, D]`), written by a memory-bound kernel of its own before the streamed one,
and the attention then streams over the temporaries instead of keeping its scores in
memory. Only operands in the 16-bit float the stream takes are cut out (an fp32 rotation
is not rounded behind the algorithm's back), and only where the rewritten output then
streams. The temporary holds the operand in its own dtype, as contraction temporaries do.
"""
from __future__ import annotations

from plait.dsl.dtypes import DType
from plait.dsl.graph import rebuild
from plait.dsl.node import Node, make_attrs

from .streaming import (NotStreamable, _scores_of, _skip, find_stream, softmax_logits,
                        sum_of_product, weights_and_value)

STREAMED_DTYPES = (DType.BF16, DType.FP16)


def stage_stream_operands(name: str, outputs: dict[str, Node], may_stream
                          ) -> tuple[list[tuple[str, Node]], dict[str, Node]]:
    """(temporaries in the order they are computed, the outputs reading them) for every
    output `may_stream(output)` allows whose scores' operands are computed."""
    replace: dict[int, Node] = {}       # operand uid -> the input reading its temporary
    staged: list[tuple[str, Node]] = []
    for out, node in outputs.items():
        if not may_stream(out):
            continue
        try:
            find_stream(node)
            continue                    # streams as it is
        except NotStreamable:
            pass
        cut = _computed_operands(node)
        if not cut:
            continue
        trial = dict(replace)
        temps = []
        for role, operand, order in cut:
            if operand.uid in trial:
                continue
            buf = f"{name}.{out}.{role}"
            trial[operand.uid] = Node("input", (), order, operand.dtype, make_attrs(name=buf))
            value = operand if order == operand.axes else \
                Node("permute", (operand,), order, operand.dtype)
            temps.append((buf, value))
        try:
            find_stream(_rewrite({out: node}, trial)[out])
        except NotStreamable:
            continue                    # something else stops it: leave it whole
        replace, staged = trial, staged + temps
    if not staged:
        return [], outputs
    return staged, _rewrite(outputs, replace)


def _rewrite(outputs: dict[str, Node], replace: dict[int, Node]) -> dict[str, Node]:
    return rebuild(outputs, lambda n, ins: replace.get(n.uid) or (
        n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs, n.loc)))


def _computed_operands(out: Node) -> list[tuple[str, Node, tuple[str, ...]]]:
    """[(role "q" or "k", the computed operand, the axes its temporary is stored in)] of
    a softmax-weighted contraction; [] where it has another shape or no computed q, k."""
    try:
        _, keys, prod = sum_of_product(out)
        p, _ = weights_and_value(prod, keys)
        scores = _scores_of(softmax_logits(p, keys))
    except NotStreamable:
        return []
    mul = _skip(scores.inputs[0])
    if mul.op != "mul":
        return []
    q, k = (_skip(i) for i in mul.inputs)
    if keys in q.axes:
        q, k = k, q
    depth = scores.attr("axis")
    if keys not in k.axes or keys in q.axes or q is k or depth not in q.axes + k.axes:
        return []
    rows = [a for a in q.axes if a != depth][-1:]   # the queries: innermost but depth
    if not rows:
        return []
    cut = []
    for role, operand, along in (("q", q, rows[0]), ("k", k, keys)):
        if operand.op == "input":
            continue
        if operand.dtype not in STREAMED_DTYPES or depth not in operand.axes:
            return []
        order = tuple(a for a in operand.axes if a not in (along, depth)) + (along, depth)
        cut.append((role, operand, order))
    return cut
