"""The IR verifier: what every kernel must satisfy between passes (on in tests).

- SSA: each value is defined once, before its uses, in its block or an enclosing one;
  a `for`'s params and results are its own.
- Arity: structural ops take and give what `nodes.STRUCTURAL` says; a `for` carries as
  many values as its body's params and its results, and its body ends in a `yield` of
  that many values of the carried types (axes and dtype).
- Axes: an op's result lives on axes its arguments bring, plus the axis of an iota, the
  partial axis of a reduce, or a load's or product's own; a reduce drops its axis (a
  pair reduce, argmax's, takes (value, int32 index) and gives both); a
  store's value varies only along its buffer's axes.
- Layouts: a register layout only spreads axes its value has; `convert_layout` changes
  only the layout; a product's operands are tensor-core fragments (a, b) or in shared
  memory, and its accumulator and result are `acc` fragments when an operand is one.
"""
from __future__ import annotations

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.select import is_pair

from .layouts import Blocked, Mma, Shared, spread_axes
from .nodes import STRUCTURAL, Block, Kernel, Op


def verify(k: Kernel) -> None:
    """Raise PlaitError naming the kernel, op and rule that fails; return None if none."""
    _Checker(k).block(k.body, set())


class _Checker:
    def __init__(self, k: Kernel):
        self.k = k
        self.defined: set[int] = set()

    def fail(self, op: Op, why: str):
        raise PlaitError(f"IR of kernel {self.k.name}: {op.name} "
                         f"{', '.join(f'%{v}' for v in op.results) or ''}: {why}")

    def define(self, op: Op, v: int, scope: set) -> None:
        if v in self.defined:
            self.fail(op, f"%{v} is defined twice")
        self.defined.add(v)
        scope.add(v)

    def block(self, block: Block, outer: set) -> list[int] | None:
        scope = set(outer)
        for p in block.params:
            self.defined.add(p)
            scope.add(p)
        for i, op in enumerate(block.ops):
            for a in op.args:
                if a not in scope:
                    self.fail(op, f"uses %{a}, not defined before it in scope")
            if op.name == "yield":
                if i != len(block.ops) - 1:
                    self.fail(op, "a yield that does not end its block")
                return list(op.args)
            self.arity(op)
            if op.name == "for":
                self.for_op(op, scope)
            else:
                self.types(op)
            for v in op.results:
                self.define(op, v, scope)
        return None

    def arity(self, op: Op) -> None:
        want = STRUCTURAL.get(op.name)
        if want is None:
            if len(op.results) != 1:
                self.fail(op, "an elementwise op has one result")
            return
        args, results = want
        if args is not None and len(op.args) != args:
            self.fail(op, f"takes {args} arguments, not {len(op.args)}")
        if results is not None and len(op.results) != results:
            self.fail(op, f"gives {results} results, not {len(op.results)}")

    def for_op(self, op: Op, scope: set) -> None:
        body = op.body
        if body is None or not body.ops or body.ops[-1].name != "yield":
            self.fail(op, "a for's body ends in a yield")
        if not len(op.args) == len(body.params) == len(op.results):
            self.fail(op, f"carries {len(op.args)} values into {len(body.params)} params "
                          f"and out as {len(op.results)} results")
        yielded = self.block(body, scope)
        if len(yielded) != len(op.results):
            self.fail(op, f"yields {len(yielded)} values for {len(op.results)} results")
        for p, y, r, init in zip(body.params, yielded, op.results, op.args):
            tp, ty, tr, ti = (self.k.type_of(v) for v in (p, y, r, init))
            if not (tp.dtype == ty.dtype == tr.dtype and set(tp.axes) == set(ty.axes)
                    == set(tr.axes)):
                self.fail(op, f"carried %{p} {tp.text()} gets %{y} {ty.text()}")
            if not set(ti.axes) <= set(tp.axes):
                self.fail(op, f"starts %{p} from %{init} over axes it does not have")

    def types(self, op: Op) -> None:
        k = self.k
        for v in op.results:
            t = k.type_of(v)
            if t.layout is not None and not isinstance(t.layout, Shared):
                extra = spread_axes(t.layout) - set(t.axes)
                if extra and not isinstance(t.layout, Mma):
                    self.fail(op, f"layout spreads {sorted(extra)}, not axes of {t.text()}")
        args = [k.type_of(a) for a in op.args]
        if op.name == "convert_layout":
            t = k.type_of(op.result)
            if (t.axes, t.dtype) != (args[0].axes, args[0].dtype):
                self.fail(op, "convert_layout changes more than the layout")
        if op.name == "reduce":
            self.reduce(op, args)
        if op.name == "store":
            buf = k.buffer(op.attr("buffer"))
            axis, into = op.attr("along") or (None, None)   # a topk's: axis stored at into
            extra = set(args[0].axes) - {axis if a == into else a for a in buf.axes}
            if extra:
                self.fail(op, f"stores a value over {sorted(extra)} into {buf.name}"
                              f"[{','.join(buf.axes)}]")
        if op.name == "load" and op.attr("view") is not None:
            if len(op.args) != len(op.attr("view")):
                self.fail(op, "a view load takes one index operand per axis of its view")
        elif op.name == "load" and len(op.args) != (op.attr("take") is not None):
            self.fail(op, "a load takes an index operand exactly when it is a take")
        if op.name == "dot":
            self.dot(op, args)

    def reduce(self, op: Op, args) -> None:
        """One value and one result, or a tuple state: argmax's (value, index) takes the
        value and an int32 index along the axis, and gives the value and the index."""
        results = [self.k.type_of(v) for v in op.results]
        for t in results:
            if op.attr("axis") in t.axes:
                self.fail(op, f"reduces over {op.attr('axis')} and keeps it")
        if not is_pair(op.attr("combine")):
            if len(op.args) != 1 or len(results) != 1:
                self.fail(op, f"a {op.attr('combine')} reduce takes one value and gives one")
            return
        if len(op.args) != 2 or len(results) != 2:
            self.fail(op, f"a {op.attr('combine')} reduce takes (value, index) and gives "
                          f"both, not {len(op.args)} arguments and {len(results)} results")
        if args[1].dtype != DType.INT32 or results[1].dtype != DType.INT32:
            self.fail(op, "the index of a pair reduce is int32")
        if results[0].dtype != args[0].dtype:
            self.fail(op, f"the value {args[0].text()} comes back as {results[0].text()}")

    def dot(self, op: Op, args) -> None:
        roles = []
        for t, want in zip(args[:2], ("a", "b")):
            lay = t.layout
            if isinstance(lay, Mma):
                if lay.role != want:
                    self.fail(op, f"operand {want} is an mma {lay.role} fragment")
                roles.append(lay)
            elif not isinstance(lay, (Shared, type(None), Blocked)):
                self.fail(op, f"operand {want} in {lay.text()}")
        out = self.k.type_of(op.result).layout
        if roles and not (isinstance(out, Mma) and out.role == "acc"):
            self.fail(op, "a tensor-core product gives an accumulator fragment")
