"""top-k along a named axis: an op of its own, not a sort and a slice.

    topk(x, 5, over="N", into="K")      x[M, N] -> (values[M, K], int32 indices[M, K])

Semantics, torch.topk(x, k, dim, sorted=True)'s, with dsl/sort.py's order: the k largest
(largest=False: smallest), best first, ties the lower index first, NaN the largest. Each
result is one node `topk` (attribute `part`: 0 the values, 1 the indices; `axis` the
axis read, `into` the new axis of size `k`, `descending` for the largest), so lowering
selects once and both parts read it off. k larger than the axis is refused when sizes
are bound (the `within` relation of dsl/axis_sizes.py).

Lowering keeps the best k of a row in one block (ir/sort_steps.py: sorted runs of the
power of two >= k, merged in rounds) and writes the k positions straight into [.., K].
A row longer than one block is split in two kernels (lowering/graph/topk_split.py): its
second kernel passes the candidates' positions in the whole row as a second operand
(`indices`), which break ties and are the part-1 result, in place of the positions
along `axis`. That form is the lowering's only; the DSL function never makes it.

Gradients: the values' gradient goes back to the position each came from (a scatter_add
of dout at the indices); the indices carry none.
"""
from __future__ import annotations

import numpy as np

from .dtypes import DType
from .errors import PlaitError, user_location
from .node import OpDef, register
from .sort import _flag, _operand, sort_order
from .tensor import Tensor, new_node
from .trace_axes import canonical_axes, declare_axes


def is_topk(op: str) -> bool:
    """Whether `op` is a top-k (its axis is read whole in one block, its `into` written)."""
    return op == "topk"


def _topk_eval(n, ctx, a, *indices):
    axis, into, k = n.attr("axis"), n.attr("into"), n.attr("k")
    src = n.inputs[0].axes
    a = np.broadcast_to(np.asarray(a), tuple(ctx.sizes[d] for d in src))
    d = src.index(axis)
    given = np.broadcast_to(np.asarray(indices[0]), a.shape) if indices else None
    order = np.take(sort_order(a, d, bool(n.attr("descending")), given), range(k), d)
    if n.attr("part") == 0:
        out = np.take_along_axis(a, order, d)
    else:
        out = (order if given is None else np.take_along_axis(given, order, d))
        out = out.astype(np.int32)
    labels = [into if x == axis else x for x in src]
    return np.transpose(out, [labels.index(x) for x in n.axes])


def _topk_vjp(n, g, y, x, *indices):
    if n.attr("part") == 1 or indices:
        return (None,) * len(n.inputs)
    from .gather import scatter_add
    at = topk_part(x, n.attr("axis"), n.attr("into"), n.attr("k"),
                   bool(n.attr("descending")), 1)
    batch = tuple(a for a in n.axes if a != n.attr("into"))
    return (scatter_add(g, at, axis=n.attr("axis"), batch=batch),)


register(OpDef("topk", "topk", _topk_eval, _topk_vjp))


def topk_part(x, over: str, into: str, k: int, descending: bool, part: int) -> Tensor:
    """Part `part` of the top k of x along `over`, over a new axis `into` of size k."""
    declare_axes((into,), over, before=True)     # `over` stays the innermost it was
    axes = canonical_axes([into if a == over else a for a in x.axes])
    dtype = x.dtype if part == 0 else DType.INT32
    return new_node("topk", (x,), axes, dtype, axis=over, into=into, k=int(k), part=part,
                    sizes=(("sum", into, int(k), ()), ("within", over, int(k))),
                    **({"descending": True} if descending else {}))


def topk(x, k=None, over=None, into=None, largest: bool = True):
    """(values, int32 indices) of the k largest (largest=False: smallest) elements of x
    along `over`, sorted as torch.topk(x, k, dim, sorted=True) gives them, over a new axis
    `into` of size k (ties: the lower index first)."""
    x = _operand(x, "topk", over)
    largest = _flag(largest, "topk", "largest")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise PlaitError(f"topk needs k, a Python int >= 1, not {k!r}", user_location())
    if not isinstance(into, str) or not into.isidentifier() or into in x.axes:
        raise PlaitError("topk needs into=AXIS, the name of a new axis of size k (an axis "
                         f"name has one size in an algorithm), not {into!r}", user_location())
    return tuple(topk_part(x, over, into, int(k), largest, part) for part in (0, 1))
