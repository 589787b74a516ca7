"""Cutting the topk results that something computes with out into temporaries.

A topk's kernel walks the axis it reads (a block per row, the best k kept in shared
memory) and stores its k positions straight into [.., into] (the tile program's store
`along`). A value computed from them (the values times a weight, the gradient's
scatter of dout at the indices) is over `into`, an axis that kernel does not walk: so a
topk result that is not itself an output is written to a temporary by a kernel of its
own, and its users read the temporary. Both parts of one topk (values, indices) that
are staged are written by one kernel (`plan_groups`), which selects once.
"""
from __future__ import annotations

from plait.dsl.node import Node, make_attrs, topo_order


def stage_topk(name: str, staged: list[tuple[str, Node]], outputs: dict[str, Node]
               ) -> tuple[list[tuple[str, Node]], dict[str, Node]]:
    """(the temporaries, in the order they are computed, now with one per topk result
    read by another op; the outputs reading them)."""
    memo: dict[int, Node] = {}
    temps: dict[int, Node] = {}          # topk uid -> the input reading its temporary
    done: list[tuple[str, Node]] = []

    def rewrite(value: Node) -> Node:
        for n in topo_order([value]):
            if n.uid in memo:
                continue
            ins = []
            for i in n.inputs:
                i = memo[i.uid]
                if i.op == "topk":
                    if i.uid not in temps:
                        buf = f"{name}.topk{len(temps)}"
                        done.append((buf, i))
                        temps[i.uid] = Node("input", (), i.axes, i.dtype, make_attrs(name=buf),
                                            i.loc)
                    i = temps[i.uid]
                ins.append(i)
            ins = tuple(ins)
            memo[n.uid] = n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs,
                                                         n.loc)
        return memo[value.uid]

    for buf, value in staged:
        value = rewrite(value)
        done.append((buf, value))
    outputs = {k: rewrite(v) for k, v in outputs.items()}
    return (done if temps else list(staged)), outputs


def _selection(n: Node) -> tuple | None:
    """What makes two topk parts one selection: operands, axis, direction, k."""
    if n.op != "topk":
        return None
    return (tuple(i.uid for i in n.inputs), n.attr("axis"), n.attr("descending"),
            n.attr("k"))


def plan_groups(staged: list[tuple[str, Node]]) -> list[tuple[str, dict[str, Node]]]:
    """The staged temporaries as kernels to plan, in order: (kernel name, buffers). The
    parts of one topk go together, under the first one's name."""
    out: list[tuple[str, dict[str, Node]]] = []
    at: dict[tuple, int] = {}
    for buf, value in staged:
        key = _selection(value)
        if key is not None and key in at:
            out[at[key]][1][buf] = value
            continue
        if key is not None:
            at[key] = len(out)
        out.append((buf, {buf: value}))
    return out
