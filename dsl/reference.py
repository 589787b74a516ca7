"""The numpy reference evaluator: what an algorithm graph means.

By default every value is float64 (integers and bools keep their type). With
`rounding`, each node's value is rounded as the GPU would hold it: `rounding`
maps a node to the dtype its value is kept in (or None to leave it), e.g. the
schedule's compute dtype for arithmetic and the storage dtype for outputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .axis_sizes import derive_sizes
from .dtypes import DType, round_to
from .errors import PlaitError
from .graph import AlgorithmGraph
from .node import OPS, Node


@dataclass
class EvalContext:
    inputs: dict
    sizes: dict[str, int]
    round: bool = False
    values: dict[int, np.ndarray] = field(default_factory=dict)


def bind_sizes(graph: AlgorithmGraph, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Axis extents from input shapes; refuses rank or extent mismatches by name."""
    sizes: dict[str, int] = {}
    where_from: dict[str, str] = {}
    for p in graph.params:
        if not p.is_tensor:
            continue
        if p.name not in shapes:
            raise PlaitError(f"{graph.name}: missing input {p.name!r}")
        shape = tuple(shapes[p.name])
        if len(shape) != len(p.axes):
            raise PlaitError(f"{graph.name}: input {p.name!r} is declared over "
                             f"[{', '.join(p.axes)}] ({len(p.axes)} axes) but has shape {shape}")
        for axis, extent in zip(p.axes, shape):
            if axis in sizes and sizes[axis] != extent:
                raise PlaitError(f"{graph.name}: axis {axis} is {sizes[axis]} in "
                                 f"{where_from[axis]!r} but {extent} in {p.name!r}")
            sizes.setdefault(axis, int(extent))
            where_from.setdefault(axis, p.name)
    sizes = derive_sizes(graph.nodes, sizes)    # the axes split_axis, slice, ... made
    for axis, extent in sizes.items():
        if extent < 0:
            raise PlaitError(f"{graph.name}: axis {axis} has extent {extent}; plait needs >= 0")
    for n in graph.nodes:        # a kernel would clamp an uncovered position: refuse it
        if n.op == "blocked":
            for coarse, fine in n.attr("blocks"):
                if sizes.get(coarse, 0) * n.attr("size") < sizes.get(fine, 0):
                    from .ops import blocked_cover_message
                    raise PlaitError(f"{graph.name}: " + blocked_cover_message(
                        coarse, fine, n.attr("size"), sizes), n.loc)
    return sizes


def _align(array, src_axes: tuple[str, ...], dst_axes: tuple[str, ...]):
    """View `array` (dims in src_axes order) with dims in dst_axes order, size-1 where absent."""
    array = np.asarray(array)
    if src_axes == dst_axes:
        return array
    missing = tuple(i for i, a in enumerate(dst_axes) if a not in src_axes)
    order = [src_axes.index(a) for a in dst_axes if a in src_axes]
    return np.expand_dims(np.transpose(array, order), missing) if missing else np.transpose(
        array, order)


def evaluate(graph: AlgorithmGraph, inputs: dict, *,
             rounding: Callable[[Node], DType | None] | None = None) -> dict[str, np.ndarray]:
    """Run the graph on numpy inputs (keyed by argument name); returns outputs by name."""
    shapes = {p.name: np.shape(inputs[p.name]) for p in graph.params
              if p.is_tensor and p.name in inputs}
    sizes = bind_sizes(graph, shapes)
    values: dict[str, object] = {}
    for p in graph.params:
        if p.is_tensor:
            arr = np.asarray(inputs[p.name])
            values[p.name] = arr.astype(np.float64) if arr.dtype.kind == "f" or \
                arr.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2") else arr
        else:
            values[p.name] = inputs.get(p.name, p.default)
            if values[p.name] is None:
                raise PlaitError(f"{graph.name}: missing scalar argument {p.name!r}")
    ctx = EvalContext(values, sizes, round=rounding is not None)
    plans, absorbed = _contractions(graph, rounding)
    for node in graph.nodes:
        if node.uid in absorbed:
            continue  # a product only its contraction reads: never materialised
        if node.uid in plans:
            ctx.values[node.uid] = _finish(node, _contract(node, plans[node.uid], ctx), rounding)
        else:
            ctx.values[node.uid] = _eval_node(node, ctx, rounding)
    return {name: np.asarray(ctx.values[n.uid]) for name, n in graph.outputs.items()}


