"""Reverse mode over an algorithm graph: forward graph in, gradient graph out.

`differentiate(graph, wrt, save)` walks the forward graph in reverse
topological order, keeping one cotangent per node (a traced `Tensor`), and asks
each op's rule `OPS[op].vjp(node, g, out, *inputs)` for its inputs' shares.
After a rule, a share is summed over the axes its input lacks (broadcasting by
name means an input with fewer axes was broadcast), broadcast over axes it
lacks, and cast to the input's dtype: the gradient of a bf16 value is stored
as bf16 and the schedule's policy decides what it is computed in.

The gradient graph reads the forward's inputs and recomputes the forward
intermediates it needs, except those listed in `save`, which it reads as
inputs of their own. No simplification happens here (see `simplify.py`).
"""
from __future__ import annotations

import bisect

from plait.dsl.algorithm import Param
from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.graph import AlgorithmGraph, rebuild
from plait.dsl.node import OPS, Node, make_attrs, topo_order
from plait.dsl.ops import permute
from plait.dsl.tensor import (Tensor, axis_order, broadcast, cast, constant,
                              current_axis_order, reduce)

from .saving import compared, readable, saved_nodes

SOURCE_OPS = ("input", "param", "const", "size", "iota")


def default_wrt(graph: AlgorithmGraph) -> list[str]:
    """Every float tensor input of the graph, in signature order."""
    dtypes = graph.input_dtypes()  # arguments the graph never reads keep their declared one
    return [p.name for p in graph.params
            if p.is_tensor and dtypes.get(p.name, p.dtype or DType.FP32).is_float]


def grad_name(name: str) -> str:
    return f"d{name}"


def _check_wrt(graph: AlgorithmGraph, wrt) -> list[str]:
    params = {p.name: p for p in graph.params}
    dtypes = {n.attr("name"): n.dtype for n in graph.nodes if n.op in ("input", "param")}
    for name in wrt:
        if name not in params:
            raise PlaitError(f"{graph.name} has no argument {name!r} to differentiate "
                             f"(arguments: {', '.join(params)})")
        dtype = dtypes.get(name, params[name].dtype or DType.FP32)
        if not dtype.is_float:
            raise PlaitError(f"{graph.name}: cannot differentiate with respect to {name!r}: "
                             f"it is {dtype}, not a float")
    if len(set(wrt)) != len(wrt):
        raise PlaitError(f"{graph.name}: wrt lists an argument twice: {list(wrt)}")
    return list(wrt)


def _fit(g: Tensor, like: Node) -> Tensor:
    """g summed / broadcast onto like's axes and cast to like's dtype."""
    extra = tuple(a for a in g.axes if a not in like.axes)
    if extra:
        g = reduce("sum", g, over=extra)
    if g.axes != like.axes:
        g = broadcast(g, like.axes)
    if g.dtype != like.dtype and like.dtype.is_float:
        g = cast(g, like.dtype)
    return g


def _needs_grad(graph: AlgorithmGraph, wrt: list[str]) -> set[int]:
    """Float nodes that depend on a wrt input: the only ones a gradient flows through."""
    needs: set[int] = set()
    for n in graph.nodes:
        if not n.dtype.is_float:
            continue
        if n.op in ("input", "param"):
            if n.attr("name") in wrt:
                needs.add(n.uid)
        elif any(i.uid in needs for i in n.inputs):
            needs.add(n.uid)
    return needs


def _rule(node: Node):
    vjp = OPS[node.op].vjp
    if vjp is None:
        raise PlaitError(f"cannot differentiate through {node.op!r}: it has no gradient rule, "
                         "and a gradient flows through it here", node.loc)
    return vjp


def _input_node(name: str, axes, dtype: DType, index: int, loc=None) -> Node:
    return Node("input", (), tuple(axes), dtype, make_attrs(name=name, index=index), loc)


