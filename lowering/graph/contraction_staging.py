"""Cutting an algorithm so that each contraction gets a kernel of its own on tensor cores.

A tensor-core kernel reads its operands from memory and ends in elementwise ops. Two
things in an algorithm stand in the way, and both are cut out into temporaries that
an earlier kernel writes:

- an operand that is computed, not loaded (a gradient's `sum(dy' * b, over="N")` where
  dy' is dout times the activation's derivative): the operand becomes a kernel, itself
  often a contraction with an epilogue;
- a contraction whose result feeds a reduction (softmax over the scores of
  `sum(q * k, over="D")`): the contraction is written out and the reduction reads it;
- contractions that one output combines elementwise (a gated MLP): all but the last
  are written out, and the last one's epilogue reads them.

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


def _to_stage(nodes: list[Node], roots: list[Node]) -> list[Node]:
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
    _stage_sibling_contractions(roots, stage, order)
    return sorted(stage.values(), key=lambda n: order[n.uid])


def _stage_sibling_contractions(roots: list[Node], stage: dict[int, Node],
                                order: dict[int, int]) -> None:
    """A kernel on tensor cores holds one contraction: where a kernel's value (an output,
    or a temporary staged above) combines several elementwise (a gated MLP's
    silu(x.w1) * (x.w3)), all but the last are written out and the last one's epilogue
    reads them, instead of the whole kernel leaving tensor cores for partial sums over K."""
    todo, done = list(roots) + list(stage.values()), set()
    while todo:
        root = todo.pop()
        if root.uid in done:
            continue
        done.add(root.uid)
        reach = _ancestors(root, set(stage)) + [root]
        found = sorted({m.uid: m for m in reach if is_contraction(m) and (
            m is root or m.uid not in stage)}.values(), key=lambda m: order[m.uid])
        for m in found[:-1]:
            stage.setdefault(m.uid, m)
            todo.append(m)


def stage_contractions(name: str, outputs: dict[str, Node]
                       ) -> tuple[list[tuple[str, Node]], dict[str, Node]]:
    """(temporaries in the order they are computed, as (buffer name, value); the outputs
    reading them). Without contractions to cut, ([], outputs)."""
    nodes = topo_order(list(outputs.values()))
    stage = {n.uid for n in _to_stage(nodes, list(outputs.values()))}
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
