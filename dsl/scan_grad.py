"""Gradient rules of the scans (dsl/scan.py), written with the DSL itself.

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
  j, so dx_i is the sum of g over i's segment [i, next record), a reverse cumsum R
  differenced at segment ends: R_i - R_next, R_next read with `take` at the next record's
  position (a reverse cummin of the record positions).
"""
from __future__ import annotations

from .dtypes import DType


def _ops():
    from . import scan, tensor
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


def _extreme_vjp(n, g, y, x):
    from .gather import take
    scan, t = _ops()
    if not x.dtype.is_float:
        return (None,)
    axis, rev = n.attr("axis"), bool(n.attr("reverse"))
    pos = t.index(axis)
    record = (x == y) | (x != x)              # holds its running extreme (or is NaN)
    last = t.size(axis)
    # The next record strictly after i (in scan order), or one past the end.
    later = t.where(record, pos, -1 if rev else last)
    marker = scan.scan_node("cummax" if rev else "cummin", later, axis, not rev)
    step = -1 if rev else 1
    total = _other_way(g, n)                  # R_i: g summed from i to the end
    beyond = pos + step                       # the position after i (scan order)
    inside = (beyond >= 0) & (beyond < last)
    nxt = t.where(inside, take(marker, t.where(inside, beyond, 0), axis=axis),
                  -1 if rev else last)
    ok = (nxt >= 0) & (nxt < last)
    r_next = t.where(ok, take(total, t.where(ok, nxt, 0), axis=axis), 0.0)
    return (t.where(record, total - r_next, 0.0),)


VJP = {"cumsum": _cumsum_vjp, "cumprod": _cumprod_vjp, "cummax": _extreme_vjp,
       "cummin": _extreme_vjp}
