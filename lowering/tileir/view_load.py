"""The view load: split_axis, merge_axes and shift (slice, pad, concat) of an input as one
load of the input's buffer at remapped indices (dsl/reshape.py has their meaning).

A chain of reshapes down to an input (slice of a split of x) is composed into one load:
walking from the top node down, each reshape says where its operand's indices come from,

    split_axis C -> (H, D)     c = h * size(D) + d
    merge_axes (B, T) -> N     t = n % size(T), b = n // size(T)
    shift T -> S by start      t = s + start   (and a guard: 0 <= t < size(T), else fill)

as int32 tile ops (iota, size, const, add, mul, floor_divide, remainder), so every
executor and emitter already knows them. The load takes those index values as operands,
one per remapped buffer axis (attr `view` names them, in order); the buffer's other axes
are the load's own. An index outside its buffer axis reads 0, never memory outside the
buffer; a shift's guard then puts its fill there with `where`, innermost shift first, so
an outer pad's value wins over an inner one's.
"""
from __future__ import annotations

from plait.dsl.dtypes import DType
from plait.dsl.node import Node
from plait.dsl.reshape import RESHAPES

INT = DType.INT32


class _Index:
    """Emits int32 index arithmetic into a tile-program builder, each value with its axes."""

    def __init__(self, builder):
        self.b = builder

    def emit(self, op, args, dtype=INT):
        axes = tuple(a for a in self.b.plan.axes if any(a in x[1] for x in args))
        return self.b.emit(op, [x[0] for x in args], axes, dtype), axes

    def at(self, axis):
        return self.b.emit("iota", (), (axis,), INT, axis=axis), (axis,)

    def const(self, value: int):
        return self.b.emit("const", (), (), INT, value=int(value)), ()

    def size(self, axis):
        return self.b.emit("size", (), (), INT, axis=axis), ()

    def add(self, x, y):
        return self.emit("add", (x, y))

    def start(self, n: Node):
        """A shift's start: its constant plus and minus the sizes it names."""
        total = self.const(n.attr("start")) if n.attr("start") else None
        for a in n.attr("plus") or ():
            total = self.size(a) if total is None else self.add(total, self.size(a))
        for a in n.attr("minus") or ():
            total = self.emit("sub", (total or self.const(0), self.size(a)))
        return total


def chain_to_input(n: Node) -> list[Node]:
    """The reshapes from `n` down to the input they read (top first)."""
    chain = [n]
    while chain[-1].inputs[0].op in RESHAPES:
        chain.append(chain[-1].inputs[0])
    return chain


def view_load(builder, n: Node) -> int:
    """Emit the view load of reshape `n` (whose chain ends at an input) and its guards;
    returns the value in its register dtype."""
    ix = _Index(builder)
    env: dict[str, tuple] = {}           # axis of the current operand -> its index value
    guards = []

    def get(axis):
        return env.pop(axis) if axis in env else ix.at(axis)

    chain = chain_to_input(n)
    for m in chain:
        if m.op == "split_axis":
            parts = m.attr("into")
            index = get(parts[0])
            for p in parts[1:]:
                index = ix.add(ix.emit("mul", (index, ix.size(p))), get(p))
            env[m.attr("axis")] = index
        elif m.op == "merge_axes":
            rest, parts = get(m.attr("into")), m.attr("parts")
            for p in reversed(parts[1:]):
                env[p] = ix.emit("remainder", (rest, ix.size(p)))
                rest = ix.emit("floor_divide", (rest, ix.size(p)))
            env[parts[0]] = rest
        else:                            # shift
            index = get(m.attr("into"))
            start = ix.start(m)
            env[m.attr("axis")] = index if start is None else ix.add(index, start)
            guards.append((env[m.attr("axis")], m.attr("axis"), m.attr("fill")))
    src = chain[-1].inputs[0]
    view = tuple(a for a in src.axes if a in env)
    builder.use_buffer(src.attr("name"))
    loaded = builder.emit("load", [env[a][0] for a in view], n.axes, src.dtype,
                          buffer=src.attr("name"), view=view)
    value = builder._to_register(loaded, n.axes, src.dtype)
    reg = builder.ops[value].dtype
    for index, axis, fill in reversed(guards):       # the innermost shift first
        low = ix.emit("ge", (index, ix.const(0)), DType.BOOL)
        high = ix.emit("lt", (index, ix.size(axis)), DType.BOOL)
        inside = ix.emit("logical_and", (low, high), DType.BOOL)
        filler = builder.emit("const", (), (), reg, value=fill)
        value = builder.emit("where", (inside[0], value, filler), n.axes, reg)
    return value
