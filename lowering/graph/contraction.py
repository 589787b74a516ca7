"""Recognising contractions: a product of two tensors summed over an axis they share.

Matmul in plait is math, `sum(A * B, over="K")`; this pass finds such sums and
names the roles of their axes, so that a tensor-core lowering can take them:

    M axes   in A only (rows of the result)       N axes   in B only
    K axis   the summed one, in both              batch    in both, kept

Each operand is traced back through elementwise prologue ops (casts, scaling)
to the input it reads, which tells its storage order: an operand whose input
has K as its innermost axis is *K-contiguous* (A row-major, B stored
transposed). What uses the sum until an output is the epilogue (bias, GELU,
residual, cast). Nothing here changes the graph; the kernel-graph dump lists
the contractions it found.
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.dsl.graph import AlgorithmGraph
from plait.dsl.node import Node

# Ops an operand may pass through between its input and the product.
PROLOGUE_OPS = ("cast", "mul", "div", "neg", "broadcast", "name", "permute", "stop_gradient")


@dataclass(frozen=True)
class Operand:
    node: Node                 # the value entering the product
    source: str | None         # the input it reads, if one
    contiguous: str | None     # the innermost axis of that input
    prologue: tuple[str, ...]  # ops between the input and the product


@dataclass(frozen=True)
class Contraction:
    node: Node                 # the sum
    a: Operand
    b: Operand
    m_axes: tuple[str, ...]
    n_axes: tuple[str, ...]
    k_axis: str
    batch_axes: tuple[str, ...]
    epilogue: tuple[str, ...]  # ops from the sum to the first output that uses it

    def text(self) -> str:
        def operand(o: Operand, name: str) -> str:
            where = f"{o.source}" if o.source else "a computed value"
            order = f", {o.contiguous}-contiguous" if o.contiguous else ""
            pro = f", prologue {'/'.join(o.prologue)}" if o.prologue else ""
            return f"{name} from {where}{order}{pro}"
        batch = f" batch [{','.join(self.batch_axes)}]" if self.batch_axes else ""
        epi = f"; epilogue {'/'.join(self.epilogue)}" if self.epilogue else ""
        return (f"contraction [{','.join(self.m_axes)}] x [{','.join(self.n_axes)}] over "
                f"{self.k_axis}{batch}: {operand(self.a, 'A')}; {operand(self.b, 'B')}{epi}")


def _trace_operand(node: Node) -> Operand:
    prologue = []
    current = node
    while current.op in PROLOGUE_OPS:
        tensors = [i for i in current.inputs if i.axes]
        if len(tensors) != 1:      # x * y of two tensors is no prologue: stop here
            break
        prologue.append(current.op)
        current = tensors[0]
    if current.op == "input":
        return Operand(node, current.attr("name"), current.axes[-1] if current.axes else None,
                       tuple(reversed(prologue)))
    return Operand(node, None, None, tuple(reversed(prologue)))


def _epilogue(graph: AlgorithmGraph, node: Node) -> tuple[str, ...]:
    """The elementwise ops downstream of the sum (in graph order), up to any reduction."""
    from plait.dsl.node import OPS
    reached = {node.uid}
    ops = []
    for n in graph.nodes:
        if any(i.uid in reached for i in n.inputs) and OPS[n.op].kind == "elementwise":
            reached.add(n.uid)
            ops.append(n.op)
    return tuple(ops)


def is_contraction(node: Node) -> bool:
    """A sum over an axis of a product of two tensors that both have it, each with an axis
    of its own (an inner product of two rows is a plain reduction)."""
    if node.op != "sum" or node.inputs[0].op != "mul":
        return False
    k = node.attr("axis")
    left, right = node.inputs[0].inputs
    if k not in left.axes or k not in right.axes:
        return False
    return bool(set(left.axes) - set(right.axes)) and bool(set(right.axes) - set(left.axes))


def find_contractions(graph: AlgorithmGraph) -> list[Contraction]:
    """Every sum over one axis of a product of two tensors that both have that axis."""
    found = []
    for node in graph.nodes:
        if node.op != "sum" or node.inputs[0].op != "mul":
            continue
        k = node.attr("axis")
        left, right = node.inputs[0].inputs
        if k not in left.axes or k not in right.axes:
            continue                # a scaled sum, not a contraction
        batch = tuple(a for a in node.axes if a in left.axes and a in right.axes)
        m_axes = tuple(a for a in left.axes if a not in right.axes)
        n_axes = tuple(a for a in right.axes if a not in left.axes)
        if not m_axes and not n_axes:
            continue                # an inner product of two vectors: a plain reduction
        found.append(Contraction(node, _trace_operand(left), _trace_operand(right), m_axes,
                                 n_axes, k, batch, _epilogue(graph, node)))
    return found
