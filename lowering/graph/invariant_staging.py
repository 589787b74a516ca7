"""Cutting out the reductions that do not vary along an axis of the kernel holding them.

A kernel iterates over every axis its nodes touch. A reduction inside it whose operand
lacks one of those axes (attention's row term sum(dout * out, over=D), over [S, D],
inside the kernel of the score gradients over [S, T, D]) would be computed again for
every position along the missing axis, by a reduction across the block's threads laid
out for another shape. Computed once in a kernel of its own, into a temporary the
first kernel reads, it costs S·D instead of S·T·D and is an ordinary row reduction.
"""
from __future__ import annotations

import plait.dsl.ops  # noqa: F401  (fills the op table read below)
from plait.dsl.node import Node, make_attrs, reductions, topo_order

REDUCE_OPS = reductions()           # from the op table


def _touched(nodes) -> set[str]:
    axes: set[str] = set()
    for n in nodes:
        axes.update(n.axes)
        if n.op in REDUCE_OPS:
            axes.add(n.attr("axis"))
    return axes


def stage_invariant_reductions(name: str, staged: list[tuple[str, Node]],
                               outputs: dict[str, Node]
                               ) -> tuple[list[tuple[str, Node]], dict[str, Node]]:
    """(the temporaries in the order they are computed, now with one per invariant
    reduction, each before the first value that reads it; the outputs reading them)."""
    temps: dict[int, Node] = {}          # reduction uid -> the input reading its temporary
    done: list[tuple[str, Node]] = []

    def rewrite(value: Node) -> Node:
        nodes = topo_order([value])
        axes = _touched(nodes)
        memo: dict[int, Node] = {}
        for n in nodes:
            ins = tuple(memo[i.uid] for i in n.inputs)
            if n is not value and n.op in REDUCE_OPS and n.uid not in temps and \
                    axes - _touched(topo_order([n])):
                inner = rewrite(n)           # its own invariant reductions, first
                buf = f"{name}.inv{len(temps)}"
                done.append((buf, inner))
                temps[n.uid] = Node("input", (), n.axes, n.dtype, make_attrs(name=buf), n.loc)
            if n.uid in temps:
                memo[n.uid] = temps[n.uid]
                continue
            memo[n.uid] = n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype,
                                                         n.attrs, n.loc)
        return memo[value.uid]

    for buf, value in staged:
        done.append((buf, rewrite(value)))
    outputs = {out: rewrite(value) for out, value in outputs.items()}
    return done, outputs