def differentiate(graph: AlgorithmGraph, wrt=None, save=(), *, name: str | None = None,
                  cotangent_dtypes: dict | None = None) -> AlgorithmGraph:
    """The (unsimplified) gradient graph of `graph`.

    Parameters: the forward's, then one cotangent `d<out>` per output (with the
    output's axes), then each saved intermediate. Outputs: `d<input>` per wrt.
    """
    wrt = _check_wrt(graph, default_wrt(graph) if wrt is None else list(wrt))
    saved = saved_nodes(graph, save)
    cotangent_dtypes = cotangent_dtypes or {}
    taken = {p.name for p in graph.params}
    # The gradient graph is for concrete dtypes: say them in its signature.
    known = graph.input_dtypes()
    params = [Param(p.name, p.axes, known.get(p.name, p.dtype or DType.FP32), p.default)
              if p.is_tensor else p for p in graph.params]
    seeds: dict[str, Node] = {}
    for out, node in graph.outputs.items():
        pname = grad_name(out)
        dtype = cotangent_dtypes.get(pname, node.dtype)
        seeds[out] = _input_node(pname, node.axes, dtype, len(params), node.loc)
        params.append(Param(pname, node.axes, dtype))
    saved_inputs: dict[int, Node] = {}
    for label, node in saved.items():
        saved_inputs[node.uid] = _input_node(label, node.axes, node.dtype, len(params),
                                             node.loc)
        params.append(Param(label, node.axes, node.dtype))
        # Rules see the labelled value itself (rsqrt's rule reads rsqrt's output,
        # not the name wrapped around it): it is the same value, read it too.
        inner = node
        while inner.op == "name":
            inner = inner.inputs[0]
            if inner.op not in SOURCE_OPS:
                saved_inputs[inner.uid] = saved_inputs[node.uid]
    for p in params[len(graph.params):] + [Param(grad_name(w), None, None) for w in wrt]:
        if p.name in taken:
            raise PlaitError(f"{graph.name}: the gradient algorithm needs the name {p.name!r}, "
                             "but the forward already uses it; rename that argument or output")
        taken.add(p.name)

    needs = _needs_grad(graph, wrt)
    ct: dict[int, Tensor] = {}
    made_by: list[tuple[int, Node]] = []  # (first uid, forward node): who made which nodes

    def accumulate(node: Node, g: Tensor) -> None:
        g = _fit(g, node)
        ct[node.uid] = g if node.uid not in ct else ct[node.uid] + g

    grads: dict[str, Tensor] = {}
    with axis_order(graph.axis_order):
        for out, node in graph.outputs.items():
            if node.uid in needs:
                accumulate(node, Tensor(seeds[out]))
        for node in reversed(graph.nodes):
            g = ct.pop(node.uid, None)
            if g is None:
                continue
            if node.op in ("input", "param"):
                grads[node.attr("name")] = g
                continue
            made_by.append((_next_uid(), node))
            rule = _rule(node)
            shares = rule(node, g, Tensor(node), *(Tensor(i) for i in node.inputs))
            if len(shares) != len(node.inputs):
                raise PlaitError(f"the gradient rule of {node.op!r} returned {len(shares)} "
                                 f"gradients for {len(node.inputs)} inputs", node.loc)
            for inp, share in zip(node.inputs, shares):
                if share is not None and inp.uid in needs:
                    accumulate(inp, share)
        made_by.append((_next_uid(), None))
        inputs = graph.inputs
        outputs = {}
        for w in wrt:
            p = next(p for p in graph.params if p.name == w)
            if w in grads:
                g = grads[w]
            else:  # w does not reach an output: its gradient is zero, not an error
                zero = constant(0.0, inputs[w].dtype if w in inputs else p.dtype or DType.FP32)
                g = broadcast(zero, p.axes or ())
            # d<w> is stored like w ([N, K] for an nn.Linear weight), not in the
            # algorithm's canonical order.
            outputs[grad_name(w)] = (permute(g, *p.axes) if p.axes else g).node
        order = current_axis_order() or graph.axis_order   # with axes a rule declared

    # A rule may compare with a saved value (max's tie mask): see saving.readable.
    compared_uids = compared(topo_order(list(outputs.values())))
    outputs = rebuild(outputs, lambda n, new: (
        saved_inputs.get(n.uid) if readable(n, compared_uids) else None) or
        _restamp(n, new, made_by))
    return AlgorithmGraph(name or f"{graph.name}.bwd", params, order, outputs)


def _next_uid() -> int:
    """The uid the next node will get (uids only increase; skipping one is harmless)."""
    return Node("const", (), (), DType.FP32).uid + 1


def _restamp(node: Node, inputs: tuple[Node, ...], made_by) -> Node:
    """node on new inputs, located at the user's forward line whose rule made it.

    Gradient nodes are traced inside plait, so their own location is wherever
    grad() was called; the forward line is what an error should quote.
    """
    loc = node.loc
    i = bisect.bisect_right(made_by, node.uid, key=lambda e: e[0]) - 1
    if 0 <= i < len(made_by) - 1 and made_by[i][1] is not None:
        loc = made_by[i][1].loc or loc
    if inputs == node.inputs and loc is node.loc:
        return node
    return Node(node.op, inputs, node.axes, node.dtype, node.attrs, loc)
