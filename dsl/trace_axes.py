"""The canonical axis order while an algorithm is traced: the signature's axes, then
those the reshaping ops (split_axis, concat, ...) make. Every node's axes follow it, so
two nodes over the same axes agree on layout."""
from __future__ import annotations

import contextlib
import threading

from .errors import PlaitError, user_location


class _TraceState(threading.local):
    axis_order: tuple[str, ...] | None = None


_state = _TraceState()


@contextlib.contextmanager
def axis_order(order: tuple[str, ...]):
    """While tracing, the canonical order of every axis the algorithm may use."""
    saved = _state.axis_order
    _state.axis_order = order
    try:
        yield
    finally:
        _state.axis_order = saved


def current_axis_order() -> tuple[str, ...] | None:
    """The canonical order while tracing (the signature's axes, then any an op made)."""
    return _state.axis_order


def declare_axes(new, beside: str, before: bool = False) -> None:
    """Make the axes `new` known to the trace, placed next to `beside` in the canonical
    order (after it, or before it); an axis already known keeps its place. The relative
    order of the axes known before is unchanged, so nodes built earlier stay canonical."""
    order = _state.axis_order
    if order is None:
        return
    fresh = [a for a in new if a not in order]
    if not fresh:
        return
    at = order.index(beside) + (0 if before else 1) if beside in order else len(order)
    _state.axis_order = order[:at] + tuple(fresh) + order[at:]


def canonical_axes(axes) -> tuple[str, ...]:
    order = _state.axis_order
    unique = list(dict.fromkeys(axes))
    if order is None:
        return tuple(unique)
    for a in unique:
        if a not in order:
            raise PlaitError(f"unknown axis {a!r}; the algorithm's axes are {', '.join(order)}",
                             user_location())
    return tuple(a for a in order if a in unique)
