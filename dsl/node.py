"""The one immutable node type of the algorithm graph, and the op registry.

A Node is an operation on named axes: `axes` lists the axes of its value in the
algorithm's canonical order (the order the axes first appear in the
signature), so two nodes over the same axes always agree on layout. Each op is
registered once, in `ops.py`, with its reference evaluation and gradient rule
next to each other (lowering rules live in `plait.lowering`, keyed by op name).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from .dtypes import DType
from .errors import SourceLoc

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Node:
    op: str
    inputs: tuple["Node", ...]
    axes: tuple[str, ...]
    dtype: DType
    attrs: tuple[tuple[str, Any], ...] = ()
    loc: SourceLoc | None = field(default=None, compare=False)
    uid: int = field(default_factory=lambda: next(_ids), compare=False)

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def key(self) -> tuple:
        """Structural identity (used for common-subexpression elimination)."""
        return (self.op, tuple(i.uid for i in self.inputs), self.axes, self.dtype, self.attrs)

    def __repr__(self) -> str:
        return f"Node({self.op}, {self.dtype}[{','.join(self.axes)}], #{self.uid})"


def make_attrs(**kwargs) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kwargs.items()))


@dataclass(frozen=True)
class OpDef:
    """What plait knows of one op, outside lowering.

    kind: 'source' (input, param, const, size, iota), 'elementwise', 'reduce',
    'broadcast', 'movement' (an element reads another position of its operand along an
    axis: rotate_half). `evaluate(node, *arrays)` computes in float64 on arrays whose
    dims follow each input node's axes (already broadcast to node.axes for
    elementwise ops). `vjp(node, g, *inputs)` returns one gradient Tensor (or
    None) per input, built with the DSL itself; None for `vjp` means the op is
    not differentiable and autodiff refuses it by name.

    A reduction also names `combine`, the elementwise op that folds two partials
    (every executor and emitter folds with it), and `identity`, what an element outside
    the tensor contributes: 'zero', 'lowest' or 'highest' (of the register dtype).
    """
    name: str
    kind: str
    evaluate: Callable
    vjp: Callable | None = None
    combine: str | None = None
    identity: str | None = None


OPS: dict[str, OpDef] = {}


def reductions() -> tuple[str, ...]:
    """The reduction ops, from the op table (a new one is registered in dsl/ops.py only)."""
    return tuple(name for name, op in OPS.items() if op.kind == "reduce")


def register(opdef: OpDef) -> OpDef:
    if opdef.name in OPS:
        raise ValueError(f"op {opdef.name!r} registered twice")
    if opdef.kind == "reduce" and (opdef.combine is None or
                                   opdef.identity not in ("zero", "lowest", "highest")):
        raise ValueError(f"reduction {opdef.name!r} needs a combine op and an identity "
                         "('zero', 'lowest' or 'highest')")
    OPS[opdef.name] = opdef
    return opdef


def topo_order(outputs: list[Node]) -> list[Node]:
    """Nodes reachable from outputs, inputs before users, deterministic."""
    seen: set[int] = set()
    order: list[Node] = []
    stack: list[tuple[Node, bool]] = [(n, False) for n in reversed(outputs)]
    while stack:
        node, expanded = stack.pop()
        if node.uid in seen:
            continue
        if expanded:
            seen.add(node.uid)
            order.append(node)
            continue
        stack.append((node, True))
        for inp in reversed(node.inputs):
            if inp.uid not in seen:
                stack.append((inp, False))
    return order
