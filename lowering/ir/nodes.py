"""The nodes of the one IR: typed SSA values, ops with nested blocks, a kernel.

    Type    (axes, dtype, layout): the block tile of a value over named axes, its register
            or storage dtype, and where its elements live (`layouts.py`); scalars (params,
            constants, sizes) have no axes and no layout: every thread holds them.
    Op      name, result value ids, argument value ids, sorted attributes, and for `for`
            its body: a Block whose params are the carried values and whose last op is
            `yield`. Every op of every kind has this one shape; what an op means is in
            `OPS` below (its arity) and in the interpreter (`cpu/ir_interp.py`).
    Kernel  one kernel of the kernel graph: buffers, scalars, grid, threads, the types of
            all its values, and its body.

Nodes are immutable; passes return new kernels (`Kernel.replace_body`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from plait.dsl.dtypes import DType

from ..artifact import Buffer
from .layouts import Layout


@dataclass(frozen=True)
class Type:
    axes: tuple[str, ...]
    dtype: DType
    layout: Layout | None = None

    def text(self) -> str:
        lay = f" {self.layout.text()}" if self.layout is not None else ""
        return f"{self.dtype}[{','.join(self.axes)}]{lay}"


@dataclass(frozen=True)
class Op:
    name: str
    results: tuple[int, ...]
    args: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    body: "Block | None" = None

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def result(self) -> int:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]


@dataclass(frozen=True)
class Block:
    params: tuple[int, ...]
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Kernel:
    name: str
    target: str
    path: str                           # the path that compiles it today: simt | gemm | stream
    buffers: tuple[Buffer, ...]
    scalars: tuple[tuple[str, DType], ...]
    grid: tuple[tuple[str, int], ...]   # gridded axes and their block tiles
    threads: int
    types: tuple[tuple[int, Type], ...]
    body: Block
    attrs: tuple[tuple[str, Any], ...] = ()

    def type_of(self, value: int) -> Type:
        return self._types[value]

    @property
    def _types(self) -> dict[int, Type]:
        cached = self.__dict__.get("_type_map")
        if cached is None:
            cached = dict(self.types)
            object.__setattr__(self, "_type_map", cached)
        return cached

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)

    def attr(self, key: str, default=None):
        return dict(self.attrs).get(key, default)

    def text(self) -> str:
        """The kernel as `printer.py` writes it (the `--dump` stages' form)."""
        from .printer import kernel_text     # the printer reads these nodes
        return kernel_text(self)

    def replace_body(self, body: Block, types: dict[int, Type]) -> "Kernel":
        return replace(self, body=body, types=tuple(sorted(types.items())))


def walk(block: Block):
    """Every op of `block`, nested blocks included, in program order."""
    for op in block.ops:
        yield op
        if op.body is not None:
            yield from walk(op.body)


# Ops with a fixed meaning beyond the op table's elementwise ops: name -> (args, results),
# None where it varies. The verifier checks these; the interpreter runs them.
STRUCTURAL = {
    "const": (0, 1), "param": (0, 1), "size": (0, 1), "iota": (0, 1),
    "load": (None, 1), "store": (1, 0), "atomic_add": (1, 0), "scatter_add": (2, 0),
    "convert": (1, 1), "round": (1, 1), "convert_layout": (1, 1),
    "reduce": (None, None), "scan": (None, None), "sort": (None, 2), "dot": (None, 1), "for": (None, None),
    "yield": (None, 0),
    # a SIMT kernel's thread-level steps (`simt_threads.py`)
    "accumulate": (2, 1), "reduce_local": (1, 1), "reduce_shfl": (1, 1),
    "barrier": (None, None), "smem_put": (2, 1), "smem_fold": (1, 1), "reduce_done": (1, 1),
    "scan_local": (None, 1), "scan_block": (None, 1), "scan_part": (1, 1),
    "scan_carry": (0, 1),
    "sort_block": (None, 1), "sort_part": (1, 1),
}


@dataclass
class Builder:
    """Appends ops to nested blocks, numbering values as it goes."""
    types: dict[int, Type] = field(default_factory=dict)
    stack: list[list[Op]] = field(default_factory=lambda: [[]])

    def value(self, t: Type) -> int:
        v = len(self.types)
        self.types[v] = t
        return v

    def op(self, name: str, args=(), result: Type | tuple[Type, ...] | None = None, /,
           **attrs) -> Op:
        results = () if result is None else (result,) if isinstance(result, Type) else result
        op = Op(name, tuple(self.value(t) for t in results), tuple(args),
                tuple(sorted((k, v) for k, v in attrs.items() if v is not None)))
        self.stack[-1].append(op)
        return op

    def emit(self, name: str, args, result: Type, /, **attrs) -> int:
        return self.op(name, args, result, **attrs).result

    def open(self) -> None:
        self.stack.append([])

    def close(self, params: tuple[int, ...]) -> Block:
        return Block(params, tuple(self.stack.pop()))

    def for_op(self, carried: tuple[int, ...], body: Block, results: tuple[Type, ...], /,
               **attrs) -> Op:
        op = Op("for", tuple(self.value(t) for t in results), carried,
                tuple(sorted((k, v) for k, v in attrs.items() if v is not None)), body)
        self.stack[-1].append(op)
        return op

    def block(self) -> Block:
        return Block((), tuple(self.stack[0]))
