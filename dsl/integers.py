"""Integer ops: `//`, `%`, `<<`, `>>`, `&`, `|`, `^`, `~`, their reference and gradient rule.

On int32 and int64, with answers defined for every input, since a kernel cannot raise
(`&`, `|`, `^`, `~` on bools trace to logical_and, logical_or, `!=` and logical_not, the
ops a streamed kernel's mask analysis reads to skip tiles):

- `a // b` rounds toward minus infinity and `a % b` takes the divisor's sign, as in
  Python (-7 // 2 == -4, -7 % 2 == 1, 7 % -2 == -1), so a == (a // b) * b + a % b.
- A zero divisor gives 0 for both `a // 0` and `a % 0`, as numpy does (Python raises,
  torch raises on the CPU and gives an unspecified value on CUDA). The most negative
  value // -1 wraps to itself (its % is 0), as two's complement arithmetic does.
- `a << n` with n < 0 or n >= the width is 0; `a >> n` is arithmetic (the sign fills in)
  and with n < 0 or n >= the width is a >> (width - 1): 0 or -1. This is torch's rule
  for out-of-range counts (C and LLVM leave them undefined). Left shifts wrap.

None of them is differentiable: an integer value carries no gradient (autodiff sends
gradients through float nodes only), so their rule gives none, as comparisons do.
"""
from __future__ import annotations

import numpy as np

from .node import OpDef, register
from .tensor import Tensor, bitwise_not, integer_binary


def _floor_divide(a, b):
    with np.errstate(all="ignore"):
        return np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b))).astype(a.dtype)


def _remainder(a, b):
    with np.errstate(all="ignore"):
        return np.where(b == 0, 0, np.remainder(a, np.where(b == 0, 1, b))).astype(a.dtype)


def _bits(a) -> int:
    return np.dtype(a.dtype).itemsize * 8


def _left_shift(a, n):
    out = (n < 0) | (n >= _bits(a))
    return np.where(out, 0, np.left_shift(a, np.where(out, 0, n))).astype(a.dtype)


def _right_shift(a, n):
    top = _bits(a) - 1
    return np.right_shift(a, np.where((n < 0) | (n > top), top, n)).astype(a.dtype)


def _no_gradient(n, g, y, *inputs):
    return (None,) * len(inputs)


INTEGER_OPS = {
    "floor_divide": _floor_divide, "remainder": _remainder,
    "left_shift": _left_shift, "right_shift": _right_shift,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
}
for _name, _fn in INTEGER_OPS.items():
    register(OpDef(_name, "elementwise",
                   lambda n, ctx, a, b, _fn=_fn: _fn(np.asarray(a), np.asarray(b)), _no_gradient))
register(OpDef("bitwise_not", "elementwise", lambda n, ctx, a: np.invert(np.asarray(a)),
               _no_gradient))


def floor_divide(a, b) -> Tensor:
    """a // b, rounded toward minus infinity (see the module's docstring for b == 0)."""
    return integer_binary("floor_divide", a, b)


def remainder(a, b) -> Tensor:
    """a % b, with the sign of b (0 where b == 0)."""
    return integer_binary("remainder", a, b)


def left_shift(a, n) -> Tensor:
    """a << n (0 where n < 0 or n >= the width)."""
    return integer_binary("left_shift", a, n)


def right_shift(a, n) -> Tensor:
    """a >> n, arithmetic (n out of range shifts by the width - 1)."""
    return integer_binary("right_shift", a, n)


def bitwise_and(a, b) -> Tensor:
    return integer_binary("bitwise_and", a, b)


def bitwise_or(a, b) -> Tensor:
    return integer_binary("bitwise_or", a, b)


def bitwise_xor(a, b) -> Tensor:
    return integer_binary("bitwise_xor", a, b)


__all__ = ["floor_divide", "remainder", "left_shift", "right_shift", "bitwise_and",
           "bitwise_or", "bitwise_xor", "bitwise_not", "INTEGER_OPS"]
