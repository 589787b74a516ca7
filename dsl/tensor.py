"""The traced tensor: what an algorithm's arguments are while it is traced.

`Tensor["M", "N"]` in an annotation declares named axes; inside the traced
function each argument is a `Tensor` wrapping a graph Node, and arithmetic on
it builds more nodes. Broadcasting is by axis name: the result carries the
union of the operands' axes in the algorithm's canonical axis order.
"""
from __future__ import annotations

from .dtypes import (NAMES, DType, dtype_of, is_dtype_name, looks_like_dtype, promote,
                     promote_weak, scalar_dtype)
from .errors import PlaitError, user_location
from .node import OPS, Node, make_attrs
from .trace_axes import axis_order, canonical_axes, current_axis_order, declare_axes  # noqa: F401


class TensorSpec:
    """The annotation `Tensor["M", "N"]` (optionally with a dtype: `Tensor["M", "N", "bf16"]`)."""

    def __init__(self, axes: tuple[str, ...], dtype: DType | None = None):
        self.axes = axes
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Tensor[{', '.join(repr(a) for a in self.axes)}]"


class Tensor:
    """A traced value. Use it like an array; it records the operations applied."""

    __slots__ = ("node",)
    __array_priority__ = 1000

    def __init__(self, node: Node):
        self.node = node

    def __class_getitem__(cls, item) -> TensorSpec:
        items = item if isinstance(item, tuple) else (item,)
        dtype = None
        if items and isinstance(items[-1], (DType,)) or (
                items and isinstance(items[-1], str) and is_dtype_name(items[-1])):
            dtype, items = dtype_of(items[-1]), items[:-1]
        for a in items:
            if not isinstance(a, str) or not a.isidentifier():
                raise PlaitError(f"axis names must be identifiers, got {a!r}", user_location())
            if is_dtype_name(a):
                raise PlaitError(f"dtype {a!r} must come last in Tensor[...]", user_location())
            if looks_like_dtype(a):  # a typo'd dtype would silently become an extra axis
                raise PlaitError(f"axis name {a!r} looks like a dtype, but plait has no dtype "
                                 f"{a!r}; the dtypes are {', '.join(NAMES)} (last in "
                                 "Tensor[...]); rename the axis if it is one", user_location())
        if len(set(items)) != len(items):
            raise PlaitError(f"repeated axis in Tensor{list(items)}", user_location())
        return TensorSpec(tuple(items), dtype)

    # ---- introspection
    @property
    def axes(self) -> tuple[str, ...]:
        return self.node.axes

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    def __repr__(self) -> str:
        return f"Tensor({self.dtype}[{', '.join(self.axes)}])"

    def __bool__(self):
        raise PlaitError("a traced tensor has no truth value (bool(x), `if x:`, `while x:`, "
                         "`and`/`or`): Python control flow on tensor values is not traceable; "
                         "use plait.dsl.where(cond, a, b) or logical_and/logical_or",
                         user_location())

    def __iter__(self):
        raise PlaitError("a traced tensor cannot be iterated: axes are named; "
                         "reduce with sum(x, over=AXIS) or max(x, over=AXIS), or x.slice(...)",
                         user_location())

    # Python and numpy conversions would escape the trace; each names what to write.
    def __getitem__(self, item):
        raise PlaitError(f"a traced tensor cannot be indexed (x[{item!r}]): axes are named; "
                         "write x.slice(T=(start, stop), into=\"S\") for a range, take(...) "
                         "to gather, or reduce over=AXIS", user_location())

    def __float__(self):
        raise PlaitError("a traced tensor has no Python float value (float(x), math.exp(x), "
                         "...): use plait.dsl's functions, e.g. plait.dsl.exp(x), "
                         "plait.dsl.sqrt(x), and plait.dsl.cast(x, 'fp32') to convert",
                         user_location())

    def __int__(self):
        raise PlaitError("a traced tensor has no Python int value (int(x)): use "
                         "plait.dsl.cast(x, 'int32')", user_location())

    __index__ = __int__

    def __complex__(self):
        raise PlaitError("a traced tensor has no Python complex value", user_location())

    def __array__(self, *args, **kwargs):
        raise PlaitError("a traced tensor is not a numpy array (np.asarray(x), np.exp(x), "
                         "...): use plait.dsl's functions, e.g. plait.dsl.exp(x), "
                         "plait.dsl.sum(x, over=AXIS)", user_location())

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from . import ops
        name = getattr(ufunc, "__name__", str(ufunc))
        if any(not isinstance(i, Tensor) for i in inputs):  # e.g. np.float32(2) * x
            hint = ("numpy arrays and numpy scalars do not mix with traced tensors; pass "
                    "arrays as arguments, and numbers as Python floats (float(v))")
        elif hasattr(ops, name):
            hint = f"use plait.dsl's functions: plait.dsl.{name}(x)"
        else:
            hint = "use plait.dsl's functions (exp, log, sqrt, tanh, maximum, where, ...)"
        raise PlaitError(f"numpy's np.{name} cannot run on a traced tensor: {hint}",
                         user_location())

    def __array_function__(self, func, types, args, kwargs):
        name = getattr(func, "__name__", str(func))
        raise PlaitError(f"numpy's np.{name} cannot run on a traced tensor: use plait.dsl's "
                         "functions (sum(x, over=AXIS), where, maximum, ...)", user_location())

    def __len__(self):
        raise PlaitError("len() of a traced tensor is unknown at trace time; use size(axis)",
                         user_location())

    # ---- arithmetic
    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return integer_binary("floor_divide", self, o)
    def __rfloordiv__(self, o): return integer_binary("floor_divide", o, self)
    def __mod__(self, o): return integer_binary("remainder", self, o)
    def __rmod__(self, o): return integer_binary("remainder", o, self)
    def __lshift__(self, o): return integer_binary("left_shift", self, o)
    def __rlshift__(self, o): return integer_binary("left_shift", o, self)
    def __rshift__(self, o): return integer_binary("right_shift", self, o)
    def __rrshift__(self, o): return integer_binary("right_shift", o, self)
    def __and__(self, o): return integer_binary("bitwise_and", self, o)
    def __rand__(self, o): return integer_binary("bitwise_and", o, self)
    def __or__(self, o): return integer_binary("bitwise_or", self, o)
    def __ror__(self, o): return integer_binary("bitwise_or", o, self)
    def __xor__(self, o): return integer_binary("bitwise_xor", self, o)
    def __rxor__(self, o): return integer_binary("bitwise_xor", o, self)
    def __invert__(self): return bitwise_not(self)
    def __neg__(self): return unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return unary("abs", self)
    def __lt__(self, o): return compare("lt", self, o)
    def __le__(self, o): return compare("le", self, o)
    def __gt__(self, o): return compare("gt", self, o)
    def __ge__(self, o): return compare("ge", self, o)
    def __eq__(self, o): return compare("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return compare("ne", self, o)  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]

    def __pow__(self, exponent):
        from . import library
        return library.power(self, exponent)

    def slice(self, into=None, **ranges):
        """x.slice(T=(start, stop), into="S"): see plait.dsl.slice."""
        from . import reshape
        return reshape.slice(self, into, **ranges)

    def pad(self, into=None, value=0.0, **ranges):
        """x.pad(T=(before, after), into="P", value=0.0): see plait.dsl.pad."""
        from . import reshape
        return reshape.pad(self, into, value, **ranges)

    def __matmul__(self, other):
        raise PlaitError("`@` needs a contraction axis; write sum(a * b, over=AXIS)",
                         user_location())


def new_node(op: str, inputs, axes, dtype: DType, **attrs) -> Tensor:
    if op not in OPS:
        raise PlaitError(f"unsupported operation {op!r}", user_location())
    return Tensor(Node(op, tuple(i.node for i in inputs), tuple(axes), dtype,
                       make_attrs(**attrs), user_location()))


def constant(value, dtype: DType) -> Tensor:
    if dtype.is_float:
        value = float(value)
    elif dtype == DType.BOOL:
        value = bool(value)
    else:
        value = int(value)
        low, high = -2 ** (dtype.bits - 1), 2 ** (dtype.bits - 1)
        if not low <= value < high:    # wrapping it would be a silent wrong answer
            raise PlaitError(f"the integer {value} does not fit in {dtype} (it takes "
                             f"{low} to {high - 1}); cast the tensor to int64 first",
                             user_location())
    return new_node("const", (), (), dtype, value=value)


def _as_tensor(x, other_dtype: DType | None, what: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float)):
        dtype = promote_weak(other_dtype or DType.FP32, x)
        return constant(x, dtype)
    raise PlaitError(f"{what}: expected a plait tensor or a Python number, got "
                     f"{type(x).__name__}", user_location())


