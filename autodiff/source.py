"""Print any algorithm graph as plait DSL source, and read such source back.

    print(to_source(grad(layernorm)))
    @algorithm(name="layernorm.bwd")
    def layernorm_bwd(x: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"],
                      eps: float = 1e-05, dout: Tensor["M", "N"] = None):
        t0 = sum(x, over="N")
        ...
        return {"dx": t9, "dw": t11, "db": sum(dout, over="M")}

The source, run after `from plait.dsl import *`, traces to the same graph:
every node is spelled with the DSL call that makes it (one entry per op in
`_SPELL`), single-use elementwise values are inlined, and constants are
written as Python literals only where weak promotion gives back their dtype.
Arguments keep their order; those after the first default get `= None`
(plait reads None as "no default"), since Python wants defaults last.
"""
from __future__ import annotations

import itertools
import keyword
import linecache
import math

from plait.dsl.algorithm import Algorithm
from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.graph import AlgorithmGraph
from plait.dsl.node import OPS, Node
from plait.dsl.cumulative import is_scan
from plait.dsl.reshape import RESHAPES
from plait.dsl.reshape import spelling as reshape_spelling

_INFIX = {"add": ("+", 10), "sub": ("-", 10), "mul": ("*", 11), "div": ("/", 11),
          "lt": ("<", 5), "le": ("<=", 5), "gt": (">", 5), "ge": (">=", 5),
          "eq": ("==", 5), "ne": ("!=", 5), "floor_divide": ("//", 11), "remainder": ("%", 11),
          "left_shift": ("<<", 9), "right_shift": (">>", 9), "bitwise_and": ("&", 8),
          "bitwise_xor": ("^", 7), "bitwise_or": ("|", 6)}
_CALL = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "sin",
         "cos", "logical_not", "stop_gradient", "maximum", "minimum", "logical_and",
         "logical_or", "where", "philox"}
_ATOM, _UNARY = 100, 12
_MAX_INLINE = 72  # longer single-use expressions get a line of their own


def _literal(value) -> str:
    # Only numbers: the repr of any other object could be arbitrary code.
    if not isinstance(value, (bool, int, float)):
        raise PlaitError(f"to_source: cannot write {type(value).__name__} value {value!r} "
                         "as a literal; plait constants are numbers")
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    return repr(value)


def _q(text) -> str:
    """A Python string literal for text, double-quoted where that needs no escape."""
    text = str(text)
    return repr(text) if '"' in text else '"' + repr(text)[1:-1] + '"'


def _identifier(text: str, what: str) -> str:
    """Names written as Python identifiers are checked, never pasted as given."""
    if not isinstance(text, str) or not text.isidentifier() or keyword.iskeyword(text):
        raise PlaitError(f"to_source: {what} {text!r} is not a Python identifier")
    return text


def _quote_axes(axes) -> str:
    return ", ".join(_q(a) for a in axes)


