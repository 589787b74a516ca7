"""Sorting along a named axis (topk, which selects rather than sorts, is dsl/topk.py).

    sort(x, over="N")                          x[M, N] -> [M, N]: each row ascending
    sort(x, over="N", return_indices=True)     -> (values, int32 positions in x)

Semantics, those of torch.sort(stable=True) and torch.topk(sorted=True): ties keep the
lower index first (in both directions), NaN sorts as the largest value (last ascending,
first descending), -0.0 and 0.0 tie. Values keep x's dtype; the indices are int32, as
argmax's (dsl/select.py says why). bool is refused (cast it to int32 first).

Each result is one node `sort` (attribute `part`: 0 the values, 1 the indices) with the
same operand, axis and direction, so lowering sorts once and both parts read it off. A
kernel sorts a row in one block (a bitonic network in shared memory, ir/sort_steps.py), so
the sorted axis must fit a block: at most SORT_MAX_EXTENT elements, refused by name when
sizes are bound in lowering.

Gradients: the values' gradient sends each output's gradient back to the position it came
from (a scatter_add of dout at the indices); the indices carry none.
"""
from __future__ import annotations

import numpy as np

from .dtypes import DType
from .errors import PlaitError, user_location
from .node import OpDef, register
from .tensor import Tensor, along_one_axis, new_node

SORT_MAX_EXTENT = 4096      # one block's bitonic network: 4096 keys and indices in 32 KB
# A split topk's second kernel sorts candidates with their positions in the whole row
# (lowering/graph/topk_split.py); its sentinels are GIVEN_SENTINEL + their position in the
# network, past every position of a row (rows are below 2^30 elements).
GIVEN_SENTINEL = 1 << 30


def is_sort(op: str) -> bool:
    """Whether `op` is a sort (its result keeps the sorted axis, whole in one block)."""
    return op == "sort"


def walks_rows(op: str) -> bool:
    """Whether `op` needs its axis whole in one block, one block per row: a scan, a sort
    or a topk (the kernel graph groups, schedules and refuses them alike)."""
    from .cumulative import is_scan
    return is_scan(op) or is_sort(op) or op == "topk"


def sort_order(x: np.ndarray, axis: int, descending: bool,
               position: np.ndarray | None = None) -> np.ndarray:
    """The stable order of x along `axis` with NaN largest: the positions to take. Ties
    go by `position` where given (distinct along the axis), else by index."""
    x = np.asarray(x)
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
    key = np.where(nan, 0, x).astype(np.float64)
    if descending:
        key, nan = -key, ~nan          # NaN first, then the largest
    if position is None:
        position = np.broadcast_to(np.arange(x.shape[axis]).reshape(
            [-1 if d == axis % x.ndim else 1 for d in range(x.ndim)]), x.shape)
    keys = [np.moveaxis(a, axis, -1) for a in (position, key, nan)]
    flat = [k.reshape(-1, x.shape[axis]) for k in keys]
    order = np.stack([np.lexsort((p, k, n)) for p, k, n in zip(*flat)]) if flat[0].size \
        else np.zeros(flat[0].shape, np.int64)
    return np.moveaxis(order.reshape(keys[0].shape), -1, axis)


def _sort_eval(n, ctx, a):
    axis = n.axes.index(n.attr("axis"))
    a = np.broadcast_to(np.asarray(a), tuple(ctx.sizes[x] for x in n.axes))
    order = sort_order(a, axis, bool(n.attr("descending")))
    if n.attr("part") == 1:
        return order.astype(np.int32)
    return np.take_along_axis(a, order, axis)


def _sort_vjp(n, g, y, x):
    if n.attr("part") == 1:
        return (None,)
    from .gather import scatter_add
    from .reshape import slice as axis_slice
    axis = n.attr("axis")
    indices = sort_part(n.inputs[0], axis, bool(n.attr("descending")), 1)
    src = "_sorted_" + axis         # the sorted positions, an axis of their own
    batch = tuple(a for a in n.axes if a != axis)
    return (scatter_add(axis_slice(g, **{axis: (0, None)}, into=src),
                        axis_slice(indices, **{axis: (0, None)}, into=src),
                        axis=axis, batch=batch),)


register(OpDef("sort", "sort", _sort_eval, _sort_vjp))


def sort_part(x, over: str, descending: bool, part: int) -> Tensor:
    """Part `part` of x sorted along `over` (0 the values, 1 their int32 positions)."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    dtype = x.dtype if part == 0 else DType.INT32
    return new_node("sort", (x,), x.axes, dtype, axis=over, part=part,
                    **({"descending": True} if descending else {}))


def _operand(x, what: str, over) -> Tensor:
    x = along_one_axis(x, what, over, "a sort runs along one axis")
    if x.dtype == DType.BOOL:
        raise PlaitError(f"{what} of a bool tensor is not supported: cast(x, 'int32') "
                         "first", user_location())
    if x.dtype in (DType.FP8_E4M3, DType.FP8_E5M2, DType.INT64):
        raise PlaitError(f"{what} of {x.dtype} is not supported (fp32, bf16, fp16 and int32 "
                         "are): cast x first", user_location())
    return x


def _flag(value, what: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise PlaitError(f"{what}(..., {name}=...) takes True or False, not {value!r}",
                         user_location())
    return value


def sort(x, over=None, descending: bool = False, return_indices: bool = False):
    """x sorted along `over` (stable; NaN largest), as torch.sort(x, dim, stable=True);
    with return_indices=True the pair (values, int32 indices)."""
    x = _operand(x, "sort", over)
    descending = _flag(descending, "sort", "descending")
    values = sort_part(x, over, descending, 0)
    if not _flag(return_indices, "sort", "return_indices"):
        return values
    return values, sort_part(x, over, descending, 1)
