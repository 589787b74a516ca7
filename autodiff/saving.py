"""Save vs recompute: which forward intermediates the backward reads instead of recomputing.

The forward labels an intermediate with `name(x, "rstd")` (or an output is
referred to by its name). `with_saved_outputs` is the forward that also writes
the saved values out; the backward takes them as inputs of the same names.

`differentiate` already reads a saved value wherever a gradient rule refers to
that very node. After simplification the backward may also rebuild a saved
value in another way (`(g / s) * e` becomes `g * (e / s)`, which is softmax's
output); `read_saved` finds such recomputations by structure and reads the
input instead.

One name needs no label: "lse", the log-sum-exp of the forward's softmax (attention's
statistics, `log(sum(exp(x - m))) + m` in fp32 over the rows). The forward writes it out
(a streamed attention forward from its running max and sum, at no extra pass), and the
backward reads each softmax p of those logits as exp(x - lse) instead of recomputing
the sums: for attention one streamed pass over the keys fewer.

A comparison reads a saved value only where storing it lost nothing (`readable`). Its
outcome jumps where its operands meet, for max's tie mask at the very element the
gradient goes to: max(x * 1.3) is computed in fp32 registers (float64 in the reference)
and stored rounded to bf16, so the stored extreme equals none of the recomputed values
and the mask would be empty. Such a value is recomputed where a comparison reads it.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import DType, promote, round_to
from plait.dsl.errors import PlaitError
from plait.dsl.graph import AlgorithmGraph, rebuild
from plait.dsl.node import Node, make_attrs, topo_order

LSE = "lse"      # the softmax's log-sum-exp: a saved name no `name(x, ...)` label needs
COMPARES = ("eq", "ne", "lt", "le", "gt", "ge")
# ops whose result is one of their (value) operands' values, or its negation: exact
# (a cast only where the wider dtype holds its operand: see stored_exactly)
_PICKS = ("name", "broadcast", "permute", "stop_gradient", "max", "min", "maximum", "minimum",
          "where", "neg", "abs", "cast")


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
        elif label == LSE:
            found[label] = softmax_logsumexp(graph)
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


def _strip(n: Node) -> Node:
    while n.op in ("name", "broadcast", "stop_gradient"):
        n = n.inputs[0]
    return n


def softmaxes(nodes) -> list[tuple[Node, Node, str]]:
    """(p, x, axis) for each p = exp(x - max(x)) / sum(exp(x - max(x)), over=axis) among
    nodes (the DSL softmax's traced form)."""
    found = []
    for p in nodes:
        if p.op != "div":
            continue
        e, z = (_strip(i) for i in p.inputs)
        if z.op != "sum" or _strip(z.inputs[0]) is not e or e.op != "exp" or \
                _strip(e.inputs[0]).op != "sub":
            continue
        x, m = (_strip(i) for i in _strip(e.inputs[0]).inputs)
        axis = z.attr("axis")
        if m.op == "max" and m.attr("axis") == axis and _strip(m.inputs[0]) is x:
            found.append((p, x, axis))
    return found


def softmax_logsumexp(graph: AlgorithmGraph) -> Node:
    """The log-sum-exp (fp32) of the forward's one softmax, from the softmax's own max and
    sum; PlaitError when the forward has no softmax or several."""
    found = softmaxes(graph.nodes)
    if len({(x.uid, axis) for _, x, axis in found}) != 1:
        raise PlaitError(f"{graph.name}: save={LSE!r} saves the log-sum-exp of the softmax, "
                         f"but the forward has {len(found) or 'no'} softmaxes; label the "
                         "value to save with name(x, label)")
    p = found[0][0]
    e, z = p.inputs
    shift = _strip(e).inputs[0].inputs[1]          # stop_gradient(max(x)), as traced
    rows = z.axes
    value = Node("add", (Node("log", (z,), rows, z.dtype, make_attrs(), p.loc), shift),
                 rows, z.dtype, make_attrs(), p.loc)
    if value.dtype != DType.FP32:
        value = Node("cast", (value,), rows, DType.FP32, make_attrs(dtype=DType.FP32), p.loc)
    return value


def compared(nodes) -> set[int]:
    """uids of the values that comparisons among `nodes` hold against another computed
    value (max's tie mask x == broadcast(max(x))), and of what they pass on exactly.

    A comparison with a constant is left out: rounding is monotonic, so a stored value
    stands on the same side of a fixed threshold unless it rounds onto it (relu's and
    abs's x >= 0 keep reading a saved x)."""
    found: set[int] = set()
    for n in nodes:
        if n.op in COMPARES:
            sides = [_passed_on(i) for i in n.inputs]
            if all(side[-1].op != "const" for side in sides):
                found.update(m.uid for side in sides for m in side)
    return found


def _passed_on(node: Node) -> list[Node]:
    """node and the values it is an exact function of, down to the first that is not."""
    chain = [node]
    while node.op in _PICKS and len(node.inputs) == 1:
        node = node.inputs[0]
        chain.append(node)
    return chain


def stored_exactly(node: Node) -> bool:
    """Whether node's dtype holds its value exactly, whatever precision computed it: an
    input, a constant its dtype holds, or a pick among such values (an extreme of them)."""
    if not node.dtype.is_float or node.op == "input":
        return True
    if node.op == "const":
        value = node.attr("value")
        return float(round_to(np.float64(value), node.dtype)) == value
    if node.op not in _PICKS:
        return False
    values = node.inputs[1:] if node.op == "where" else node.inputs   # not the condition
    return all(v.dtype.is_float and promote(v.dtype, node.dtype) == node.dtype and
               stored_exactly(v) for v in values)


def readable(node: Node, compared_uids: set[int]) -> bool:
    """Whether the backward may read node's saved value in place of recomputing it."""
    return node.uid not in compared_uids or stored_exactly(node)


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
    compared_uids = compared(bwd.nodes)
    replaced = False

    def replace(n: Node, new_inputs):
        nonlocal replaced
        label = wanted.get(bkeys[n.uid]) if n.op not in ("input", "param") and \
            readable(n, compared_uids) else None
        if label is not None:
            replaced = True
            return inputs.get(label) or _saved_input(bwd, label, n)
        if new_inputs == n.inputs:
            return n
        return Node(n.op, new_inputs, n.axes, n.dtype, n.attrs, n.loc)

    outputs = rebuild(bwd.outputs, replace)
    if LSE in save:
        outputs, replaced = _softmax_over_saved_lse(bwd, outputs, forward, fkeys) or \
            (outputs, replaced)
    if not replaced:
        return bwd
    return AlgorithmGraph(bwd.name, bwd.params, bwd.axis_order, outputs)


def _softmax_over_saved_lse(bwd: AlgorithmGraph, outputs: dict, forward: AlgorithmGraph,
                            fkeys: dict):
    """(outputs, True) with each softmax of the forward's saved logits read as
    exp(x - lse); None when the saved "lse" is not that softmax's log-sum-exp (a label or
    output of the user's) or the backward recomputes no such softmax."""
    try:
        lse_value = softmax_logsumexp(forward)
    except PlaitError:
        return None
    if structure_keys(topo_order([lse_value]))[lse_value.uid] != \
            fkeys[forward.outputs[LSE].uid]:
        return None
    (_, fx, faxis), = softmaxes(forward.nodes)[:1]
    graph = AlgorithmGraph(bwd.name, bwd.params, bwd.axis_order, outputs)
    keys = structure_keys(graph.nodes)
    targets = {p.uid: (x, axis) for p, x, axis in softmaxes(graph.nodes)
               if axis == faxis and keys[x.uid] == fkeys[fx.uid]}
    if not targets:
        return None
    memo: dict[int, Node] = {}
    lse = None

    def replace(n: Node, new_inputs):
        nonlocal lse
        if n.uid in targets:
            x, axis = targets[n.uid]
            x = memo[x.uid]            # x is below n: already rebuilt
            if lse is None:
                rows = tuple(a for a in x.axes if a != axis)
                lse = _saved_input(bwd, LSE, Node("input", (), rows, DType.FP32))
            diff = Node("sub", (x, lse), x.axes, DType.FP32, make_attrs(), n.loc)
            out = Node("exp", (diff,), n.axes, DType.FP32, make_attrs(), n.loc)
        else:
            out = n if new_inputs == n.inputs else Node(n.op, new_inputs, n.axes, n.dtype,
                                                        n.attrs, n.loc)
        memo[n.uid] = out
        return out
    return rebuild(outputs, replace), True


def _saved_input(bwd: AlgorithmGraph, label: str, like: Node) -> Node:
    index = next(i for i, p in enumerate(bwd.params) if p.name == label)
    return Node("input", (), like.axes, like.dtype, make_attrs(name=label, index=index), like.loc)