class _Printer:
    def __init__(self, graph: AlgorithmGraph):
        self.graph = graph
        self.uses: dict[int, int] = {n.uid: 0 for n in graph.nodes}
        for n in graph.nodes:
            for i in n.inputs:
                self.uses[i.uid] += 1
        for n in graph.outputs.values():
            self.uses[n.uid] += 2  # an output always gets a name
        self.expr: dict[int, tuple[str, int]] = {}
        self.lines: list[str] = []
        self.taken = {p.name for p in graph.params} | set(keyword.kwlist)
        self.fresh = (f"t{i}" for i in itertools.count())

    # -- operands
    def operand(self, node: Node, user: Node) -> tuple[str, int]:
        if node.op == "const" and self._weak_ok(node, user):
            text = _literal(node.attr("value"))
            return text, (_UNARY if text.startswith("-") else _ATOM)
        return self.expr[node.uid]

    def _weak_ok(self, c: Node, user: Node) -> bool:
        """May constant c be a bare Python literal in user (weak promotion gives its dtype)?"""
        if user.op not in _INFIX and user.op not in ("maximum", "minimum", "where"):
            return False
        values = user.inputs[1:] if user.op == "where" else user.inputs
        if user.op in _INFIX and _INFIX[user.op][1] == 5 and c is user.inputs[0]:
            return False  # `0.0 < x` would trace as x > 0.0
        others = [v for v in values if v is not c]
        return any(v.op != "const" and v.dtype == c.dtype for v in others)

    @staticmethod
    def wrap(arg: tuple[str, int], need: int) -> str:
        return arg[0] if arg[1] >= need else f"({arg[0]})"

    # -- nodes
    def spell(self, n: Node) -> tuple[str, int]:
        ops = [self.operand(i, n) for i in n.inputs]
        if n.op in ("input", "param"):
            return _identifier(n.attr("name"), "argument name"), _ATOM
        if n.op == "const":
            return f'cast({_literal(n.attr("value"))}, {_q(n.dtype)})', _ATOM
        if n.op == "size":
            dt = "" if n.dtype == DType.INT32 else f", {_q(n.dtype)}"
            return f'size({_q(n.attr("axis"))}{dt})', _ATOM
        if n.op == "iota":
            return f'index({_q(n.attr("axis"))})', _ATOM
        if n.op in _INFIX:
            sym, prec = _INFIX[n.op]
            # Python groups a - b - c as (a - b) - c: a right operand of equal
            # precedence needs brackets; comparisons would chain, so both do.
            left = self.wrap(ops[0], prec + 1 if prec == 5 else prec)
            return f"{left} {sym} {self.wrap(ops[1], prec + 1)}", prec
        if n.op in ("neg", "bitwise_not"):
            sign = "-" if n.op == "neg" else "~"
            return f"{sign}{self.wrap(ops[0], _UNARY + 1)}", _UNARY
        if n.op in _CALL:
            return f"{n.op}({', '.join(o[0] for o in ops)})", _ATOM
        if n.op == "cast":
            return f'cast({ops[0][0]}, {_q(n.dtype)})', _ATOM
        if _is_reduction(n):
            return f'{n.op}({ops[0][0]}, over={_q(n.attr("axis"))})', _ATOM
        if is_scan(n.op):
            rev = ", reverse=True" if n.attr("reverse") else ""
            return f'{n.op}({ops[0][0]}, over={_q(n.attr("axis"))}{rev})', _ATOM
        if n.op == "sort":      # one part of the pair; a second call traces the same node
            down = ", descending=True" if n.attr("descending") else ""
            part = ", return_indices=True)[1]" if n.attr("part") == 1 else ")"
            return f'sort({ops[0][0]}, over={_q(n.attr("axis"))}{down}{part}', _ATOM
        if n.op == "topk":      # one part of the pair; a second call traces the same node
            low = "" if n.attr("descending") else ", largest=False"
            return (f'topk({ops[0][0]}, {n.attr("k")}, over={_q(n.attr("axis"))}, '
                    f'into={_q(n.attr("into"))}{low})[{n.attr("part")}]'), _ATOM
        if n.op == "broadcast":
            return f"broadcast({ops[0][0]}, ({_quote_axes(n.axes)},))", _ATOM
        if n.op == "name":
            return f'name({ops[0][0]}, {_q(n.attr("name"))})', _ATOM
        if n.op == "permute":
            return f'permute({ops[0][0]}, {_quote_axes(n.axes)})', _ATOM
        if n.op == "rotate_half":
            pairs = ", interleaved=True" if n.attr("interleaved") else ""
            return f'rotate_half({ops[0][0]}, over={_q(n.attr("axis"))}{pairs})', _ATOM
        if n.op == "blocked":
            pairs = ", ".join(f"{_q(c)}: {_q(f)}" for c, f in n.attr("blocks"))
            return f'blocked({ops[0][0]}, {{{pairs}}}, {n.attr("size")})', _ATOM
        if n.op in RESHAPES:
            return reshape_spelling(n, ops[0][0]), _ATOM
        if n.op == "take":
            return f'take({ops[0][0]}, {ops[1][0]}, axis={_q(n.attr("axis"))})', _ATOM
        if n.op == "scatter_add":
            batch = f", batch=({_quote_axes(n.attr('batch'))},)" if n.attr("batch") else ""
            return (f'scatter_add({ops[0][0]}, {ops[1][0]}, axis={_q(n.attr("axis"))}'
                    f'{batch})'), _ATOM
        raise PlaitError(f"to_source: no DSL spelling for op {n.op!r}", n.loc)

    def variable(self, n: Node) -> str:
        hint = n.attr("name") if n.op == "name" else None
        if hint and isinstance(hint, str) and hint.isidentifier() and hint not in self.taken:
            name = hint
        else:
            name = next(v for v in self.fresh if v not in self.taken)
        self.taken.add(name)
        return name

    def body(self) -> list[str]:
        for n in self.graph.nodes:
            text, prec = self.spell(n)
            inline = (n.op in ("input", "param") or n.op == "const" or
                      (self.uses[n.uid] == 1 and not _is_reduction(n) and
                       len(text) <= _MAX_INLINE))
            if inline:
                self.expr[n.uid] = (text, prec)
            else:
                var = self.variable(n)
                self.lines.append(f"{var} = {text}")
                self.expr[n.uid] = (var, _ATOM)
        outs = ", ".join(f'{_q(k)}: {self.expr[v.uid][0]}' for k, v in self.graph.outputs.items())
        return self.lines + [f"return {{{outs}}}"]


