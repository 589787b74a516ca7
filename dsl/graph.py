"""The algorithm graph: a networkx DiGraph of immutable nodes, printable as text."""
from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx

from .node import Node, topo_order

if TYPE_CHECKING:
    from .algorithm import Param


class AlgorithmGraph:
    """A traced algorithm: parameters, canonical axis order, and named output nodes.

    `forward` is set on a graph derived from another (a gradient): the graph it was
    derived from, whose `name`d intermediates a schedule's `save:` refers to.
    """

    forward: "AlgorithmGraph | None" = None

    def __init__(self, name: str, params: list["Param"], axis_order: tuple[str, ...],
                 outputs: dict[str, Node]):
        self.name = name
        self.params = list(params)
        self.axis_order = axis_order
        self.outputs = dict(outputs)
        self.nodes = topo_order(list(self.outputs.values()))

    @property
    def inputs(self) -> dict[str, Node]:
        return {n.attr("name"): n for n in self.nodes if n.op in ("input", "param")}

    def input_dtypes(self) -> dict[str, object]:
        return {n.attr("name"): n.dtype for n in self.nodes if n.op == "input"}

    def digraph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.uid, node=n)
            for i, inp in enumerate(n.inputs):
                g.add_edge(inp.uid, n.uid, operand=i)
        return g

    def users(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {n.uid: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                out[i.uid].append(n)
        return out

    def text(self) -> str:
        if not hasattr(self, "_text"):     # graphs are immutable: print once
            self._text = format_graph(self)
        return self._text

    def __str__(self) -> str:
        return self.text()


def _value(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, tuple) and v and all(isinstance(n, Node) for n in v):
        return "(" + ", ".join(_expression(n) for n in v) + ")"   # a scan's combine
    return str(v)


def _expression(n: Node) -> str:
    """A node of a scan's combine as nested calls: its arguments are s0, s1, ..."""
    if n.op == "scan_arg":
        return f"s{n.attr('index')}"
    if n.op == "const":
        return _value(n.attr("value"))
    return f"{n.op}({', '.join(_expression(i) for i in n.inputs)}):{n.dtype}"


def format_node(node: Node, names: dict[int, str]) -> str:
    args = [names[i.uid] for i in node.inputs]
    attrs = [f"{k}={_value(v)}" for k, v in node.attrs
             if not (node.op in ("input", "param") and k in ("name", "index"))]
    if node.op in ("input", "param"):
        args = [node.attr("name")]
    head = " ".join([node.op] + args + attrs)
    return f"{head} : {node.dtype}[{','.join(node.axes)}]"


def format_graph(graph: AlgorithmGraph) -> str:
    sig = []
    for p in graph.params:
        node = graph.inputs.get(p.name)
        dt = node.dtype if node is not None else p.dtype
        if p.is_tensor:
            sig.append(f"{p.name}: {dt}[{','.join(p.axes)}]")
        else:
            sig.append(f"{p.name}: {dt}" + ("" if p.default is None else f" = {p.default!r}"))
    lines = [f"algorithm {graph.name}({', '.join(sig)})"]
    names: dict[int, str] = {}
    for i, n in enumerate(graph.nodes):
        names[n.uid] = f"%{i}"
        lines.append(f"  %{i} = {format_node(n, names)}")
    outs = ", ".join(f"{k}=%{graph.nodes.index(v)}" for k, v in graph.outputs.items())
    lines.append(f"  return {outs}")
    return "\n".join(lines) + "\n"


def rebuild(outputs: dict[str, Node], replace) -> dict[str, Node]:
    """New output nodes after mapping every node bottom-up through `replace(node, new_inputs)`."""
    memo: dict[int, Node] = {}
    for n in topo_order(list(outputs.values())):
        new_inputs = tuple(memo[i.uid] for i in n.inputs)
        memo[n.uid] = replace(n, new_inputs)
    return {k: memo[v.uid] for k, v in outputs.items()}


def eliminate_common_subexpressions(outputs: dict[str, Node]) -> dict[str, Node]:
    """Merge structurally identical nodes (same op, inputs, axes, dtype, attrs)."""
    seen: dict[tuple, Node] = {}

    def replace(n: Node, new_inputs):
        if new_inputs != n.inputs:
            n = Node(n.op, new_inputs, n.axes, n.dtype, n.attrs, n.loc)
        key = n.key() if n.op not in ("input", "param") else (n.op, n.attrs)
        return seen.setdefault(key, n)

    return rebuild(outputs, replace)
