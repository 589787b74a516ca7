"""Cumulative scans along a named axis: cumsum, cumprod, cummax, cummin.

    cumsum(x, over="N")            x[M, N]  ->  [M, N]: y[m, n] = x[m, 0] + ... + x[m, n]
    cumprod / cummax / cummin      likewise with *, max, min (inclusive, as torch's)
    cumsum(x, over="N", reverse=True)       y[m, n] = x[m, n] + ... + x[m, N-1]

A scan's result has its operand's axes. Semantics are torch's (torch.cumsum, cumprod,
cummax(...).values, cummin(...).values), with one deliberate difference in dtypes:

- floats keep their dtype (fp32, bf16, fp16 accumulate in fp32 registers and round once
  on the store), as in torch;
- int32 stays int32 and bool becomes int32 for cumsum and cumprod: torch gives int64,
  plait keeps its index width (every axis extent is int32; a running count of bools fits)
  and halves the registers and shared memory of the scan. Integer scans wrap at 32 bits
  as the kernels' adds and multiplies do; cast to int64 first where that matters;
- cummax and cummin of bool are the running or / and and stay bool, as in torch.

NaN: once a NaN is met it stays (cumsum and cumprod by arithmetic, cummax and cummin
because a NaN beats every number, as torch's do).

Each scan is one op of kind "scan" in the op table, with its `combine` (the elementwise
fold of two partials, shared with the reductions: add, mul, maximum, minimum) and its
`identity` (what an element outside the tensor contributes). Gradients (dsl/scan_grad.py):
cumsum's is a reverse cumsum; cumprod's handles zeros as torch's does; cummax/cummin send
each output's gradient to the position holding its running extreme (on ties the latest
such position, as torch's cummax indices; a NaN holds it from where it appears).
"""
from __future__ import annotations

import numpy as np

from .dtypes import DType
from .errors import PlaitError, user_location
from .node import OpDef, register
from .tensor import Tensor, along_one_axis, cast, new_node

# scan op -> (combine of two partials, identity, float64 reference accumulate)
SCANS = {
    "cumsum": ("add", "zero", np.add),
    "cumprod": ("mul", "one", np.multiply),
    "cummax": ("maximum", "lowest", np.maximum),
    "cummin": ("minimum", "highest", np.minimum),
}


def is_scan(op: str) -> bool:
    """Whether `op` is a scan (its result keeps the scanned axis): every level asks this.
    `scan` is the generic one, a part of a tuple state (dsl/scan_generic.py)."""
    return op in SCANS or op == "scan"


def _scan_eval(ufunc):
    def evaluate(n, ctx, a):
        axis = n.axes.index(n.attr("axis"))
        a = np.broadcast_to(np.asarray(a), tuple(ctx.sizes[x] for x in n.axes))
        if n.attr("reverse"):
            a = np.flip(a, axis)
        if a.dtype.kind in "iu":   # integers wrap at their width, as the kernels' ops do
            out = ufunc.accumulate(a, axis=axis, dtype=a.dtype)
        else:                      # float64 (NaN propagates through maximum/minimum)
            out = ufunc.accumulate(a, axis=axis)
        return np.flip(out, axis) if n.attr("reverse") else out
    return evaluate


def _register() -> None:
    from . import scan_grad       # the rules build with the DSL: imported once, here
    for name, (combine, identity, ufunc) in SCANS.items():
        register(OpDef(name, "scan", _scan_eval(ufunc), scan_grad.VJP[name], combine,
                       identity))


_register()


def _operand(x, what: str, over, reverse) -> Tensor:
    x = along_one_axis(x, what, over, "a scan runs along one axis")
    if not isinstance(reverse, bool):
        raise PlaitError(f"{what}(..., reverse=...) takes True or False, not {reverse!r}",
                         user_location())
    return x


def scan_node(op: str, x: Tensor, over: str, reverse: bool = False) -> Tensor:
    """The scan node itself (the operand already of the scan's dtype)."""
    return new_node(op, (x,), x.axes, x.dtype, axis=over,
                    **({"reverse": True} if reverse else {}))


def cumsum(x, over=None, reverse: bool = False) -> Tensor:
    """Running sum along `over` (inclusive); bool counts as int32."""
    x = _operand(x, "cumsum", over, reverse)
    if x.dtype == DType.BOOL:
        x = cast(x, DType.INT32)
    return scan_node("cumsum", x, over, reverse)


def cumprod(x, over=None, reverse: bool = False) -> Tensor:
    """Running product along `over` (inclusive); bool counts as int32."""
    x = _operand(x, "cumprod", over, reverse)
    if x.dtype == DType.BOOL:
        x = cast(x, DType.INT32)
    return scan_node("cumprod", x, over, reverse)


def cummax(x, over=None, reverse: bool = False) -> Tensor:
    """Running maximum along `over` (torch.cummax(x, dim).values); NaN, once met, stays."""
    return scan_node("cummax", _operand(x, "cummax", over, reverse), over, reverse)


def cummin(x, over=None, reverse: bool = False) -> Tensor:
    """Running minimum along `over` (torch.cummin(x, dim).values); NaN, once met, stays."""
    return scan_node("cummin", _operand(x, "cummin", over, reverse), over, reverse)
