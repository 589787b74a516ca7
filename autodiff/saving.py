"""Save vs recompute: which forward intermediates the backward reads instead of recomputing.

The forward labels an intermediate with `name(x, "rstd")` (or an output is
referred to by its name). `with_saved_outputs` is the forward that also writes
the saved values out; the backward takes them as inputs of the same names.

`differentiate` already reads a saved value wherever a gradient rule refers to
that very node. After simplification the backward may also rebuild a saved
value in another way (`(g / s) * e` becomes `g * (e / s)`, which is softmax's
output); `read_saved` finds such recomputations by structure and reads the
input instead.
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError
from plait.dsl.graph import AlgorithmGraph, rebuild
from plait.dsl.node import Node


def saved_nodes(graph: AlgorithmGraph, save) -> dict[str, Node]:
    """The nodes `save` refers to: `name(x, label)` labels, or the forward's output names."""
    labelled: dict[str, Node] = {}
    for n in graph.nodes:
        if n.op == "name":
            label = n.attr("name")
            if label in labelled and labelled[label] is not n:
                raise PlaitError(f"{graph.name}: two intermediates are named {label!r}", n.loc)
            labelled[label] = n
    found = {}
    for label in save:
        if label in labelled:
            found[label] = labelled[label]
        elif label in graph.outputs:
            found[label] = graph.outputs[label]
        else:
            known = sorted(set(labelled) | set(graph.outputs))
            raise PlaitError(f"{graph.name}: save={label!r} names no intermediate; name one "
                             f"with name(x, {label!r}) (known: {', '.join(known) or 'none'})")
    return found



def with_saved_outputs(graph: AlgorithmGraph, save, *, name: str | None = None) -> AlgorithmGraph:
    """The forward graph that also writes out the saved intermediates (named as saved)."""
    outputs = dict(graph.outputs)
    for label, node in saved_nodes(graph, save).items():
        if label in outputs and outputs[label] is not node:
            raise PlaitError(f"{graph.name}: saved intermediate {label!r} clashes with an "
                             "output of that name")
        if label in {p.name for p in graph.params}:
            raise PlaitError(f"{graph.name}: saved intermediate {label!r} clashes with an "
                             "argument of that name")
        outputs[label] = node
    return AlgorithmGraph(name or graph.name, graph.params, graph.axis_order, outputs)


def structure_keys(nodes) -> dict[int, tuple]:
    """A key per node (by uid) equal for structurally equal computations."""
    keys: dict[int, tuple] = {}
    for n in nodes:
        if n.op in ("input", "param"):
            keys[n.uid] = (n.op, n.attr("name"))
        else:
            keys[n.uid] = (n.op, n.axes, n.dtype, n.attrs, tuple(keys[i.uid] for i in n.inputs))
    return keys


def read_saved(bwd: AlgorithmGraph, forward: AlgorithmGraph, save) -> AlgorithmGraph:
    """bwd with every recomputation of a saved value replaced by the saved input.

    `forward` is `with_saved_outputs(...)` simplified as bwd was, so that both
    spell the same value the same way; its outputs include the saved values.
    """
    if not save:
        return bwd
    fkeys = structure_keys(forward.nodes)
    wanted = {}
    for label in save:
        wanted.setdefault(fkeys[forward.outputs[label].uid], label)
    inputs = {n.attr("name"): n for n in bwd.nodes if n.op == "input"}
    bkeys = structure_keys(bwd.nodes)
    replaced = False

    def replace(n: Node, new_inputs):
        nonlocal replaced
        label = wanted.get(bkeys[n.uid]) if n.op not in ("input", "param") else None
        if label is not None:
            replaced = True
            return inputs.get(label) or _saved_input(bwd, label, n)
        if new_inputs == n.inputs:
            return n
        return Node(n.op, new_inputs, n.axes, n.dtype, n.attrs, n.loc)

    outputs = rebuild(bwd.outputs, replace)
    if not replaced:
        return bwd
    return AlgorithmGraph(bwd.name, bwd.params, bwd.axis_order, outputs)


def _saved_input(bwd: AlgorithmGraph, label: str, like: Node) -> Node:
    from plait.dsl.node import make_attrs
    index = next(i for i, p in enumerate(bwd.params) if p.name == label)
    return Node("input", (), like.axes, like.dtype, make_attrs(name=label, index=index), like.loc)