def _eval_node(node: Node, ctx: EvalContext, rounding):
    opdef = OPS[node.op]
    args = [ctx.values[i.uid] for i in node.inputs]
    if opdef.kind == "elementwise":
        args = [_align(a, i.axes, node.axes) for a, i in zip(args, node.inputs)]
    elif opdef.kind == "broadcast":   # the operand may be stored in another order
        src = node.inputs[0].axes
        args = [_align(args[0], src, tuple(a for a in node.axes if a in src))]
    value = opdef.evaluate(node, ctx, *args)
    if opdef.kind == "reduce":
        # numpy keeps the operand's order; the graph may type the result in another
        # (autodiff reduces a permuted gradient into canonical order)
        kept = tuple(a for a in node.inputs[0].axes if a != node.attr("axis"))
        value = _align(value, kept, node.axes)
    if opdef.kind == "elementwise":
        shape = tuple(ctx.sizes[a] for a in node.axes)
        value = np.broadcast_to(value, np.broadcast_shapes(np.shape(value), shape))
    return _finish(node, value, rounding)


def _finish(node: Node, value, rounding):
    if rounding is not None:
        dtype = rounding(node)
        if dtype is not None and node.dtype != DType.BOOL:
            value = round_to(np.asarray(value, np.float64), dtype)
    elif node.dtype.is_float:
        value = np.asarray(value, np.float64)
    return value


# ---- contractions: sum over axes of a product, evaluated by einsum
#
# Evaluated node by node, sum(a * b, over="K") of an [M, K] and a [K, N] tensor
# would hold the whole [M, K, N] product (a 2048x1024x2048 matmul: 32 GiB).
# np.einsum gives the same float64 sums with memory of the order of inputs and
# outputs. Under `rounding`, a product or partial sum that is rounded per element
# keeps the node-by-node path: einsum never holds those rounded values.


def _contractions(graph: AlgorithmGraph, rounding):
    """{uid of the outermost sum: (reduced axes, factor nodes)} and the uids it absorbs."""
    users = graph.users()
    outputs = {n.uid for n in graph.outputs.values()}

    def private(n: Node) -> bool:  # read only by the one node above it, kept unrounded
        return (len(users[n.uid]) == 1 and n.uid not in outputs and n.dtype.is_float
                and (rounding is None or rounding(n) is None))

    plans: dict[int, tuple[tuple[str, ...], list[Node]]] = {}
    absorbed: set[int] = set()
    for top in reversed(graph.nodes):
        if top.op != "sum" or top.uid in absorbed or not top.dtype.is_float:
            continue
        chain, body = [top], top.inputs[0]
        while body.op == "sum" and private(body):
            chain.append(body)
            body = body.inputs[0]
        if body.op != "mul" or not private(body):
            continue
        factors, inner = [], []

        def collect(n: Node):
            for i in n.inputs:
                if i.op == "mul" and private(i):
                    inner.append(i)
                    collect(i)
                else:
                    factors.append(i)
        collect(body)
        plans[top.uid] = (tuple(n.attr("axis") for n in chain), factors)
        absorbed.update(n.uid for n in chain[1:] + [body] + inner)
    return plans, absorbed


def _contract(node: Node, plan, ctx: EvalContext):
    _, factors = plan
    letters: dict[str, str] = {}
    for f in factors:
        for a in f.axes:
            letters.setdefault(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[
                len(letters)])
    operands = [np.broadcast_to(np.asarray(ctx.values[f.uid], np.float64),
                                tuple(ctx.sizes[a] for a in f.axes)) for f in factors]
    spec = ",".join("".join(letters[a] for a in f.axes) for f in factors)
    spec += "->" + "".join(letters[a] for a in node.axes)
    return np.einsum(spec, *operands, optimize=True)  # pairwise BLAS contractions