def _is_weak(x) -> bool:
    """Scalar parameters are Python numbers at call time, so they promote weakly."""
    return isinstance(x, Tensor) and x.node.op == "param" and not x.axes


def _operand_dtype(a, b) -> DType:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if _is_weak(a) != _is_weak(b):
            t, s = (b, a) if _is_weak(a) else (a, b)
            return promote_weak(t.dtype, 0.0 if s.dtype.is_float else 0)
        return promote(a.dtype, b.dtype)
    t, s = (a, b) if isinstance(a, Tensor) else (b, a)
    return promote_weak(t.dtype, s)


def _coerce(x, dtype: DType, what: str) -> Tensor:
    x = _as_tensor(x, dtype, what)
    # A weak float parameter stays an fp32 register beside a narrow float tensor; an
    # integer one is widened (an int64 op takes two int64 registers).
    keep = _is_weak(x) and (x.dtype == dtype or x.dtype.is_float and dtype.is_float)
    return x if keep else cast(x, dtype)


def binary(op: str, a, b) -> Tensor:
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise PlaitError(f"{op} needs at least one tensor", user_location())
    dtype = _operand_dtype(a, b)
    if op == "div" and not dtype.is_float:
        dtype = DType.FP32            # `/` is true division, as in Python and torch
    a = _coerce(a, dtype, op)
    b = _coerce(b, dtype, op)
    if dtype == DType.BOOL and op not in ("logical_and", "logical_or", "maximum", "minimum"):
        raise PlaitError(f"{op} is not defined on bool tensors; cast first", user_location())
    return new_node(op, (a, b), canonical_axes(a.axes + b.axes), dtype)


