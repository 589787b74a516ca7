"""Selection along an axis: argmax, argmin and max_with_index / min_with_index.

    argmax(x, over="V")            x[M, V]  ->  int32[M]: the first position of the maximum
    max_with_index(x, over="V")    x[M, V]  ->  (max(x, over="V"), argmax(x, over="V"))

The index is int32: axis extents are int32 in every kernel (kernels take sizes as int32
arguments), so no index needs more, and an int32 state halves the registers, shuffles and
shared memory of the reduction against torch's int64 (cast it where int64 is wanted).

Semantics, those of torch.argmax / torch.argmin (and numpy's): on ties the first index
wins; NaN counts as the extreme for both (the first NaN of a row is its argmax and its
argmin, as torch and max/min's NaN propagation give); a row of -inf has argmax 0. A bool
tensor is selected as int32 (its first True); an int tensor as it is.

Each is ONE reduction whose state is the pair (value, index), folded by the combine
`arg_combine` (lowering/cpu/mathfns.py): the greater value wins (NaN above all), equal
values keep the smaller index. Its identity is the value's ('lowest' for argmax) with
index INT32_MAX, so an element outside the tensor loses every tie. `max_with_index`
gives max and argmax of the same x: both read x once, and in a kernel they share one
round of shuffles and one shared-memory exchange (`lowering/ir/simt_order.cluster_reductions`).

argmax is piecewise constant: no gradient flows through it (as through comparisons),
and the value of max_with_index is max, with max's gradient rule.
"""
from __future__ import annotations

import numpy as np

from .dtypes import DType
from .errors import PlaitError
from .node import OpDef, register
from .tensor import Tensor, _over, along_one_axis, cast, new_node, reduce


def _select_eval(fn):
    def evaluate(n, ctx, a):
        axis = n.inputs[0].axes.index(n.attr("axis"))
        if np.shape(a)[axis] == 0:
            raise PlaitError(f"{n.op}(..., over={n.attr('axis')!r}): the axis is empty, so "
                             "there is no position to return (torch refuses it too)", n.loc)
        # numpy's argmax/argmin take the first NaN, as torch's do, and the first tie
        return np.asarray(fn(np.asarray(a), axis=axis), np.int32)
    return evaluate


register(OpDef("argmax", "reduce", _select_eval(np.argmax), lambda n, g, y, x: (None,),
               "argmax", "lowest"))
register(OpDef("argmin", "reduce", _select_eval(np.argmin), lambda n, g, y, x: (None,),
               "argmin", "highest"))

ARG_REDUCTIONS = ("argmax", "argmin")


def is_pair(op: str) -> bool:
    """Whether reduction `op` carries a (value, index) state: every level asks this."""
    return op in ARG_REDUCTIONS


def _operand(x, what: str, over) -> Tensor:
    x = along_one_axis(x, what, over, "the index is a position along one axis")
    if x.dtype == DType.BOOL:
        x = cast(x, DType.INT32)        # the first True; bool promotes to int32
    return x


def _select(op: str, x: Tensor, over: str) -> Tensor:
    _over(x, over, op)
    return new_node(op, (x,), tuple(a for a in x.axes if a != over), DType.INT32, axis=over)


def argmax(x, over=None) -> Tensor:
    """The int32 position of the first maximum of x along `over` (NaN counts as the
    maximum, as in torch.argmax)."""
    return _select("argmax", _operand(x, "argmax", over), over)


def argmin(x, over=None) -> Tensor:
    """The int32 position of the first minimum of x along `over` (NaN counts as the
    minimum, as in torch.argmin)."""
    return _select("argmin", _operand(x, "argmin", over), over)


def max_with_index(x, over=None) -> tuple[Tensor, Tensor]:
    """(max(x, over), argmax(x, over)), as torch.max(x, dim) gives them."""
    x = _operand(x, "max_with_index", over)
    return reduce("max", x, over), _select("argmax", x, over)


def min_with_index(x, over=None) -> tuple[Tensor, Tensor]:
    """(min(x, over), argmin(x, over)), as torch.min(x, dim) gives them."""
    x = _operand(x, "min_with_index", over)
    return reduce("min", x, over), _select("argmin", x, over)
