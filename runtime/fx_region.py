"""One FX region (a GraphModule of supported ATen ops) written as a plait algorithm.

    algo, spec = region_algorithm(sub_gm, "fused_0")

The algorithm takes one tensor per placeholder, declared over the axes fx_axes names for its
dims of size > 1 (in torch's dim order), and returns one output per value the region
exports, stored in torch's dim order (`permute` where the canonical order differs). After
each op, where plait's promotion gives another dtype than torch's (the node's fake
tensor says), a cast makes it torch's. `spec` says how torch tensors go in (squeezed of
size-1 dims, contiguous) and how plait's outputs come back (shape, strides, dtype).
A region plait cannot express raises PlaitError, and the caller leaves it to torch.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from plait import dsl
from plait.dsl.algorithm import Algorithm
from plait.dsl.dtypes import dtype_of
from plait.dsl.errors import PlaitError

from . import fx_ops
from .fx_axes import AxisNames, shape


@dataclass(frozen=True)
class Port:
    """A tensor crossing the region's boundary: torch's view of it, plait's shape."""
    shape: tuple[int, ...]          # torch shape
    stride: tuple[int, ...]         # torch strides (outputs: what the region must return)
    dtype: object                   # torch dtype
    plait_shape: tuple[int, ...]    # the dims of size > 1, in plait's order
    perm: tuple[int, ...] = ()      # inputs: torch dims in plait's order (size-1 dims last)


@dataclass(frozen=True)
class RegionSpec:
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    single: bool                    # the submodule returns one tensor, not a tuple
    device: str                     # "cpu" or "cuda"
    source: str                     # the DSL source, for logs


def _port(node) -> Port:
    v = node.meta["val"]
    return Port(tuple(v.shape), tuple(v.stride()), v.dtype, tuple(n for n in v.shape if n != 1))


def _input_port(node) -> Port:
    """An input is declared in the order of its strides (largest first) when that makes it
    contiguous, so a transposed view (a weight's .t()) goes in without a copy."""
    v = node.meta["val"]
    big = [d for d, n in enumerate(v.shape) if n != 1]
    by_stride = sorted(big, key=lambda d: -v.stride()[d])
    if not v.permute(by_stride + [d for d in range(v.dim()) if d not in big]).is_contiguous():
        by_stride = big
    perm = tuple(by_stride) + tuple(d for d in range(v.dim()) if d not in big)
    return Port(tuple(v.shape), tuple(v.stride()), v.dtype,
                tuple(v.shape[d] for d in by_stride), perm)


def _plait_dtype(node):
    return dtype_of(node.meta["val"].dtype)


def _arg(env, a):
    if isinstance(a, (list, tuple)):
        return type(a)(_arg(env, x) for x in a)
    return env[a] if hasattr(a, "meta") and a in env else a


def _renamed(env, names: AxisNames, node) -> dict:
    """env with the operands fx_axes renames for this node renamed (a full-range slice
    into the axis torch aligns the dim with)."""
    renames = names.renames.get(node)
    if not renames:
        return env
    env = dict(env)
    for src, dim, target in renames:
        old, new = names.axis(src, dim), names.axis(*target)
        if old != new and old in env[src].axes:
            env[src] = dsl.slice(env[src], into=new, **{old: (0, shape(src)[dim])})
    return env


def _body(graph, names: AxisNames, table):
    """The function the DSL traces: each FX node through its builder, in graph order."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next(n for n in graph.nodes if n.op == "output")

    def body(*tensors):
        env = dict(zip(placeholders, tensors))
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            args = [_arg(_renamed(env, names, node), a) for a in node.args]
            value = table[node.target].build(names, node, *args)
            want = _plait_dtype(node)
            if value.dtype != want:
                value = dsl.cast(value, want)
            expected = names.out_axes(node)
            if sorted(value.axes) != sorted(expected):
                raise PlaitError(f"{node.name} ({node.target}): plait's axes "
                                 f"{list(value.axes)} are not torch's {list(expected)}")
            env[node] = value
        outs = output.args[0]
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        result = []
        for node in outs:
            value, order = env[node], names.out_axes(node)
            result.append(value if value.axes == order else dsl.permute(value, *order))
        return result[0] if len(result) == 1 else tuple(result)

    return body


def region_algorithm(gm, name: str) -> tuple[Algorithm, RegionSpec]:
    """The plait algorithm computing submodule `gm`, and how tensors cross its boundary."""
    table = fx_ops.table()
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next(n for n in graph.nodes if n.op == "output")
    outs = output.args[0]
    out_nodes = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    names = AxisNames([n for n in graph.nodes if n.op in ("placeholder", "call_function")],
                      table)
    params, ports = [], [_input_port(p) for p in placeholders]
    for i, (p, port) in enumerate(zip(placeholders, ports)):
        axes = tuple(names.axis(p, d) for d in port.perm[:len(port.plait_shape)])
        if not axes:
            raise PlaitError(f"input {p.name} {list(shape(p))} has no dim larger than 1")
        params.append(inspect.Parameter(f"x{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        annotation=dsl.Tensor[axes]))
    body = _body(graph, names, table)
    body.__signature__ = inspect.Signature(params)
    body.__annotations__ = {p.name: p.annotation for p in params}
    body.__name__ = name
    algo = Algorithm(body, name=name)
    dtypes = {f"x{i}": _plait_dtype(p) for i, p in enumerate(placeholders)}
    graph_ = algo.graph(dtypes)          # traces now: a DSL refusal surfaces here
    devices = {str(n.meta["val"].device.type) for n in placeholders + out_nodes}
    if len(devices) != 1 or not devices <= {"cpu", "cuda"}:
        raise PlaitError(f"region tensors on {sorted(devices)}")
    spec = RegionSpec(tuple(ports), tuple(_port(n) for n in out_nodes),
                      not isinstance(outs, (tuple, list)), devices.pop(), _source(algo, dtypes,
                                                                                  graph_))
    return algo, spec


def _source(algo, dtypes, graph) -> str:
    try:
        from plait.autodiff.source import to_source
        return to_source(algo, dtypes)
    except Exception:                 # printing is for logs only; never a reason to refuse
        return str(graph)