_SPELLING = {"floor_divide": "//", "remainder": "%", "left_shift": "<<",
             "right_shift": ">>", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_ON_BOOLS = {"bitwise_and": "logical_and", "bitwise_or": "logical_or", "bitwise_xor": "ne"}


def integer_binary(op: str, a, b) -> Tensor:
    """`//`, `%`, `<<`, `>>`, `&`, `|`, `^`: integer ops (dsl/integers.py has their
    meaning). On two bools `&`, `|`, `^` are logical_and, logical_or and `!=`; floats are
    refused, since fp32 floor division would round differently from the float64
    reference near integers."""
    sym = _SPELLING[op]
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise PlaitError(f"{sym} needs at least one tensor", user_location())
    dtype = _operand_dtype(a, b)
    if dtype.is_float:
        kinds = " and ".join(str(x.dtype) if isinstance(x, Tensor) else type(x).__name__
                             for x in (a, b))
        raise PlaitError(f"`{sym}` ({op}) is an integer op: its operands are {kinds}; "
                         "cast them first, e.g. cast(x, 'int32'), or use / for floats",
                         user_location())
    if dtype == DType.BOOL and op not in _ON_BOOLS:
        raise PlaitError(f"`{sym}` ({op}) is not defined on two bools; cast one to "
                         "int32 first", user_location())
    a = _coerce(a, dtype, op)
    b = _coerce(b, dtype, op)
    if dtype == DType.BOOL:         # the logical ops, which mask analysis reads for skipping
        return compare("ne", a, b) if op == "bitwise_xor" else binary(_ON_BOOLS[op], a, b)
    return new_node(op, (a, b), canonical_axes(a.axes + b.axes), dtype)


def bitwise_not(x) -> Tensor:
    """`~x`: every bit flipped on int32/int64 (~x == -x - 1), logical not on bool."""
    if isinstance(x, bool) or not isinstance(x, (Tensor, int)):
        raise PlaitError(f"~ needs an integer or bool tensor, not {type(x).__name__}",
                         user_location())
    x = _as_tensor(x, DType.INT32, "~")
    if x.dtype.is_float:
        raise PlaitError(f"`~` (bitwise_not) is an integer op, not defined on {x.dtype}; "
                         "cast first, e.g. cast(x, 'int32')", user_location())
    if x.dtype == DType.BOOL:
        return unary("logical_not", x)
    return new_node("bitwise_not", (x,), x.axes, x.dtype)


def compare(op: str, a, b) -> Tensor:
    dtype = _operand_dtype(a, b)
    a = _coerce(a, dtype, op)
    b = _coerce(b, dtype, op)
    return new_node(op, (a, b), canonical_axes(a.axes + b.axes), DType.BOOL)


def unary(op: str, x) -> Tensor:
    x = _as_tensor(x, None, op)
    if op not in ("neg", "abs", "logical_not") and not x.dtype.is_float:
        x = cast(x, DType.FP32)
    return new_node(op, (x,), x.axes, x.dtype)


def cast(x, dtype) -> Tensor:
    """x converted to dtype (rounding to nearest even; fp8 saturates)."""
    dtype = dtype_of(dtype)
    x = _as_tensor(x, dtype, "cast")
    if x.dtype == dtype:
        return x
    if x.node.op == "const" and not x.node.inputs:
        return constant(x.node.attr("value"), dtype)
    return new_node("cast", (x,), x.axes, dtype)


def where(cond, a, b) -> Tensor:
    """Elementwise choice: a where cond is true, else b."""
    if not isinstance(cond, Tensor) or cond.dtype != DType.BOOL:
        raise PlaitError("where(cond, a, b) needs a bool tensor cond (a comparison)",
                         user_location())
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        dtype = _operand_dtype(a, b)
    else:                              # where(c, 1, 0) is int32, where(c, 1.0, 0) fp32
        dtype = scalar_dtype(a, b)
    a = _coerce(a, dtype, "where")
    b = _coerce(b, dtype, "where")
    return new_node("where", (cond, a, b), canonical_axes(cond.axes + a.axes + b.axes), dtype)


def _over(x: Tensor, over, what: str) -> tuple[str, ...]:
    if over is None:
        raise PlaitError(f"{what} needs over=AXIS (axes are named, never positional)",
                         user_location())
    axes = (over,) if isinstance(over, str) else tuple(over)
    for a in axes:
        if a not in x.axes:
            raise PlaitError(f"{what} over {a!r}: the tensor's axes are "
                             f"[{', '.join(x.axes)}]", user_location())
    return axes


def along_one_axis(x, what: str, over, why: str) -> Tensor:
    """x, checked for an op that runs along one axis (a scan, an index, a sort): a plait
    tensor, `over` one axis name it has; `why` says why one axis (in the error)."""
    if not isinstance(x, Tensor):
        raise PlaitError(f"{what}(x, ...): x must be a plait tensor, not {type(x).__name__}",
                         user_location())
    if not isinstance(over, str):
        raise PlaitError(f"{what} needs over=AXIS, one axis name ({why}), not {over!r}",
                         user_location())
    _over(x, over, what)
    return x


def reduce(op: str, x, over) -> Tensor:
    x = _as_tensor(x, None, op)
    axes = _over(x, over, op)
    if op == "sum" and x.dtype == DType.BOOL:
        x = cast(x, DType.INT32)     # a sum of bools counts them (bool promotes to int32)
    for axis in axes:
        x = new_node(op, (x,), tuple(a for a in x.axes if a != axis), x.dtype, axis=axis)
    return x


def broadcast(x: Tensor, axes) -> Tensor:
    """x repeated along the axes it lacks (a no-op for lowering; explicit for autodiff)."""
    target = canonical_axes(tuple(axes) + x.axes)
    if target == x.axes:
        return x
    return new_node("broadcast", (x,), target, x.dtype)


def index(axis: str) -> Tensor:
    """The position along a named axis: an int32 tensor over that axis, 0, 1, ... (masks
    as math: causal attention is `where(index("T") <= index("S"), s, -inf)`)."""
    canonical_axes((axis,))
    return new_node("iota", (), (axis,), DType.INT32, axis=axis)


def size(axis: str, dtype=DType.INT32) -> Tensor:
    """The extent of a named axis as a scalar known at run time (int32 unless asked)."""
    canonical_axes((axis,))
    return new_node("size", (), (), dtype_of(dtype), axis=axis)
