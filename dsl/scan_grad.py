"""Gradient rules of the scans (dsl/cumulative.py), written with the DSL itself.

Positions are in scan order: "later" means towards the end of the axis, or towards its
start for a reverse scan; each rule's gradient runs the other way.

- cumsum: dx_i = sum of g_j over j at or after i: a cumsum of g the other way.
- cumprod (torch's rule, zeros included): before the first zero of a row every x_i is
  nonzero and dx_i = (sum over j >= i of g_j * y_j) / x_i; at the first zero z,
  dx_z = sum over j >= z of g_j * y'_j, with y' the cumprod of x with that one zero
  made 1 (the product of every factor but x_z); after it, every y_j holds the zero x_z
  and dx_i = 0.
- cummax / cummin: each g_j goes to the position holding y_j: the latest i <= j where
  x_i == y_j (ties: the latest, as torch.cummax's index), or the latest NaN. Those
  positions are the "records" where x_i == y_i; g_j goes to the last record at or before
  j, so dx_i is the sum of g over i's segment [i, next record): a segmented sum, one
  generic `scan` the other way (`_segment` is its combine).
"""
from __future__ import annotations

from .dtypes import DType


def _ops():
    from . import cumulative as scan
    from . import tensor
    return scan, tensor


def _other_way(g, n):
    scan, _ = _ops()
    return scan.scan_node("cumsum", g, n.attr("axis"), not n.attr("reverse"))


def _cumsum_vjp(n, g, y, x):
    return (_other_way(g, n),)


def _cumprod_vjp(n, g, y, x):
    scan, t = _ops()
    if not x.dtype.is_float:
        return (None,)
    axis, rev = n.attr("axis"), bool(n.attr("reverse"))
    zeros = scan.scan_node("cumsum", t.cast(x == 0.0, DType.INT32), axis, rev)
    before = zeros == 0                       # no zero at or before i (scan order)
    first = (x == 0.0) & (zeros == 1)         # the first zero itself
    safe = t.where(before, x, 1.0)
    nonzero_part = _other_way(g * y, n) / safe
    skipped = scan.scan_node("cumprod", t.where(first, 1.0, x), axis, rev)
    zero_part = _other_way(g * skipped, n)
    return (t.where(before, nonzero_part, t.where(first, zero_part, 0.0)),)


def _segment(left, right):
    """The combine of the segment sums: a range's state (first, later, total) holds
    whether its first position is a record (2 for the empty range, the identity),
    whether a record follows inside it, and g summed from its first position up to the
    next record. A record on the right stops the left's sum there."""
    from .tensor import where
    first1, later1, total1 = left
    first2, later2, total2 = right
    stopped = (later1 > 0) | (first2 == 1)
    later = where((later1 > 0) | (first2 == 1) | (later2 > 0), 1, 0)
    joined = (first1, later, where(stopped, total1, total1 + total2))
    return tuple(where(first1 == 2, r, where(first2 == 2, a, j))
                 for a, r, j in zip(left, right, joined))


def _extreme_vjp(n, g, y, x):
    from .scan_generic import scan
    _, t = _ops()
    if not x.dtype.is_float:
        return (None,)
    axis, rev = n.attr("axis"), bool(n.attr("reverse"))
    record = (x == y) | (x != x)              # holds its running extreme (or is NaN)
    first = t.where(record, 1, 0)
    # segment sums run the other way: from each record to the next one (scan order)
    combine = (lambda a, b: _segment(b, a)) if rev else _segment
    parts = scan(combine, (2, 0, 0.0), (first, t.where(record, 0, 0), g), over=axis,
                 reverse=not rev)
    return (t.where(record, parts[2], 0.0),)


VJP = {"cumsum": _cumsum_vjp, "cumprod": _cumprod_vjp, "cummax": _extreme_vjp,
       "cummin": _extreme_vjp}