def _signature(graph: AlgorithmGraph, declared: dict) -> list[str]:
    dtypes = graph.input_dtypes()
    args, defaulted = [], False
    for p in graph.params:
        _identifier(p.name, "argument name")
        if p.is_tensor:
            dt = dtypes.get(p.name, p.dtype or DType.FP32)
            pin = declared.get(p.name) is not None or dt != DType.FP32
            inside = p.axes + ((str(dt),) if pin else ())
            ann = f'Tensor[{_quote_axes(inside)}]' if inside else "Tensor[()]"
        else:
            ann = "float" if p.dtype is None or p.dtype.is_float else "int"
        if p.default is not None:
            defaulted = True
            args.append(f"{p.name}: {ann} = {_literal(p.default)}")
        else:
            args.append(f"{p.name}: {ann}" + (" = None" if defaulted else ""))
    return args


def to_source(obj, dtypes: dict | None = None) -> str:
    """plait DSL source for an algorithm (traced for `dtypes`) or an algorithm graph."""
    if isinstance(obj, Algorithm):
        graph = obj.graph(dtypes)
        declared = {p.name: p.dtype for p in obj.params if p.is_tensor}
    elif isinstance(obj, AlgorithmGraph):
        graph, declared = obj, {}
    else:
        raise PlaitError(f"to_source needs an algorithm or an algorithm graph, "
                         f"not {type(obj).__name__}")
    fname = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in graph.name)
    if not fname.isidentifier() or keyword.iskeyword(fname):
        fname = f"algorithm_{fname}"
    keys = [] if fname == graph.name else [f"name={_q(graph.name)}"]
    signature_axes = {a for p in graph.params for a in p.axes or ()}
    if any(a not in signature_axes for a in graph.axis_order):   # made by split_axis, ...
        keys.append(f"axes=({_quote_axes(graph.axis_order)},)")
    deco = f"@algorithm({', '.join(keys)})" if keys else "@algorithm"
    head = f"def {fname}("
    args = _signature(graph, declared)
    sig = head + ", ".join(args) + "):"
    if len(sig) > 96:  # one argument a line, aligned under the first
        sig = head + (",\n" + " " * len(head)).join(args) + "):"
    body = ["    " + line for line in _Printer(graph).body()]
    return "\n".join([deco, sig, *body]) + "\n"


_counter = itertools.count()


def from_source(source: str) -> Algorithm:
    """Run DSL source (as to_source writes it) and return the algorithm it defines."""
    filename = f"<plait-source-{next(_counter)}>"
    # Registered with linecache so that errors quote the generated line.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {}
    exec("from plait.dsl import *", namespace)
    before = {k for k, v in namespace.items() if isinstance(v, Algorithm)}
    exec(compile(source, filename, "exec"), namespace)
    found = [v for k, v in namespace.items() if isinstance(v, Algorithm) and k not in before]
    if len(found) != 1:
        raise PlaitError(f"from_source: expected one @algorithm in the source, found "
                         f"{len(found)}")
    return found[0]


def _is_reduction(n: Node) -> bool:
    """A reduction of the op table (spelled `kind(x, over=...)`, never inlined)."""
    return n.op in OPS and OPS[n.op].kind == "reduce"
