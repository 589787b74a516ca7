"""A scan's combine as a program of register ops on scalars, shared by the tile program
(tile.py builds it from the DSL's traced combine), the thread-level IR (ir/scan_steps.py
makes the named scans' one-op programs), the CPU executor and the LLVM emitter.

Ops 0 .. 2k-1 are `scan_arg` (the left state's k parts, then the right's); the others are
`const`, `convert` and elementwise ops of the op table, in fp32 / int32 / int64 / bool
registers, unrounded. `results` names the k ops that make the combined state.
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.node import OPS, Node, topo_order


@dataclass(frozen=True)
class CombineOp:
    id: int
    op: str
    args: tuple[int, ...]
    dtype: DType
    attrs: tuple = ()

    def attr(self, key, default=None):
        return dict(self.attrs).get(key, default)

    def __str__(self) -> str:
        if self.op == "scan_arg":
            return f"%{self.id}=s{self.attr('index')}"
        inner = [f"%{a}" for a in self.args] + [f"{k}={v}" for k, v in self.attrs]
        return f"%{self.id}={self.op}({', '.join(inner)}):{self.dtype}"

    __repr__ = __str__


def _register(dtype: DType) -> DType:
    return DType.FP32 if dtype.is_float else dtype


IDENTITY_OPS = ("broadcast", "name", "permute", "stop_gradient")


def _op(ops: list, name: str, args, dtype: DType, **attrs) -> int:
    ops.append(CombineOp(len(ops), name, tuple(args), dtype, tuple(sorted(attrs.items()))))
    return len(ops) - 1


def combine_program(args: tuple[Node, ...], results: tuple[Node, ...]):
    """The traced combine (`args`: its placeholders, `results`: the state it returns) as
    (ops, result ids)."""
    ops: list[CombineOp] = []
    ids = {}
    for a in args:
        ids[a.uid] = _op(ops, "scan_arg", (), _register(a.dtype), index=a.attr("index"))
    for n in topo_order(list(results)):
        if n.uid in ids:
            continue
        reg = _register(n.dtype)
        inner = [ids[i.uid] for i in n.inputs]
        if n.op == "const":
            ids[n.uid] = _op(ops, "const", (), reg, value=n.attr("value"))
        elif n.op in IDENTITY_OPS or n.op == "cast" and n.dtype.is_float and \
                n.inputs[0].dtype.is_float:
            ids[n.uid] = inner[0]
        elif n.op == "cast":
            ids[n.uid] = _op(ops, "convert", inner, reg)
        elif OPS[n.op].kind == "elementwise":
            ids[n.uid] = _op(ops, n.op, inner, reg)
        else:
            raise PlaitError(f"a scan's combine holds {n.op!r}, not an elementwise op", n.loc)
    return tuple(ops), tuple(ids[r.uid] for r in results)


def named_program(kind: str, dtype: DType):
    """cumsum's (and the others') combine as a program: one op of the op table's."""
    ops: list[CombineOp] = []
    left, right = (_op(ops, "scan_arg", (), dtype, index=i) for i in (0, 1))
    folded = _op(ops, OPS[kind].combine, (left, right), dtype)
    return tuple(ops), (folded,)


def scan_identity_value(kind: str, dtype: DType):
    """The identity of named scan `kind` in register dtype `dtype`, a Python number."""
    value = OPS[kind].identity
    if value in ("zero", "one"):
        return {DType.FP32: float}.get(dtype, int)(value == "one")
    if dtype == DType.BOOL:
        return value == "highest"
    if dtype == DType.FP32:
        return float("-inf") if value == "lowest" else float("inf")
    bits = dtype.bits - 1
    return -(1 << bits) if value == "lowest" else (1 << bits) - 1
