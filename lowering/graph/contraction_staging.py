"""Cutting an algorithm so that each contraction gets a kernel of its own on tensor cores.

A tensor-core kernel reads its operands from memory and ends in elementwise ops. Two
things in an algorithm stand in the way, and both are cut out into temporaries that
an earlier kernel writes:

- an operand that is computed, not loaded (a gradient's `sum(dy' * b, over="N")` where
  dy' is dout times the activation's derivative): the operand becomes a kernel, itself
  often a contraction with an epilogue;
- a contraction whose result feeds a reduction (softmax over the scores of
  `sum(q * k, over="D")`): the contraction is written out and the reduction reads it.

The temporary holds the value in its dtype (bf16 for bf16 algorithms), as the operand
of a tensor core must be.
"""
from __future__ import annotations

import plait.dsl.ops  # noqa: F401  (fills the op table read below)
from plait.dsl.node import Node, make_attrs, reductions, topo_order

from .contraction import PROLOGUE_OPS, is_contraction

REDUCE_OPS = reductions()           # from the op table


def _loaded(node: Node) -> bool:
    """Whether an operand reaches an input through single-tensor prologue ops."""
    while node.op in PROLOGUE_OPS:
        tensors = [i for i in node.inputs if i.axes]
        if len(tensors) != 1:
            return False
        node = tensors[0]
    return node.op == "input"


def _ancestors(node: Node, boundary: set[int]) -> list[Node]:
    """What `node` is computed from, not looking past the nodes in `boundary`."""
    seen, out, todo = set(), [], list(node.inputs)
    while todo:
        n = todo.pop()
        if n.uid in seen:
            continue
        seen.add(n.uid)
        out.append(n)
        if n.uid not in boundary:
            todo.extend(n.inputs)
    return out


def _to_stage(nodes: list[Node]) -> list[Node]:
    stage: dict[int, Node] = {}
    for n in nodes:
        if is_contraction(n):
            for operand in n.inputs[0].inputs:
                if not _loaded(operand):
                    stage.setdefault(operand.uid, operand)
    # A contraction a reduction reads, short of what is staged already, is written out.
    for r in nodes:
        if r.op in REDUCE_OPS:
            for m in _ancestors(r, set(stage)):
                if is_contraction(m):
                    stage.setdefault(m.uid, m)
    order = {n.uid: i for i, n in enumerate(nodes)}
    return sorted(stage.values(), key=lambda n: order[n.uid])


def stage_contractions(name: str, outputs: dict[str, Node]
                       ) -> tuple[list[tuple[str, Node]], dict[str, Node]]:
    """(temporaries in the order they are computed, as (buffer name, value); the outputs
    reading them). Without contractions to cut, ([], outputs)."""
    nodes = topo_order(list(outputs.values()))
    stage = {n.uid for n in _to_stage(nodes)}
    if not stage:
        return [], outputs
    memo: dict[int, Node] = {}
    staged: list[tuple[str, Node]] = []
    for n in nodes:
        ins = tuple(memo[i.uid] for i in n.inputs)
        new = n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs, n.loc)
        if n.uid in stage:
            buf = f"{name}.t{len(staged)}"
            staged.append((buf, new))
            new = Node("input", (), n.axes, n.dtype, make_attrs(name=buf), n.loc)
        memo[n.uid] = new
    return staged, {k: memo[v.uid] for k, v in outputs.items()}
